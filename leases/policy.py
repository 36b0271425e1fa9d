"""The scheduling rules, once: may a job take a slot, give way, park, borrow; which waiting job a
release wakes (docs/design.md §2–§3). Pure: no I/O, no AWS import.

Each limit is data (:class:`Below`: ``counter < limit`` on one item), read two ways: :func:`holds`
on counters in memory (the simulator), :func:`leases.conditions.condition_of` as the condition of
a lease transaction; ``tests/capacity`` holds the two to the same answers event by event. On a
tenant item an absent counter is 0, ``cap`` is the tier's override or the default cap, and
``burst_cap`` holds only where the tier has one. On the slot counter, ``borrowable`` is live slots
− ``reserve_slots``, kept by the node registry.
"""

from __future__ import annotations

from dataclasses import dataclass

TAKE, BORROW, PARK, DEFER, GIVE_WAY = "take", "borrow", "park", "defer", "give_way"


@dataclass(frozen=True)
class Below:
    """``counter < limit`` on one item (``item``: ``"tenant"`` or ``"cluster"``); with
    ``or_equal``, ``counter <= limit``."""

    counter: str
    limit: str
    item: str = "tenant"
    or_equal: bool = False


#: Acquire: the tenant's leases below its cap (with :func:`not_frozen`).
TAKE_SLOT = Below("in_flight", "cap")
#: Borrowing acquire, tenant side: leases below the tier's burst cap.
BORROW_TENANT = Below("in_flight", "burst_cap")
#: Borrowing acquire, cluster side: busy slots below live slots − reserve.
BORROW_CLUSTER = Below("busy", "borrowable", "cluster")
#: Wake: jobs running or on their way (``occupied`` = in_flight + queued) below the cap, or below the
#: burst cap when the tier borrows (either holds).
WAKE_PLACE = (Below("occupied", "cap"), Below("occupied", "burst_cap"))
#: A commit or failure passes its place to the oldest waiting job (the release's own transaction):
#: ``occupied`` (which the pass leaves alone) at most the cap, or the burst cap when the tier borrows;
#: a cap lowered below ``occupied`` frees the place instead.
PASS_ON = (Below("occupied", "cap", or_equal=True), Below("occupied", "burst_cap", or_equal=True))
@dataclass
class TenantState:
    """A tenant item's counters (``cap``/``burst_cap`` None: no override / does not borrow)."""

    in_flight: int = 0
    queued: int = 0
    waiting: int = 0
    occupied: int = 0
    cap: int | None = None
    burst_cap: int | None = None
    repair_until: float | None = None


@dataclass
class ClusterState:
    """The cluster's slot counter: ``busy`` leases, ``total`` live slots, ``borrowable`` = live
    slots − reserve, ``borrowers`` tiers that borrow."""

    busy: int = 0
    borrowable: int = 0
    borrowers: int = 0
    total: int = 0


@dataclass(frozen=True)
class Limits:
    """The configured numbers the rules need (from :class:`imposition.common.settings.Settings`)."""

    default_cap: int
    waiting_policy: str = "handoff"  # "handoff" or "timer"


def effective_cap(tenant: TenantState, default_cap: int) -> int:
    """The cap the tenant's acquires enforce: the override, else ``default_cap``."""
    return tenant.cap if tenant.cap is not None else default_cap


def _limit(rule: Below, item, default_cap: int) -> int | None:
    if rule.limit == "cap":
        return effective_cap(item, default_cap)
    return getattr(item, rule.limit)


def holds(rule: Below | tuple[Below, ...], item, default_cap: int) -> bool:
    """Evaluate a declared limit (or any of a tuple of them) on in-memory counters."""
    if isinstance(rule, tuple):
        return any(holds(r, item, default_cap) for r in rule)
    limit = _limit(rule, item, default_cap)
    if limit is None:
        return False
    value = int(getattr(item, rule.counter) or 0)
    return value <= limit if rule.or_equal else value < limit


def not_frozen(tenant: TenantState, now: float) -> bool:
    """No counter repair freezes the tenant's acquires at ``now``."""
    return tenant.repair_until is None or tenant.repair_until < now


def may_take(tenant: TenantState, default_cap: int, now: float) -> bool:
    """An acquire's tenant condition: :data:`TAKE_SLOT` and not frozen."""
    return holds(TAKE_SLOT, tenant, default_cap) and not_frozen(tenant, now)


def borrows(tenant: TenantState, default_cap: int) -> bool:
    """The tier lends above its cap: a burst cap above the cap."""
    return tenant.burst_cap is not None and tenant.burst_cap > effective_cap(tenant, default_cap)


def may_borrow(tenant: TenantState, cluster: ClusterState, default_cap: int, now: float) -> bool:
    """A borrowing acquire would commit: the tier borrows, not frozen, :data:`BORROW_TENANT` and
    :data:`BORROW_CLUSTER`."""
    return (borrows(tenant, default_cap) and not_frozen(tenant, now) and holds(BORROW_TENANT, tenant, default_cap)
            and holds(BORROW_CLUSTER, cluster, default_cap))


def acquire_outcome(tenant: TenantState, cluster: ClusterState, limits: Limits, now: float) -> str:
    """What a delivered job does (the order of ``tasks.base.FairTask``): :data:`TAKE` a slot under
    the cap; at the cap, :data:`DEFER` under the timer policy; else :data:`BORROW` when the tier
    may; else :data:`PARK` (a park is conditional on the negation of :func:`may_take`)."""
    if may_take(tenant, limits.default_cap, now):
        return TAKE
    if limits.waiting_policy == "timer":
        return DEFER
    if may_borrow(tenant, cluster, limits.default_cap, now):
        return BORROW
    return PARK


