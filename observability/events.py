"""Celery monitoring events over a Redis side channel, so Flower works although the broker is SQS.

Celery's SQS transport supports only direct exchanges, while monitoring events travel on the topic
exchange ``celeryev`` and remote control on fanout exchanges; on SQS, Flower sees nothing. Jobs
stay on SQS; only the events take another road, the Redis the service already runs, at
``Settings.events_url`` (its own database index):

* **workers** (``task-received``, ``-started``, ``-succeeded``, ``-failed``, ``-retried``…): Celery's
  ``Events`` bootstep builds its dispatcher on ``Consumer.connection_for_write()``, and nothing
  else in the consumer calls that method. :class:`EventsSideChannel`, mixed into the worker's
  consumer class (``tasks.worker.ServiceConsumer``), returns a connection to the events URL there.
  ``worker_send_task_events`` turns the task events on (``celeryconfig``). A worker whose events
  Redis is down when it starts runs without events (logged) rather than wait for it; one that
  loses it later keeps Celery's behaviour (events buffered, each publish attempt bounded by
  ``events_redis_timeout_s``).
* **publishers** (``task-sent``): Celery sends ``task-sent`` through the publishing producer, i.e.
  to SQS, so ``task_send_sent_event`` stays off; instead :func:`send_task_sent` (an
  ``after_task_publish`` receiver) sends the same event, with the same fields, from a per-process
  dispatcher on the events URL. It runs for every publish: a submission, a deferral or retry copy,
  the sweeper's re-publish, beat's maintenance tasks. A failure to send is logged, never raised:
  monitoring must not break a submission.
* **Flower** reads the channel as its broker: ``celery -A tasks --broker=<events URL> flower``
  (:func:`flower_command`). Task kwargs are ``{"tenant_id", "job_id"}`` and the task id is the job
  id, so Flower's task list can be searched by tenant (``kwargs:tenant_id=acme``).

What cannot work: everything in Flower that uses remote control (the worker pages' pool, queue,
limit and shutdown controls, task revoke/terminate, ``inspect`` data such as reserved, scheduled and
active tasks, registered tasks, stats). Remote control is a broadcast over the *task* broker, which
is SQS; workers run with remote control off. Flower's periodic ``inspect`` calls go to the Redis
channel, where no worker listens: they time out quietly after ``--inspect_timeout``.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from celery.signals import after_task_publish
from kombu.exceptions import OperationalError

from service.settings import get_settings

log = logging.getLogger(__name__)

#: Flower options that keep it from broadcasting control commands (``enable_events``) every few seconds.
FLOWER_OPTIONS = ("--enable_events=False",)


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


# --- publishers' task-sent ------------------------------------------------------------------------

_dispatch_lock = threading.Lock()
_dispatchers: dict[tuple[str, int], object] = {}  # (events URL, pid) → EventDispatcher; never across fork()
_down_until: dict[tuple[str, int], float] = {}  # (events URL, pid) → monotonic time of the next try


def _dispatcher(url: str):
    """This process's dispatcher on the events URL (created on first use). Call under the lock."""
    key = (url, os.getpid())
    dispatcher = _dispatchers.get(key)
    if dispatcher is None:
        from tasks.celery_app import app  # noqa: PLC0415 (the app imports this package's wiring)

        connection = app.connection_for_write(url=url, transport_options=_transport_options(max_retries=0))
        dispatcher = _dispatchers[key] = app.events.Dispatcher(connection, enabled=True,
                                                               buffer_while_offline=False)
    return dispatcher


def _forget_dispatcher(url: str) -> None:
    """Drop this process's dispatcher and its connection after a failure; the next event reconnects."""
    dispatcher = _dispatchers.pop((url, os.getpid()), None)
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


@after_task_publish.connect
def send_task_sent(sender=None, headers=None, exchange=None, routing_key=None, **_: object) -> None:
    """Send ``task-sent`` for a message just published to SQS, over the events side channel."""
    url = get_settings().events_url
    if not url or not headers or "id" not in headers:
        return
    key = (url, os.getpid())
    with _dispatch_lock:
        if time.monotonic() < _down_until.get(key, 0.0):
            return  # failed a moment ago: do not add a connect timeout to every publish of an outage
        try:
            _dispatcher(url).send("task-sent", **task_sent_fields(headers, exchange, routing_key))
        except Exception as exc:  # noqa: BLE001 - monitoring never fails a publish
            retry_after_s = get_settings().events_retry_after_s
            log.warning("task-sent event of %s not sent to the events channel (%s); not trying again for %g s",
                        headers.get("id"), exc, retry_after_s)
            _forget_dispatcher(url)
            _down_until[key] = time.monotonic() + retry_after_s


# --- Flower ---------------------------------------------------------------------------------------


def flower_command(port: int, *, address: str = "127.0.0.1", app: str = "tasks") -> list[str]:
    """Command line of Flower reading the events side channel: ``celery -A tasks --broker=<events URL>
    flower --port=… --address=… --enable_events=False``.

    Flower's HTTP API (``/api/...``) also needs authentication or ``FLOWER_UNAUTHENTICATED_API=true``
    in its environment (Flower 2.x).

    Raises:
        ValueError: ``events_url`` is empty (no side channel configured).
    """
    from service.stack import celery_command  # noqa: PLC0415

    url = get_settings().events_url
    if not url:
        raise ValueError("events_url is empty: Flower needs the events side channel (IMPOSITION_EVENTS_URL)")
    return celery_command(f"--broker={url}", "flower", f"--port={port}", f"--address={address}",
                          *FLOWER_OPTIONS, app=app)
