"""The engine gate of an imposition node: without a working engine and licence, the node takes no jobs.

Only for ``Settings.engine = "pdftoolbox"`` (the open engine needs no licence), on a node consuming the
imposition queue. In the worker's main process::

    worker_ready ─► check_engine (a canary run of the real process plan, licence options included;
                    the pool's slots against pdftoolbox_licence_processes)
                    ├─ passes ─► the node consumes as usual; imposition_engine_ready{engine} = 1
                    └─ fails ──► cancel_task_queue(imposition): nothing is received; the reason is
                                 logged at ERROR; imposition_engine_ready = 0, imposition_engine_check_failures_total{reason} + 1
    then again (a daemon thread) ─► a change is applied on the worker's event loop: add_task_queue
                    once a check passes, cancel again once one fails

A canary run that gets its licence spends a licence run, so checks are at most every
``pdftoolbox_check_interval_s`` (5 minutes by default; every 30 s was 2,880 runs a node a day).
A node closed by a check that spent none (:data:`FREE_FAILURES`: the licence refused, too many
slots) checks again after ``pdftoolbox_closed_check_interval_s``, so it reopens within that of the
licence's return (:meth:`EngineGate.next_check_s`).

``worker_ready`` is sent after the consumer is set up and before its event loop receives the first
message, so a node whose first check fails never receives a job. A job that meets a licence outage
before the node's next check (pdfToolbox exit 100) is not charged an attempt
(:class:`imposition.engine.errors.LicenceUnavailable` is an ``EngineUnavailable``); its retry waits in
SQS while the nodes are closed. Alert: ``ImpositionEngineUnavailable``
(:mod:`imposition.observability.alerts`); runbook: docs/operations.md, "ImpositionEngineUnavailable".
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from imposition.common.settings import get_settings
from imposition.engine.backends.pdftoolbox import EngineCheck, check_engine
from imposition.observability.metrics import get_metrics

log = logging.getLogger(__name__)

#: Reasons of a failed check that spent no licence run: pdfToolbox refused by the licence servers
#: (exit code 100: it ran nothing), or not started because the worker's slots exceed the licence. An
#: ``installation`` failure may come from a run that had its licence (exit codes 101 to 104), so it
#: waits the full interval, as ``engine`` does.
FREE_FAILURES = frozenset({"licence", "processes"})


class EngineGate:
    """The gate of one node: applies each :class:`EngineCheck` to the consumer of the imposition queue.

    Args:
        consumer: Celery's consumer of the node (``worker_ready``'s sender).
        queue: the imposition queue's name.
        engine: the engine's name (the metrics' label).
    """

    def __init__(self, consumer: Any, queue: str, engine: str) -> None:
        self.consumer = consumer
        self.queue = queue
        self.engine = engine
        #: True while the node consumes the imposition queue.
        self.open = True
        #: The reason of the last check's verdict (``ok`` or a failure's).
        self.last_reason = "ok"
        self._last_detail: str | None = None
        self._lock = threading.Lock()

    def apply(self, verdict: EngineCheck) -> None:
        """Open or close the node for ``verdict`` (on the event loop, or before it runs), record the
        metrics and log a change (a failure at ERROR, naming its reason and what failed)."""
        self.last_reason = verdict.reason
        try:
            self._switch(verdict)
        except Exception as exc:  # noqa: BLE001 - on the event loop: never stop the worker; the next check retries
            log.error("engine gate: could not %s the %s queue (%s); retrying at the next check",
                      "resume" if verdict.ok else "cancel", self.queue, exc)
        metrics = get_metrics()
        metrics.engine_ready.labels(self.engine).set(1 if self.open and verdict.ok else 0)
        if not verdict.ok:
            metrics.engine_check_failures.labels(self.engine, verdict.reason).inc()

    def _switch(self, verdict: EngineCheck) -> None:
        with self._lock:
            if verdict.ok and not self.open:
                self.consumer.add_task_queue(self.queue)
                self.open, self._last_detail = True, None
                log.warning("engine check passed (%s): this node takes jobs from %s again", verdict.detail, self.queue)
            elif not verdict.ok and self.open:
                self.consumer.cancel_task_queue(self.queue)
                self.open, self._last_detail = False, verdict.detail
                log.error("engine check failed (%s): this node takes no jobs from %s until a check passes: %s",
                          verdict.reason, self.queue, verdict.detail)
            elif not verdict.ok and verdict.detail != self._last_detail:
                self._last_detail = verdict.detail
                log.error("engine check failed again (%s), still taking no jobs: %s", verdict.reason, verdict.detail)

    def next_check_s(self) -> float:
        """Seconds from the last check to the next: ``pdftoolbox_check_interval_s``, or
        ``pdftoolbox_closed_check_interval_s`` (never longer) after a failure that spent no licence
        run (:data:`FREE_FAILURES`)."""
        settings = get_settings()
        if self.last_reason in FREE_FAILURES:
            return min(settings.pdftoolbox_closed_check_interval_s, settings.pdftoolbox_check_interval_s)
        return settings.pdftoolbox_check_interval_s

    def recheck_forever(self, pool_processes: int, stop: threading.Event) -> None:
        """Check again :meth:`next_check_s` after each check until ``stop``; each verdict is handed to
        the event loop (the consumer is not thread-safe), or applied here when the worker has none."""
        while not stop.wait(self.next_check_s()):
            verdict = checked(pool_processes)
            self.last_reason = verdict.reason  # here too: the event loop may apply it after the next wait began
            hub = getattr(self.consumer, "hub", None)
            if hub is not None:
                hub.call_soon(self.apply, verdict)
            else:
                self.apply(verdict)


def checked(pool_processes: int) -> EngineCheck:
    """:func:`check_engine` with the process's settings; a check that itself raised is a failed one
    (reason ``engine``), so the gate never stays open, or its thread dead, on a bug of the check."""
    try:
        return check_engine(get_settings(), pool_processes=pool_processes)
    except Exception as exc:  # noqa: BLE001 - any failure of the check closes the node, with its reason logged
        log.exception("engine check raised")
        return EngineCheck(False, "engine", f"the engine check itself failed: {type(exc).__name__}: {exc}")


_state: dict[str, Any] = {}


def _on_worker_ready(sender: Any = None, **_: object) -> None:
    settings = get_settings()
    consumer = sender
    queues = {q.name for q in consumer.app.amqp.queues.consume_from.values()}
    if settings.engine != "pdftoolbox" or settings.imposition_queue not in queues:
        return
    gate = EngineGate(consumer, settings.imposition_queue, settings.engine)
    pool_processes = int(consumer.pool.num_processes)
    gate.apply(checked(pool_processes))
    stop = threading.Event()
    thread = threading.Thread(target=gate.recheck_forever, args=(pool_processes, stop), daemon=True,
                              name="engine-gate")
    _state.update(gate=gate, stop=stop)
    thread.start()


def _on_worker_shutdown(**_: object) -> None:
    if "stop" in _state:
        _state["stop"].set()


def install() -> None:
    """Connect the gate's hooks (worker_ready, worker_shutdown); idempotent."""
    worker_ready.connect(_on_worker_ready)
    worker_shutdown.connect(_on_worker_shutdown)
