"""Celery monitoring events over a Redis side channel, so Flower works although the broker is SQS.

Jobs stay on SQS (whose transport has no topic or fanout exchange, so no ``celeryev`` events and no
remote control); only the events go to Redis, at ``Settings.events_url`` (its own database index)::

    worker consumer ── task-received/-started/-succeeded/-failed/-retried ──┐
      (EventsSideChannel mixed into tasks.worker.ServiceConsumer)           │
    publisher ── task-sent (send_task_sent, after_task_publish receiver) ───┼──► Redis events_url
    job child ── task-received + task-started at its lease (send_run_started)┘         │
                                                                  flower --broker=<events URL>

* **workers**: :class:`EventsSideChannel` returns an events-URL connection from
  ``Consumer.connection_for_write()``, which only the ``Events`` bootstep calls; a worker whose
  events Redis is down at start runs without events (logged); each later publish is bounded by
  ``events_redis_timeout_s``.
* **publishers**: ``task_send_sent_event`` stays off (it would go to SQS); :func:`send_task_sent`
  sends the same event for every publish, and logs, never raises, a failure.
* **a job's own start**: :class:`RunReportedDispatcher` (``tasks.worker.run_reported_strategy``)
  holds back the consumer's ``task-received``/``task-started`` of a :class:`tasks.base.FairTask`; the
  child sends them at ``lease_acquired``.
* **Flower** (:func:`devstack.stack.flower_command`): task id = job id, kwargs ``{"tenant_id",
  "job_id"}`` shown (:data:`FLOWER_TASKS_COLUMNS`), searchable as ``kwargs:tenant_id=acme``.

Nothing of Flower that uses remote control works (why: docs/design.md, "Flower counts runs" and
"Remote control, gossip, mingle are off").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from celery import current_app
from celery.signals import after_task_publish
from kombu.exceptions import OperationalError

from imposition.common.settings import get_settings
from leases import signals

log = logging.getLogger(__name__)

#: Flower's task-list columns: its default (name, uuid, state, received, runtime, worker) with the
#: kwargs, which hold the tenant, and the start (Flower's ``--tasks_columns``).
FLOWER_TASKS_COLUMNS = "name,uuid,state,kwargs,received,started,runtime,worker"
#: Flower options: no broadcast of control commands (``enable_events``) every few seconds; the columns.
FLOWER_OPTIONS = ("--enable_events=False", f"--tasks_columns={FLOWER_TASKS_COLUMNS}")
#: The events a FairTask's delivery sends only once its job has a lease (:func:`send_run_started`).
RUN_START_EVENTS = ("task-received", "task-started")


#: Where a worker's events go when the events Redis is down at start: kombu's in-memory transport,
#: on which nothing consumes the event exchange, so they are dropped.
DISCARD_EVENTS_URL = "memory://"


def _transport_options(max_retries: int) -> dict:
    timeout_s = get_settings().events_redis_timeout_s
    return {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s, "max_retries": max_retries}


class EventsSideChannel:
    """Consumer mixin: the worker's monitoring events go to ``Settings.events_url``, not the broker.

    Mix in before :class:`celery.worker.consumer.Consumer`. With ``events_url`` empty the broker
    connection is used (Celery's default).
    """

    def connection_for_write(self, url=None, heartbeat=None):
        """The connection the ``Events`` bootstep publishes on: the events URL.

        Monitoring must never keep a worker from working: if the events Redis does not answer
        within ``events_connect_retries`` retries, the error is logged and the events go to an
        in-memory transport that drops them (kombu's ``memory://``, nothing bound to it). The next
        consumer restart tries Redis again.
        """
        settings = get_settings()
        if url or not settings.events_url:
            return super().connection_for_write(url=url, heartbeat=heartbeat)
        connection = self.app.connection_for_write(url=settings.events_url, heartbeat=heartbeat,
                                                   transport_options=_transport_options(settings.events_connect_retries))
        try:
            connection.ensure_connection(max_retries=settings.events_connect_retries)
        except (OperationalError, OSError) as exc:
            log.error("events side channel %s unreachable (%s): this worker's monitoring events are dropped "
                      "until its consumer restarts; Flower will not see them", connection.as_uri(), exc)
            connection.release()
            return self.app.connection_for_write(url=DISCARD_EVENTS_URL)
        return connection


class RunReportedDispatcher:
    """The event dispatcher of one consumer as a FairTask's requests see it: every event but
    :data:`RUN_START_EVENTS`, which the job sends itself once it has its lease. Reads the
    consumer's current dispatcher at each use (a consumer restart replaces it)."""

    def __init__(self, consumer) -> None:
        self._consumer = consumer

    @property
    def enabled(self) -> bool:
        dispatcher = self._consumer.event_dispatcher
        return bool(dispatcher is not None and dispatcher.enabled)

    def send(self, type, *args, **fields):  # noqa: A002 (Celery's parameter name)
        if type in RUN_START_EVENTS:
            return None
        return self._consumer.event_dispatcher.send(type, *args, **fields)

    def __getattr__(self, name: str):
        return getattr(self._consumer.event_dispatcher, name)


# --- publishers' task-sent ------------------------------------------------------------------------

_dispatch_lock = threading.Lock()
_dispatchers: dict[tuple, Any] = {}  # (events URL, pid, hostname) → EventDispatcher; never across fork()
_down_until: dict[tuple, float] = {}  # (events URL, pid, hostname) → monotonic time of the next try


def _dispatcher(url: str, hostname: str | None = None):
    """This process's dispatcher on the events URL, sending as ``hostname`` (default: the app's);
    created on first use. Call under the lock."""
    key = (url, os.getpid(), hostname)
    dispatcher = _dispatchers.get(key)
    if dispatcher is None:
        app = current_app  # the publishing process's app (tasks.app)
        connection = app.connection_for_write(url=url, transport_options=_transport_options(max_retries=0))
        dispatcher = _dispatchers[key] = app.events.Dispatcher(connection, hostname=hostname, enabled=True,
                                                               buffer_while_offline=False)
    return dispatcher


def _forget_dispatcher(url: str, hostname: str | None = None) -> None:
    """Drop this process's dispatcher and its connection after a failure; the next event reconnects."""
    dispatcher = _dispatchers.pop((url, os.getpid(), hostname), None)
    if dispatcher is None:
        return
    for close in (dispatcher.close, dispatcher.connection.close):
        try:
            close()
        except Exception:  # noqa: BLE001 - a broken connection may fail to close in many ways
            log.debug("closing the events connection failed", exc_info=True)


def task_sent_fields(headers: dict, exchange: str | None, routing_key: str | None) -> dict:
    """The fields Celery's own ``task-sent`` event carries, from a protocol-2 message's headers."""
    return {
        "uuid": headers.get("id"),
        "root_id": headers.get("root_id"),
        "parent_id": headers.get("parent_id"),
        "name": headers.get("task"),
        "args": headers.get("argsrepr"),
        "kwargs": headers.get("kwargsrepr"),
        "retries": headers.get("retries"),
        "eta": headers.get("eta"),
        "expires": headers.get("expires"),
        "queue": routing_key,
        "exchange": exchange,
        "routing_key": routing_key,
    }


def _send(events: list[tuple[str, dict]], task_id: str | None, hostname: str | None = None) -> None:
    """Send ``events`` (type, fields) over the side channel as ``hostname``; a failure is logged and
    the channel is not tried again for ``events_retry_after_s`` in this process, never raised."""
    url = get_settings().events_url
    if not url:
        return
    key = (url, os.getpid(), hostname)
    with _dispatch_lock:
        if time.monotonic() < _down_until.get(key, 0.0):
            return  # failed a moment ago: do not add a connect timeout to every publish of an outage
        try:
            dispatcher = _dispatcher(url, hostname)
            for event_type, fields in events:
                dispatcher.send(event_type, **fields)
        except Exception as exc:  # noqa: BLE001 - monitoring never fails a publish or a job
            retry_after_s = get_settings().events_retry_after_s
            log.warning("%s event of %s not sent to the events channel (%s); not trying again for %g s",
                        events[0][0], task_id, exc, retry_after_s)
            _forget_dispatcher(url, hostname)
            _down_until[key] = time.monotonic() + retry_after_s


def send_task_sent(sender=None, headers=None, exchange=None, routing_key=None, **_: object) -> None:
    """Send ``task-sent`` for a message just published to SQS, over the events side channel."""
    if not headers or "id" not in headers:
        return
    _send([("task-sent", task_sent_fields(headers, exchange, routing_key))], headers.get("id"))


def send_run_started(sender=None, **_: object) -> None:
    """``task-received`` and ``task-started`` of a job that has just got its lease (the fields the
    worker's consumer would have sent), as the worker node that runs it (see module docstring)."""
    request = getattr(sender, "request", None)
    if request is None or not getattr(request, "hostname", None) or not get_settings().events_url:
        return  # called directly (tests, eager): no worker, no events
    received = {
        "uuid": request.id, "name": sender.name,
        "args": getattr(request, "argsrepr", None) or repr(tuple(request.args or ())),
        "kwargs": getattr(request, "kwargsrepr", None) or repr(request.kwargs or {}),
        "root_id": request.root_id, "parent_id": request.parent_id, "retries": request.retries or 0,
        "eta": request.eta, "expires": request.expires,
    }
    _send([("task-received", received), ("task-started", {"uuid": request.id})],  # the dispatcher adds pid
          request.id, request.hostname)


def install() -> None:
    """Connect the publishers' task-sent receiver and the run-reported events' receivers (idempotent: a receiver connected twice is connected once)."""
    after_task_publish.connect(send_task_sent)
    signals.lease_acquired.connect(send_run_started)
