"""Clock skew between the worker nodes and the sweeper (docs/operations.md, "ImpositionClockSkew").

A lease's ``expires_at`` is written by its holder's clock and judged by the sweeper's: a holder
whose clock is behind by more than a lease's remaining life writes leases that look expired at
once, and the sweeper would re-run its jobs. So both sides measure their clock against one
reference, the DynamoDB endpoint's (the HTTP ``Date`` of every response: whole seconds, kept on
NTP by AWS): :func:`endpoint_offset` times one small read, within 0.5 s plus half the round trip.

A node reports its reading with every registry heartbeat (:func:`report_attributes`,
:func:`report_actions`: ``ClusterItem.clock_offset_s``, ``clock_error_s``). Each sweep,
:func:`refresh` measures the sweeper's own, keeps each node's skew (node − sweeper, s; positive:
ahead) for that sweep, warns about a node beyond ``Clocks.clock_skew_warn_s`` (a quarter of the
lease TTL) and sends :data:`leases.signals.node_clock_skew` (``node_clock_skew_seconds{worker}``).

The sweeper then skips a lease expired by its clock but not by its node's (:func:`held_by_skew`:
``expires_at − skew + error_s > now``), and keeps such a node's registration
(:func:`registration_held`). A node with no reading is judged by the sweeper's clock, as before;
the correction only holds back, never reclaims earlier.

A skew whose error bound is above the skew bound (``Clocks.clock_skew_warn_s``) says nothing
(:func:`says_something`): a reading through a slow endpoint (a DynamoDB stall) takes half the
round trip as its error, and its offset is of the same size. Such a node is neither warned about,
nor exported (its gauge becomes NaN: unknown), nor held: it is judged by the sweeper's clock.
"""

from __future__ import annotations

import email.utils
import logging
import threading
import time
from dataclasses import dataclass

from leases.models import CLUSTER_SLOTS_KEY, NODE_KEY_PREFIX, NODE_PARTITION, ClusterItem
from imposition.common import aws
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClockReading:
    """This process's clock against the endpoint's.

    Attributes:
        offset_s: local clock − endpoint clock, seconds (positive: this clock is ahead).
        error_s: bound on the reading's error, seconds (0.5 s of the header's resolution plus half
            the round trip).
        at: the local clock when read (epoch s).
    """

    offset_s: float
    error_s: float
    at: float


@dataclass(frozen=True)
class NodeSkew:
    """One node's clock against the sweeper's.

    Attributes:
        node: the node's name (its Celery hostname, as in the registry and in ``LeaseItem.worker``).
        skew_s: node clock − sweeper clock, seconds (positive: the node is ahead).
        error_s: bound on the error, seconds (both readings' bounds added).
    """

    node: str
    skew_s: float
    error_s: float


def endpoint_offset() -> ClockReading:
    """Read this process's clock against the DynamoDB endpoint's (one GetItem of the slot counter,
    only its key; see the module docstring).

    Raises:
        ValueError: the response has no parseable ``Date`` header.
        botocore errors: the request failed.
    """
    client = aws.client("dynamodb")
    before = time.time()
    response = client.get_item(TableName=get_settings().cluster_table, Key={"key": {"S": CLUSTER_SLOTS_KEY}},
                               ProjectionExpression="#k", ExpressionAttributeNames={"#k": "key"})
    after = time.time()
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not date:
        raise ValueError("the DynamoDB endpoint's response has no Date header")
    endpoint_at = email.utils.parsedate_to_datetime(date).timestamp() + 0.5  # the header truncates to the second
    return ClockReading(offset_s=(before + after) / 2 - endpoint_at, error_s=0.5 + (after - before) / 2, at=after)


def report_attributes(reading: ClockReading | None) -> dict:
    """The node item's attributes for ``reading`` (empty for None): for a registration."""
    if reading is None:
        return {}
    return {"clock_offset_s": reading.offset_s, "clock_error_s": reading.error_s}


def report_actions(reading: ClockReading | None) -> list:
    """The node item's update actions for ``reading`` (none for None): for a beat."""
    if reading is None:
        return []
    return [ClusterItem.clock_offset_s.set(reading.offset_s), ClusterItem.clock_error_s.set(reading.error_s)]