def poorer_tenants(tenant_id: str, pending: dict[str, TenantState], default_cap: int) -> list[str]:
    """If a job of ``tenant_id`` could take a slot (:func:`could_take`): the other tenants that
    could too, have a job queued and fewer jobs running or queued (``occupied``; docs/design.md,
    "Across tenants"). ``pending``: the tenants with queued or waiting jobs, the job's own too."""
    mine = pending.get(tenant_id)
    if mine is None or not could_take(mine, default_cap):
        return []
    return [other for other, t in pending.items() if other != tenant_id and int(t.queued or 0) > 0
            and int(t.occupied or 0) < int(mine.occupied or 0) and could_take(t, default_cap)]


def could_take(tenant: TenantState, default_cap: int) -> bool:
    """The tenant's next job would take a slot: under its cap, or under the burst cap of a tier that
    borrows (the cluster's room is not read)."""
    return holds(TAKE_SLOT, tenant, default_cap) or (borrows(tenant, default_cap)
                                                     and holds(BORROW_TENANT, tenant, default_cap))


def gives_way(tenant_id: str, pending: dict[str, TenantState], cluster: ClusterState, default_cap: int) -> bool:
    """A job gives its slot away when it has :func:`poorer_tenants` and the free slots (``total −
    busy``, its own included) cannot take every other tenant's queued job; ties keep the slot."""
    if not poorer_tenants(tenant_id, pending, default_cap):
        return False
    queued_elsewhere = sum(int(t.queued or 0) for other, t in pending.items() if other != tenant_id)
    return int(cluster.total or 0) - int(cluster.busy or 0) <= queued_elsewhere


def room(tenant: TenantState | None, default_cap: int) -> int:
    """Jobs the tenant may still have on their way to a slot: cap − occupied."""
    if tenant is None:
        return default_cap
    return effective_cap(tenant, default_cap) - int(tenant.occupied or 0)


def door_queues(tenant: TenantState | None, default_cap: int, cluster: ClusterState | None = None) -> bool:
    """At submission (hand-off): queue the job (publish it) when its tenant has no waiting job and
    room, under its cap or, where its tier borrows, as far as ``cluster`` has slots above the
    reserve (:func:`wake_room`: what a wake right after a park would find); else park it at the door."""
    if tenant is None:
        return room(tenant, default_cap) > 0
    return int(tenant.waiting or 0) == 0 and wake_room(tenant, cluster, default_cap) > 0


def wake_room(tenant: TenantState, cluster: ClusterState | None, default_cap: int) -> int:
    """How many of the tenant's waiting jobs a wake may try: its room under its cap, or, when its
    tier borrows, under its burst cap as far as the cluster has slots above the reserve."""
    own = room(tenant, default_cap)
    burst_cap = tenant.burst_cap
    if burst_cap is None or not borrows(tenant, default_cap):  # (a tier without a burst cap never borrows)
        return own
    spare = (int(cluster.borrowable or 0) - int(cluster.busy or 0)) if cluster is not None else 0
    return max(own, min(burst_cap - int(tenant.occupied or 0), spare))


def may_wake(tenant: TenantState, default_cap: int) -> bool:
    """One wake commits: :data:`WAKE_PLACE`."""
    return holds(WAKE_PLACE, tenant, default_cap)


def passes_on(tenant: TenantState, waiting_policy: str, default_cap: int) -> bool:
    """A commit or failure hands its place to the tenant's oldest waiting job (hand-off policy,
    a job waits, :data:`PASS_ON`); else it frees the place and the tenant is woken."""
    return waiting_policy == "handoff" and int(tenant.waiting or 0) > 0 and holds(PASS_ON, tenant, default_cap)


def lends(cluster: ClusterState | None) -> bool:
    """After a release, the cluster has slots above its reserve and a tier that borrows."""
    return (cluster is not None and int(cluster.borrowers or 0) > 0
            and int(cluster.busy or 0) < int(cluster.borrowable or 0))


def borrow_spare(cluster: ClusterState, tenants: dict[str, TenantState]) -> int:
    """How many waiting jobs a wake of borrowers may bring: the slots above the reserve that no job
    claims yet, ``borrowable − busy − Σ queued`` over ``tenants`` (every tenant with a job queued or
    waiting: a queued job is on its way to a slot, more would only park again), but at least 1
    while the cluster lends (:func:`lends`): a queued job may be one in retry backoff, on its way
    to no slot for minutes."""
    claimed = sum(int(t.queued or 0) for t in tenants.values())
    free = int(cluster.borrowable or 0) - int(cluster.busy or 0)
    return max(1, free - claimed) if free > 0 else 0


def borrow_order(tenants: dict[str, TenantState]) -> list[str]:
    """Tenants offered a slot above the reserve, one job each per round: tiers with a burst cap and
    waiting jobs, the fewest leases first (ties by id, for a deterministic order)."""
    eligible = [(int(t.in_flight or 0), tid) for tid, t in tenants.items()
                if t.burst_cap is not None and int(t.waiting or 0) > 0]
    return [tid for _, tid in sorted(eligible)]
