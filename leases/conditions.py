"""The rules of :mod:`leases.policy` on DynamoDB items: each declared limit as the condition of a
lease transaction (:func:`condition_of`), and the items' counters as the policy reads them
(:func:`tenant_state`, :func:`cluster_state`). The verbs (:mod:`leases.transactions`,
:mod:`leases.waiting`) build their transactions from these."""

from __future__ import annotations

import functools

from imposition.common.settings import get_settings
from leases import policy
from leases.models import ClusterItem, JobItem, JobStatus, TenantItem, slot_shard_key, slot_shard_of


def below_cap(counter, default_cap: int):
    """Condition on a tenant item: ``counter < cap`` (the tier override ``cap`` when the item has
    one, else ``default_cap``); an absent counter is 0."""
    no_override = TenantItem.cap.does_not_exist()
    absent = counter.does_not_exist() & (no_override | (TenantItem.cap > 0))
    return absent | (no_override & (counter < default_cap)) | (TenantItem.cap.exists() & (counter < TenantItem.cap))


def condition_of(rule: policy.Below | tuple[policy.Below, ...], default_cap: int):
    """The PynamoDB condition of a limit declared in :mod:`leases.policy` (a tuple: any of them),
    with the policy's semantics: an absent counter is 0, ``cap`` is the override or
    ``default_cap`` (:func:`below_cap`), any other limit holds only where the item has it (an
    ``or_equal`` limit compares a counter the item has: DynamoDB compares nothing with an absent
    attribute; every lease transaction of a tenant finds its counters written)."""
    if isinstance(rule, tuple):
        return functools.reduce(lambda a, b: a | b, (condition_of(r, default_cap) for r in rule))
    model = TenantItem if rule.item == "tenant" else ClusterItem
    counter = getattr(model, rule.counter)
    if rule.limit == "cap":
        if not rule.or_equal:
            return below_cap(counter, default_cap)
        no_override = TenantItem.cap.does_not_exist()
        return (no_override & (counter <= default_cap)) | (TenantItem.cap.exists() & (counter <= TenantItem.cap))
    limit = getattr(model, rule.limit)
    if rule.or_equal:
        return limit.exists() & (counter <= limit)
    return limit.exists() & ((counter.does_not_exist() & (limit > 0)) | (counter < limit))


def place_passes_on(default_cap: int):
    """Condition on a tenant item: ``occupied <= cap`` (or ``<= burst_cap`` when its tier borrows),
    so the place a release frees may pass to its next waiting job without going over the cap (a
    cap lowered below ``occupied`` frees the place instead; :data:`leases.policy.PASS_ON`)."""
    return condition_of(policy.PASS_ON, default_cap)


def queued_and_due(tenant_id: str, due_by: float | None = None):
    """Condition on a job item: ``queued``, ``tenant_id``'s, and with ``due_by`` (epoch s) its
    message due by then (``due_at`` absent or ``<= due_by``: not a job in retry backoff)."""
    condition = (JobItem.status == JobStatus.QUEUED.value) & (JobItem.tenant_id == tenant_id)
    if due_by is not None:
        condition = condition & (JobItem.due_at.does_not_exist() | (JobItem.due_at <= due_by))
    return condition


def none_waiting():
    """Condition on a tenant item: no job of it waits (``waiting`` 0 or absent)."""
    return TenantItem.waiting.does_not_exist() | (TenantItem.waiting == 0)


def is_waiting(tenant_id: str):
    """Condition on a job item: ``waiting``, and ``tenant_id``'s."""
    return (JobItem.status == JobStatus.WAITING.value) & (JobItem.tenant_id == tenant_id)


def cap_has_room(default_cap: int):
    """Condition on a tenant item: ``in_flight < cap`` (:data:`leases.policy.TAKE_SLOT`)."""
    return condition_of(policy.TAKE_SLOT, default_cap)


def can_borrow():
    """Condition on a tenant item: ``in_flight < burst_cap`` (:data:`leases.policy.BORROW_TENANT`)."""
    return condition_of(policy.BORROW_TENANT, get_settings().default_cap)


def slot_to_borrow():
    """Condition on a shard of the cluster's slot counter: ``busy < borrowable``, its own counts
    (its share of the slots above the reserve; :data:`leases.policy.BORROW_CLUSTER`)."""
    return condition_of(policy.BORROW_CLUSTER, get_settings().default_cap)


def tenant_state(tenant: TenantItem) -> policy.TenantState:
    """The counters of a tenant item, as :mod:`leases.policy` reads them."""
    return policy.TenantState(
        in_flight=int(tenant.in_flight or 0), queued=int(tenant.queued or 0), waiting=int(tenant.waiting or 0),
        occupied=int(tenant.occupied or 0), cap=None if tenant.cap is None else int(tenant.cap),
        burst_cap=None if tenant.burst_cap is None else int(tenant.burst_cap),
        repair_until=None if tenant.repair_until is None else float(tenant.repair_until))


def cluster_state(cluster: ClusterItem | None) -> policy.ClusterState | None:
    """The cluster's slot counter, as :mod:`leases.policy` reads it."""
    if cluster is None:
        return None
    return policy.ClusterState(busy=int(cluster.busy or 0), borrowable=int(cluster.borrowable or 0),
                               borrowers=int(cluster.borrowers or 0), total=int(cluster.total or 0))


def slots_item(job_id: str | None = None) -> ClusterItem:
    """The slot counter's shard of ``job_id`` (``busy`` is kept in its every acquire and release),
    or, without one, shard 0 (``total``, ``borrowers``)."""
    shard = 0 if job_id is None else slot_shard_of(job_id, get_settings().cluster_slot_shards)
    return ClusterItem(slot_shard_key(shard))


def not_frozen(now: float):
    """Condition on a tenant item: no counter repair freezes its acquires at ``now``."""
    return TenantItem.repair_until.does_not_exist() | (TenantItem.repair_until < now)
