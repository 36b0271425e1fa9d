"""The registry of live worker nodes: how many slots the cluster has, for borrowing (docs/design.md §3).

::

    node starts ─► register(name, slots)   node item put; slots counter total += slots,
                                            borrowable += slots (created at −reserve_slots)
    every heartbeat_interval_s ─► beat(name)    expires_at = now + node_ttl_s
    node stops ─► deregister(name)          node item deleted; total, borrowable −= slots
    sweeper ─► drop_dead(now)               the same for every node whose expires_at passed

Adding a licence (a second node) or losing one changes ``total`` and ``borrowable`` with no
configuration; ``busy`` is kept by the lease transactions themselves.
"""

from __future__ import annotations

import logging
import time

from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError

from leases import skew
from leases.models import CLUSTER_SLOTS_KEY, NODE_KEY_PREFIX, NODE_PARTITION, ClusterItem
from leases.transactions import CANCELLED, NamedTransaction, classify, new_token
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)


def _slot_actions(delta: int) -> list:
    reserve = get_settings().reserve_slots
    return [ClusterItem.total.set((ClusterItem.total | 0) + delta),
            ClusterItem.borrowable.set((ClusterItem.borrowable | -reserve) + delta)]


def register(name: str, slots: int, *, now: float | None = None, clock: skew.ClockReading | None = None) -> bool:
    """Add node ``name`` with ``slots`` slots; True if it was new (False: it was live already, and
    is only renewed). One transaction: the node item and the slot counter. ``clock``: the node's
    clock reading, reported on its item (:mod:`leases.skew`)."""
    t = time.time() if now is None else now
    node = ClusterItem(f"{NODE_KEY_PREFIX}{name}", slots=slots, heartbeat_at=t,
                       expires_at=t + get_settings().node_ttl_s, node_partition=NODE_PARTITION,
                       **skew.report_attributes(clock))  # clock skew: the node's clock reading
    try:
        with NamedTransaction(new_token()) as tx:
            tx.add("save", "node", node, condition=ClusterItem.key.does_not_exist())
            tx.add("update", "slots", ClusterItem(CLUSTER_SLOTS_KEY), actions=_slot_actions(slots))
    except TransactWriteError as exc:
        if classify(exc)[0] != CANCELLED:
            raise
        beat(name, now=t, clock=clock)
        return False
    log.info("node %s registered with %s slots", name, slots)
    return True


def beat(name: str, *, now: float | None = None, clock: skew.ClockReading | None = None) -> bool:
    """Renew node ``name``; False if it is not registered (dropped as dead: register again).
    ``clock``: the node's clock reading, reported on its item (:mod:`leases.skew`)."""
    t = time.time() if now is None else now
    try:
        ClusterItem(f"{NODE_KEY_PREFIX}{name}").update(
            actions=[ClusterItem.heartbeat_at.set(t), ClusterItem.expires_at.set(t + get_settings().node_ttl_s),
                     *skew.report_actions(clock)],  # clock skew: the node's clock reading
            condition=ClusterItem.key.exists())
    except UpdateError as exc:
        if classify(exc)[0] == CANCELLED:
            return False
        raise
    return True


def _remove(name: str, condition) -> bool:
    try:
        node = ClusterItem.get(f"{NODE_KEY_PREFIX}{name}", consistent_read=True)
    except DoesNotExist:
        return False
    try:
        with NamedTransaction(new_token()) as tx:
            tx.add("delete", "node", ClusterItem(node.key),
                   condition=(ClusterItem.slots == node.slots) & condition)
            tx.add("update", "slots", ClusterItem(CLUSTER_SLOTS_KEY), actions=_slot_actions(-int(node.slots)))
    except TransactWriteError as exc:
        if classify(exc)[0] == CANCELLED:
            return False
        raise
    return True


def deregister(name: str) -> bool:
    """Remove node ``name`` (a clean stop); True if it was registered."""
    return _remove(name, ClusterItem.key.exists())


def _nodes(expired_before: float | None = None):
    condition = None if expired_before is None else ClusterItem.expires_at < expired_before
    return ClusterItem.nodes_by_expiry.query(NODE_PARTITION, condition)


def live_nodes(*, now: float | None = None) -> dict[str, int]:
    """``{node name: slots}`` of the registered nodes whose registration has not expired."""
    t = time.time() if now is None else now
    return {n.key[len(NODE_KEY_PREFIX):]: int(n.slots or 0) for n in _nodes() if float(n.expires_at or 0) >= t}


def drop_dead(now: float) -> list[str]:
    """Remove every node whose registration expired before ``now`` (through the expiry index, no
    scan), but one whose expiry has not passed by its own clock (:func:`leases.skew.registration_held`);
    returns their names."""
    dropped = []
    for node in _nodes(expired_before=now):
        name = node.key[len(NODE_KEY_PREFIX):]
        if skew.registration_held(float(node.expires_at or 0), name, now):  # clock skew: alive by its own clock
            continue
        if _remove(name, ClusterItem.expires_at < now):
            log.warning("node %s stopped beating (expired at %.0f): its %s slots left the registry",
                        name, float(node.expires_at or 0), node.slots)
            dropped.append(name)
    return dropped


def slots() -> ClusterItem | None:
    """The cluster's slot counter (strongly consistent), or None before any node registered."""
    try:
        return ClusterItem.get(CLUSTER_SLOTS_KEY, consistent_read=True)
    except DoesNotExist:
        return None
