"""The lease layer's decisions on counters in memory: what the simulator schedules with.

Every decision is :mod:`leases.policy`'s; this module only keeps the counters the DynamoDB items
keep (a tenant's ``in_flight``, ``queued``, ``waiting``, ``occupied``; the cluster's ``busy``,
``borrowable``, ``borrowers``) and moves them as the transactions do (acquire, park, release,
release for retry, wake; :mod:`leases.transactions`, :mod:`leases.waiting`). Waiting jobs are kept
in submission order per tenant, as the ``by-waiting`` index keeps them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from leases import policy


@dataclass(frozen=True)
class Tier:
    """A tenant's tier: ``cap`` None = the default cap; ``burst_cap`` None = does not borrow."""

    cap: int | None = None
    burst_cap: int | None = None


class Scheduler:
    """Counters and waiting lists of every tenant, and the cluster's slot counter.

    ``slots_total`` (live slots) and ``reserve_slots`` give ``borrowable``; ``tiers`` the caps.
    Jobs are named by any hashable id and ordered by ``order`` (their submission rank).
    """

    def __init__(self, limits: policy.Limits, *, slots_total: int, reserve_slots: int,
                 tiers: dict[str, Tier] | None = None) -> None:
        self.limits = limits
        self.tenants: dict[str, policy.TenantState] = {}
        self.waiting: dict[str, list] = {}
        self.cluster = policy.ClusterState(busy=0, borrowable=slots_total - reserve_slots, total=slots_total)
        for tenant_id, tier in (tiers or {}).items():
            self.set_tier(tenant_id, tier)

    def tenant(self, tenant_id: str) -> policy.TenantState:
        """The tenant's counters (created at 0)."""
        state = self.tenants.get(tenant_id)
        if state is None:
            state = self.tenants[tenant_id] = policy.TenantState()
            self.waiting[tenant_id] = []
        return state

    def set_tier(self, tenant_id: str, tier: Tier) -> None:
        """Set a tenant's cap and burst cap (``imposition tenant set-cap``)."""
        state = self.tenant(tenant_id)
        before = policy.borrows(state, self.limits.default_cap)
        state.cap, state.burst_cap = tier.cap, tier.burst_cap
        self.cluster.borrowers += int(policy.borrows(state, self.limits.default_cap)) - int(before)

    # -- the transitions -------------------------------------------------------------------------

    def submit(self, tenant_id: str, job, order) -> tuple[bool, list[tuple[str, object]]]:
        """Admit a job: ``(True, [])`` if queued (publish it); ``(False, woken)`` if parked at the
        door (hand-off only), followed by the tenant's wake, as ``tasks.submission`` does."""
        state = self.tenant(tenant_id)
        door = self.limits.waiting_policy == "handoff"
        if not door or policy.door_queues(state, self.limits.default_cap, self.cluster):
            state.queued += 1
            state.occupied += 1
            return True, []
        state.waiting += 1
        heapq.heappush(self.waiting[tenant_id], (order, job))
        return False, self.wake(tenant_id)

    def deliver(self, tenant_id: str, job, order, now: float, *, may_give_way: bool = True) -> str:
        """A worker received the job's message: under the hand-off, :func:`leases.policy.gives_way`
        first (unless the message is a copy that gave way already), then
        :func:`leases.policy.acquire_outcome`, applied (take or borrow: a lease; park: the job
        waits; defer or give way: nothing changes, a copy is due)."""
        state = self.tenant(tenant_id)
        if may_give_way and self.limits.waiting_policy == "handoff":
            pending = {tid: t for tid, t in self.tenants.items() if t.waiting > 0 or t.queued > 0}
            if policy.gives_way(tenant_id, pending, self.cluster, self.limits.default_cap):
                return policy.GIVE_WAY
        outcome = policy.acquire_outcome(state, self.cluster, self.limits, now)
        if outcome in (policy.TAKE, policy.BORROW):
            state.in_flight += 1
            state.queued -= 1
            self.cluster.busy += 1
        elif outcome == policy.PARK:
            state.queued -= 1
            state.occupied -= 1
            state.waiting += 1
            heapq.heappush(self.waiting[tenant_id], (order, job))
        return outcome

    def release(self, tenant_id: str, *, requeue: bool = False) -> list[tuple[str, object]]:
        """A lease ends (:func:`leases.transactions.fenced_release`): a commit or failure passes its
        place to the tenant's oldest waiting job in the same transaction when
        :func:`leases.policy.passes_on` (``occupied`` unchanged), else frees it; a retry
        (``requeue``) keeps its place. The slot is freed either way; then the borrowers' wake.
        Returns the ``(tenant, job)`` woken, in order."""
        state = self.tenant(tenant_id)
        passes = not requeue and policy.passes_on(state, self.limits.waiting_policy, self.limits.default_cap)
        state.in_flight -= 1
        self.cluster.busy -= 1
        woken: list[tuple[str, object]] = []
        if passes:
            _, job = heapq.heappop(self.waiting[tenant_id])
            state.waiting -= 1
            state.queued += 1
            woken = [(tenant_id, job)]
        elif requeue:
            state.queued += 1
        else:
            state.occupied -= 1
        return woken + self.wake_borrowers()

    def wake(self, tenant_id: str, limit: int | None = None) -> list[tuple[str, object]]:
        """Wake the tenant's oldest waiting jobs while :func:`leases.policy.wake_room` and
        :func:`leases.policy.may_wake` allow, at most ``limit``."""
        state = self.tenant(tenant_id)
        if state.waiting <= 0:
            return []
        room = policy.wake_room(state, self.cluster, self.limits.default_cap)
        if limit is not None:
            room = min(room, limit)
        heap = self.waiting[tenant_id]
        woken: list[tuple[str, object]] = []
        while heap and len(woken) < room and policy.may_wake(state, self.limits.default_cap):
            _, job = heapq.heappop(heap)
            state.waiting -= 1
            state.occupied += 1
            state.queued += 1
            woken.append((tenant_id, job))
        return woken

    def wake_borrowers(self) -> list[tuple[str, object]]:
        """While the cluster lends (:func:`leases.policy.lends`), one job of each borrowing tenant
        with waiting jobs, fewest leases first (:func:`leases.policy.borrow_order`), at most
        :func:`leases.policy.borrow_spare` of them."""
        if not policy.lends(self.cluster):
            return []
        pending = {tid: t for tid, t in self.tenants.items() if t.waiting > 0 or t.queued > 0}
        spare = policy.borrow_spare(self.cluster, pending)
        woken: list[tuple[str, object]] = []
        for tenant_id in policy.borrow_order(pending):
            if len(woken) >= spare:
                break
            woken += self.wake(tenant_id, limit=1)
        return woken
