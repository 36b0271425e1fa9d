"""The registry of live worker nodes: how many slots the cluster has, for borrowing (docs/design.md §3).

::

    node starts ─► register(name, slots)   node item put; slots counter total += slots, and
                                            every shard's borrowable share of total − reserve_slots
    every heartbeat_interval_s ─► beat(name)    expires_at = now + node_ttl_s
    node stops ─► deregister(name)          node item deleted; total −= slots, shares rewritten
    sweeper ─► drop_dead(now)               the same for every node whose expires_at passed

Adding a licence (a second node) or losing one changes ``total`` and ``borrowable`` with no
configuration; ``busy`` is kept by the lease transactions themselves, on the shard of each job
(:func:`leases.models.slot_shard_of`). :func:`slots` sums the shards.
"""

from __future__ import annotations

import logging
import time

from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError

from leases import skew
from leases.dynamo import RETRY, Retryable, reason_code, with_conflict_retries
from leases.models import (CLUSTER_SLOTS_KEY, NODE_KEY_PREFIX, NODE_PARTITION, ClusterItem, borrowable_shares,
                           slot_shard_key, summed_slots)
from leases.transactions import CANCELLED, NamedTransaction, classify, new_token
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)


def _add_slot_items(tx: NamedTransaction, delta: int) -> None:
    """Add the slot counter's side of a node joining (``delta`` slots) or leaving (negative) to
    ``tx``: shard 0's ``total + delta``, on condition it still holds the ``total`` read now, and
    every shard's ``borrowable`` share of the new ``total − reserve_slots`` (a share cannot be
    computed in an update expression, so it is read, computed and written under that condition)."""
    s = get_settings()
    try:
        old = ClusterItem.get(CLUSTER_SLOTS_KEY, consistent_read=True, attributes_to_get=["total"]).total
    except DoesNotExist:
        old = None
    total = int(old or 0) + delta
    shares = borrowable_shares(total - s.reserve_slots, s.cluster_slot_shards)
    unchanged = ClusterItem.total.does_not_exist() if old is None else ClusterItem.total == old
    tx.add("update", "slots", ClusterItem(CLUSTER_SLOTS_KEY),
           actions=[ClusterItem.total.set(total), ClusterItem.borrowable.set(shares[0])], condition=unchanged)
    for shard, share in enumerate(shares[1:], start=1):
        tx.add("update", f"slots#{shard}", ClusterItem(slot_shard_key(shard)),
               actions=[ClusterItem.borrowable.set(share)])


def _retry_if_counter_moved(tx: NamedTransaction, exc: TransactWriteError) -> None:
    """Raise :class:`Retryable` when ``exc`` is a conflict, or a refusal of the slot counter's
    condition only (another node joined or left since the read); else return."""
    kind, codes = classify(exc)
    if kind == RETRY:
        raise Retryable(codes) from exc
    reasons = tx.reasons(exc) if kind == CANCELLED else {}
    if reason_code(reasons, "slots") and not reason_code(reasons, "node"):
        raise Retryable(codes) from exc


def register(name: str, slots: int, *, now: float | None = None, clock: skew.ClockReading | None = None) -> bool:
    """Add node ``name`` with ``slots`` slots; True if it was new (False: it was live already, and
    is only renewed). One transaction: the node item and the slot counter. ``clock``: the node's
    clock reading, reported on its item (:mod:`leases.skew`)."""
    t = time.time() if now is None else now
    node = ClusterItem(f"{NODE_KEY_PREFIX}{name}", slots=slots, heartbeat_at=t,
                       expires_at=t + get_settings().node_ttl_s, node_partition=NODE_PARTITION,
                       **skew.report_attributes(clock))  # clock skew: the node's clock reading

    def attempt() -> bool:
        tx = NamedTransaction(new_token())
        try:
            with tx:
                tx.add("save", "node", node, condition=ClusterItem.key.does_not_exist())
                _add_slot_items(tx, slots)
        except TransactWriteError as exc:
            _retry_if_counter_moved(tx, exc)
            if classify(exc)[0] != CANCELLED:
                raise
            return False
        return True

    if not with_conflict_retries(attempt, what=f"register node {name}"):
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

    def attempt() -> bool:
        tx = NamedTransaction(new_token())
        try:
            with tx:
                tx.add("delete", "node", ClusterItem(node.key),
                       condition=(ClusterItem.slots == node.slots) & condition)
                _add_slot_items(tx, -int(node.slots))
        except TransactWriteError as exc:
            _retry_if_counter_moved(tx, exc)
            if classify(exc)[0] == CANCELLED:
                return False
            raise
        return True

    return with_conflict_retries(attempt, what=f"remove node {name}")


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


def slots_total(live: dict[str, int]) -> int:
    """The cluster's slots: the live nodes' (:func:`live_nodes`), or ``capacity_nodes ×
    slots_per_node`` while none is registered."""
    s = get_settings()
    return sum(live.values()) or s.capacity_nodes * s.slots_per_node


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


def slot_shards() -> list[ClusterItem]:
    """The slot counter's shards that exist (strongly consistent, one ``BatchGetItem``; each item
    is read at its own moment)."""
    keys = [slot_shard_key(k) for k in range(get_settings().cluster_slot_shards)]
    return list(ClusterItem.batch_get(keys, consistent_read=True))


def slots() -> ClusterItem | None:
    """The cluster's slot counter: ``busy``, ``total``, ``borrowable`` and ``borrowers`` summed over
    its shards (:func:`slot_shards`), or None before any was written."""
    return summed_slots(slot_shards())
