"""One policy, not two: the simulator's scheduler and the real lease layer, fed the same events,
decide the same, event by event.

The real side drives the lease layer as a worker does (``tasks.base.FairTask``: acquire; at the cap,
a borrowing acquire if the tier may, else park; under the timer policy, a deferral; a commit hands
its place to the oldest waiting job in its own transaction) and as the
submission path does (``tasks.submission``: the door, then a wake), over HTTP to the session's moto
DynamoDB server. The simulated side is :class:`imposition.capacity.core.Scheduler`. After each event the
decision (take / borrow / park / defer, queued or parked at the door, which jobs a release woke)
and every counter (each tenant's in_flight, queued, waiting, occupied; the cluster's busy) must be
equal. Events are drawn from a seeded generator: a sequence that runs out of messages or of
running jobs simply submits.
"""

from __future__ import annotations

import random
from collections import Counter
import time
import uuid

import pytest

from imposition.capacity.core import Scheduler, Tier
from leases import attempts, nodes, policy, transactions, waiting
from leases.tenants import ensure_tenant
from leases.errors import CapReached
from leases.models import JobItem, TenantItem
from leases.tenants import set_cap
from imposition.common.settings import get_settings
from tests.leases.helpers import claim_of

LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}
SLOTS = 4


class RealLayer:
    """The lease layer on moto, driven as the worker and the submission path drive it."""

    def __init__(self, waiting_policy: str) -> None:
        self.waiting_policy = waiting_policy
        self.leases: dict[str, transactions.Lease] = {}
        self.passed = 0  # commits that handed their place on in their own transaction

    def submit(self, tenant: str, job: str) -> tuple[bool, list]:
        ensure_tenant(tenant)
        woken: list = []
        item = JobItem(job, tenant_id=tenant, token=f"tok-{job}", max_attempts=3, layout=LAYOUT,
                       input_key=f"tenants/{tenant}/jobs/{job}/input.pdf", submitted_at=time.time())
        queued = waiting.admit(item, claim_of(item), door=self.waiting_policy == "handoff")
        if not queued:
            waiting.wake(tenant, publish=lambda t, j: woken.append((t, j)), reason="door")
        return queued, woken

    def deliver(self, tenant: str, job: str, *, may_give_way: bool = True) -> str:
        if may_give_way and self.waiting_policy == "handoff" and waiting.gives_way(tenant):
            return policy.GIVE_WAY
        try:
            self.leases[job] = transactions.acquire(job, tenant, "w1")
            return policy.TAKE
        except CapReached as exc:
            if self.waiting_policy == "timer":
                attempts.record_defer(job)
                return policy.DEFER
            if exc.may_borrow:
                try:
                    self.leases[job] = transactions.acquire(job, tenant, "w1", borrow=True)
                    return policy.BORROW
                except CapReached:
                    pass
            assert waiting.park(job, tenant), "one event at a time: a park after a refused acquire commits"
            return policy.PARK

    def finish(self, job: str, *, fail: bool) -> list:
        """A retry releases keeping its place; a commit hands its place to the oldest waiting job
        in its own transaction (the release), or frees it; then the wake of borrowers, as
        ``FairTask`` does after every release."""
        lease = self.leases.pop(job)
        woken: list = []
        if fail:
            transactions.release_for_retry(lease, error="stand-in failure", error_code="stand_in")
        else:
            _, released = transactions.commit_success(lease, output_key=f"out/{job}", sheets=1, sides=1)
            if released.handed is not None:
                woken.append((lease.tenant_id, released.handed))
                self.passed += 1
        waiting.wake_borrowers(publish=lambda t, j: woken.append((t, j)))
        return woken

    @staticmethod
    def counters(tenants: list[str]) -> dict:
        out = {}
        for t in tenants:
            item = TenantItem.get(t, consistent_read=True)
            out[t] = (int(item.in_flight or 0), int(item.queued or 0), int(item.waiting or 0), int(item.occupied or 0))
        out["busy"] = int(nodes.slots().busy or 0)
        return out


def sim_counters(sched: Scheduler, tenants: list[str]) -> dict:
    out = {t: (sched.tenants[t].in_flight, sched.tenants[t].queued, sched.tenants[t].waiting,
               sched.tenants[t].occupied) for t in tenants}
    out["busy"] = sched.cluster.busy
    return out