def node_of(worker: str) -> str:
    """The node name of a lease's ``worker`` (``<node name>/<pid>``)."""
    return worker.rsplit("/", 1)[0]


_known: dict[str, NodeSkew] = {}
_known_lock = threading.Lock()


def known_skews() -> dict[str, NodeSkew]:
    """The skews of this process's last :func:`refresh` (empty before one): node name → skew."""
    with _known_lock:
        return dict(_known)


def measure_skews(own: ClockReading) -> dict[str, NodeSkew]:
    """Each registered node's skew against a process whose reading is ``own``, from the offsets
    the nodes reported in their heartbeats (a node that reported none is left out). Reads the
    registry through its index (no scan)."""
    skews = {}
    for node in ClusterItem.nodes_by_expiry.query(NODE_PARTITION):
        if node.clock_offset_s is None:
            continue
        name = node.key[len(NODE_KEY_PREFIX):]
        skews[name] = NodeSkew(name, float(node.clock_offset_s) - own.offset_s,
                               float(node.clock_error_s or 0.0) + own.error_s)
    return skews


def says_something(skew: NodeSkew, bound_s: float) -> bool:
    """True if ``skew``'s error bound is within ``bound_s`` (the skew bound, s): only then can the
    reading tell a skew beyond the bound from none."""
    return skew.error_s <= bound_s


def refresh(now: float) -> dict[str, NodeSkew]:
    """The sweeper's comparison (see module docstring): measure this process's offset, derive every
    registered node's skew, keep those that say something (:func:`says_something`) for
    :func:`held_by_skew` and :func:`registration_held`, warn about each beyond
    ``Clocks.clock_skew_warn_s``, and send :data:`leases.signals.node_clock_skew`. Returns the skews
    kept. A failed reading keeps nothing (every node is judged by this clock, as before) and is
    logged; it never raises."""
    from leases import signals  # noqa: PLC0415 (signals imports nothing of the lease layer; kept local all the same)

    warn_s = get_clocks().clock_skew_warn_s
    try:
        measured = measure_skews(endpoint_offset())
    except Exception as exc:  # noqa: BLE001 - skew only holds back; without it the sweep goes on as before
        log.warning("clock skew not measured this sweep (%s): leases are judged by this node's clock alone", exc)
        measured = {}
    skews = {name: skew for name, skew in measured.items() if says_something(skew, warn_s)}
    if len(skews) < len(measured):
        log.info("clock readings of %s say nothing this sweep (error bounds above the skew bound of %.1f s: a slow "
                 "endpoint); those nodes are judged by this node's clock", ", ".join(
                     f"{s.node} {s.skew_s:+.1f} s (±{s.error_s:.1f} s)" for n, s in measured.items() if n not in skews),
                 warn_s)
    with _known_lock:
        _known.clear()
        _known.update(skews)
    for skew in skews.values():
        if abs(skew.skew_s) > warn_s:
            log.warning("node %s's clock is %+.1f s (±%.1f s) off this sweeper's, beyond %.1f s (a quarter of the "
                        "lease TTL): %s; fix its time sync (chrony/NTP): docs/operations.md, \"Clock skew\"",
                        skew.node, skew.skew_s, skew.error_s, warn_s,
                        "its leases look expired early; the sweeper holds them by its clock" if skew.skew_s < 0
                        else "its leases and registration outlive it by that much")
    signals.node_clock_skew.send(sender=None, skews={name: s.skew_s for name, s in skews.items()}, now=now)
    return skews


def _held(expires_at: float, node: str, now: float) -> bool:
    skew = known_skews().get(node)
    if skew is None or skew.skew_s >= 0:  # unknown, or ahead: judged by this clock as before
        return False
    return float(expires_at) - skew.skew_s + skew.error_s > now


def held_by_skew(expires_at: float, worker: str, now: float) -> bool:
    """True if a lease of ``worker`` with ``expires_at`` (expired by this clock: < ``now``) has not
    expired by its node's clock, as :func:`refresh` last measured it: the sweeper must not reclaim it."""
    return _held(expires_at, node_of(worker), now)


def registration_held(expires_at: float, node: str, now: float) -> bool:
    """True if node ``node``'s registration (``expires_at`` < ``now`` by this clock) has not expired
    by its own clock: the sweeper must not drop it."""
    return _held(expires_at, node, now)
