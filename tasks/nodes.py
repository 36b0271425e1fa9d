"""A worker node consuming the imposition queue registers its slots while it runs (docs/design.md §3).

``worker_ready`` (main process, before the consumer's event loop delivers a message):
:func:`leases.nodes.register` with the pool's concurrency and the node's clock against the DynamoDB
endpoint's (:mod:`leases.skew`), so the sweeper knows the node's clock before it sees a lease of it.
Then a daemon thread beats every ``heartbeat_interval_s``, each beat reporting the clock again (a
beat that finds the node dropped registers it again). ``worker_shutdown``:
:func:`leases.nodes.deregister`. A node killed outright stops beating and the sweeper drops it
after ``node_ttl_s``. Failures are logged and retried at the next beat: the registry only decides
borrowing, never whether a job runs.
"""

from __future__ import annotations

import logging
import threading

from celery.signals import worker_ready, worker_shutdown

from leases import nodes, skew
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)
_state: dict = {}


def _beat(name: str, slots: int, registered: bool) -> bool:
    """One beat of node ``name``: its clock reading, then a beat, or a registration if the node is
    not (or no longer) registered. Returns whether the node is registered; failures are logged."""
    try:
        clock = _clock_reading(name)  # reported with the beat: the sweeper compares it with its own
        if not (registered and nodes.beat(name, clock=clock)):
            nodes.register(name, slots, clock=clock)  # first, or after the sweeper dropped the node
        return True
    except Exception as exc:  # noqa: BLE001 - the registry is retried at the next beat
        log.warning("node %s: slot registry not reachable (%s); retrying in %s s", name, exc,
                    get_settings().heartbeat_interval_s)
        return False


def _beat_forever(name: str, slots: int, registered: bool, stop: threading.Event) -> None:
    interval_s = get_settings().heartbeat_interval_s
    while not stop.wait(interval_s):
        registered = _beat(name, slots, registered)


def _clock_reading(name: str) -> skew.ClockReading | None:
    """This node's clock against the DynamoDB endpoint's (:func:`leases.skew.endpoint_offset`), or
    None if it could not be read (the beat goes on; the sweeper then judges this node by its clock)."""
    try:
        return skew.endpoint_offset()
    except Exception as exc:  # noqa: BLE001 - a beat without a clock reading is still a beat
        log.info("node %s: clock not read against the endpoint (%s)", name, exc)
        return None


def _on_worker_ready(sender=None, **_: object) -> None:
    consumer = sender
    queues = {q.name for q in consumer.app.amqp.queues.consume_from.values()}
    if get_settings().imposition_queue not in queues:
        return
    name, slots = consumer.hostname, consumer.pool.num_processes
    # The first registration runs here, before the consumer's event loop delivers a message, so the
    # node's clock reading is in the registry before any lease of it (leases/skew.py).
    registered = _beat(name, slots, registered=False)
    stop = threading.Event()
    thread = threading.Thread(target=_beat_forever, args=(name, slots, registered, stop), daemon=True,
                              name="node-beat")
    _state.update(name=name, stop=stop, thread=thread)
    thread.start()


def _on_worker_shutdown(**_: object) -> None:
    if "name" not in _state:
        return
    _state["stop"].set()
    try:
        nodes.deregister(_state["name"])
    except Exception as exc:  # noqa: BLE001 - the sweeper drops it after node_ttl_s
        log.warning("node %s could not leave the slot registry (%s); the sweeper will drop it", _state["name"], exc)


def install() -> None:
    """Connect the slot registry's hooks (worker_ready, worker_shutdown) (idempotent: a receiver connected twice is connected once)."""
    worker_ready.connect(_on_worker_ready)
    worker_shutdown.connect(_on_worker_shutdown)