def run_sequence(waiting_policy: str, tiers: dict[str, Tier], *, events: int, seed: int) -> Counter:
    """Drive both sides with the same ``events`` and assert the same decisions; returns how often
    each decision was taken (so a test can check the sequence exercised every rule)."""
    s = get_settings()
    run = uuid.uuid4().hex[:6]
    names = {short: f"conf-{short}-{run}" for short in tiers}
    nodes.register(f"node-{run}", SLOTS)
    for short, tier in tiers.items():
        ensure_tenant(names[short])
        if tier.cap is not None or tier.burst_cap is not None:
            set_cap(names[short], tier.cap, burst_cap=tier.burst_cap)
    sched = Scheduler(policy.Limits(default_cap=s.default_cap, waiting_policy=waiting_policy),
                      slots_total=SLOTS, reserve_slots=s.reserve_slots,
                      tiers={names[k]: v for k, v in tiers.items()})
    real = RealLayer(waiting_policy)
    tenants = list(names.values())
    for t in tenants:
        sched.tenant(t)
    rng = random.Random(seed)
    messages: list[tuple[str, str]] = []  # (tenant, job) with a message in the queue
    running: list[tuple[str, str]] = []
    order: dict[str, int] = {}
    gave_way: set[str] = set()  # jobs whose copy gave way once: it never gives way again
    seen: Counter = Counter()
    for step in range(events):
        roll = rng.random()
        if roll < 0.4 and messages:
            tenant, job = messages.pop(rng.randrange(len(messages)))
            expected = sched.deliver(tenant, job, order[job], time.time(), may_give_way=job not in gave_way)
            got = real.deliver(tenant, job, may_give_way=job not in gave_way)
            decision = (expected, got)
            if expected in (policy.TAKE, policy.BORROW):
                running.append((tenant, job))
            elif expected in (policy.DEFER, policy.GIVE_WAY):
                messages.append((tenant, job))
                if expected == policy.GIVE_WAY:
                    gave_way.add(job)
            seen[expected] += 1
        elif roll < 0.7 and running:
            tenant, job = running.pop(rng.randrange(len(running)))
            fail = rng.random() < 0.2
            expected = sched.release(tenant, requeue=fail)
            got = real.finish(job, fail=fail)
            decision = (expected, got)
            if fail:
                messages.append((tenant, job))
                gave_way.discard(job)  # a retry is a new message: it may give way again
            messages += expected
            gave_way.difference_update(j for _, j in expected)  # so is a woken job's
            seen["woken"] += len(expected)
            seen["retry"] += fail
        else:
            tenant = rng.choice(tenants)
            job = uuid.uuid4().hex
            order[job] = step
            expected = sched.submit(tenant, job, step)
            got = real.submit(tenant, job)
            decision = (expected, got)
            if expected[0]:
                messages.append((tenant, job))
            messages += expected[1]
            gave_way.difference_update(j for _, j in expected[1])
            seen["door_park"] += not expected[0]
        assert decision[0] == decision[1], f"event {step}: simulator decided {decision[0]}, lease layer {decision[1]}"
        assert sim_counters(sched, tenants) == real.counters(tenants), f"event {step}: counters differ"
    from leases.audit import audit  # noqa: PLC0415

    seen["passed_on"] = real.passed
    report = audit(tenants)
    assert report.clean, "the lease layer's own audit after the sequence:\n" + report.describe()
    return seen


@pytest.mark.timeout(240)
def test_handoff_with_borrowing_decides_as_the_lease_layer(fresh_aws):
    """Caps of 4 (default), 1 and 2; two tiers borrow (burst 3 and 4) on one node of 4 slots with
    the default reserve: takes, borrows, parks, door parks, retries and wakes all happen."""
    seen = run_sequence("handoff", {"plain": Tier(), "small": Tier(cap=1, burst_cap=3),
                                    "mid": Tier(cap=2, burst_cap=4)}, events=160, seed=2)
    assert all(seen[k] > 0 for k in (policy.TAKE, policy.BORROW, policy.PARK, policy.GIVE_WAY, "door_park", "woken", "retry",
                                     "passed_on")), seen


@pytest.mark.timeout(120)
def test_timer_decides_as_the_lease_layer(fresh_aws):
    """Under the timer policy a cap hit defers and nothing parks, on both sides."""
    seen = run_sequence("timer", {"a": Tier(cap=1), "b": Tier(cap=2)}, events=60, seed=5)
    assert seen[policy.DEFER] > 0 and seen[policy.TAKE] > 0 and not seen[policy.PARK], seen
