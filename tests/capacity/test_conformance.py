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
from leases import nodes, policy, transactions, waiting
from leases.errors import CapReached
from leases.models import JobItem, TenantItem
from leases.tenants import set_cap
from imposition.common.settings import get_settings

LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}
SLOTS = 4


class RealLayer:
    """The lease layer on moto, driven as the worker and the submission path drive it."""

    def __init__(self, waiting_policy: str) -> None:
        self.waiting_policy = waiting_policy
        self.leases: dict[str, transactions.Lease] = {}
        self.passed = 0  # commits that handed their place on in their own transaction
        self.slots_passed = 0  # … and their slot too (in place)

    def submit(self, tenant: str, job: str) -> tuple[bool, list]:
        transactions.ensure_tenant(tenant)
        woken: list = []
        queued = waiting.admit(JobItem(job, tenant_id=tenant, token=f"tok-{job}", max_attempts=3, layout=LAYOUT,
                                       input_key=f"tenants/{tenant}/jobs/{job}/input.pdf", submitted_at=time.time()),
                               door=self.waiting_policy == "handoff")
        if not queued:
            waiting.wake(tenant, publish=lambda t, j: woken.append((t, j)), reason="door")
        return queued, woken

    def deliver(self, tenant: str, job: str) -> str:
        try:
            self.leases[job] = transactions.acquire(job, tenant, "w1")
            return policy.TAKE
        except CapReached as exc:
            if self.waiting_policy == "timer":
                transactions.record_defer(job)
                return policy.DEFER
            if exc.may_borrow:
                try:
                    self.leases[job] = transactions.acquire(job, tenant, "w1", borrow=True)
                    return policy.BORROW
                except CapReached:
                    pass
            assert waiting.park(job, tenant), "one event at a time: a park after a refused acquire commits"
            return policy.PARK

    def finish(self, job: str, *, fail: bool, in_place: bool = False) -> list:
        """A retry releases and wakes; a commit first offers its place to the oldest waiting jobs
        (``FairTask._successor``), and wakes only if the release handed it to none. ``in_place``: the
        commit passes its slot too (``lease_to``), lent above the cap when no other tenant wants a
        slot (``FairTask._successor`` without its hint: read once the pass within the cap is
        refused, ``HandOff.lend_if``); a passed slot wakes nobody else."""
        lease = self.leases.pop(job)
        woken: list = []
        hand_off = None
        if fail:
            transactions.release_for_retry(lease, error="stand-in failure", error_code="stand_in")
        else:
            oldest = waiting.oldest_waiting(lease.tenant_id, get_settings().handoff_scan_limit) \
                if self.waiting_policy == "handoff" else []
            hand_off = transactions.HandOff(
                [j.job_id for j in oldest], time.time(), lease_to="w1" if in_place else None,
                lend_if=(lambda: not waiting.others_want_slot(lease.tenant_id)) if in_place else None,
                parked_at={j.job_id: float(j.parked_at) for j in oldest}) if oldest else None
            transactions.commit_success(lease, output_key=f"out/{job}", sheets=1, sides=1, hand_off=hand_off)
        if hand_off is not None and hand_off.lease is not None:
            self.leases[hand_off.lease.job_id] = hand_off.lease
            self.slots_passed += 1
            return [(lease.tenant_id, hand_off.job_id)]
        if hand_off is not None and hand_off.job_id is not None:
            woken.append((lease.tenant_id, hand_off.job_id))
            self.passed += 1
        else:
            waiting.wake(lease.tenant_id, publish=lambda t, j: woken.append((t, j)))
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
        transactions.ensure_tenant(names[short])
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
    seen: Counter = Counter()
    for step in range(events):
        roll = rng.random()
        if roll < 0.4 and messages:
            tenant, job = messages.pop(rng.randrange(len(messages)))
            expected = sched.deliver(tenant, job, order[job], time.time())
            got = real.deliver(tenant, job)
            decision = (expected, got)
            if expected in (policy.TAKE, policy.BORROW):
                running.append((tenant, job))
            elif expected == policy.DEFER:
                messages.append((tenant, job))
            seen[expected] += 1
        elif roll < 0.7 and running:
            tenant, job = running.pop(rng.randrange(len(running)))
            fail = rng.random() < 0.2
            in_place = not fail and waiting_policy == "handoff" and rng.random() < 0.5
            pass_slot = in_place and sched.slot_passes(tenant, time.time())
            seen["lent"] += pass_slot and not policy.passes_slot(sched.tenants[tenant], s.default_cap, time.time())
            expected = sched.release(tenant, requeue=fail, pass_slot=pass_slot)
            got = real.finish(job, fail=fail, in_place=in_place)
            decision = ((expected, pass_slot), (got, real.slots_passed > seen["slot_passed"]))
            if fail:
                messages.append((tenant, job))
            if decision[0][1]:  # the handed job runs under the passed lease
                running += expected
                seen["slot_passed"] += 1
                expected = []
            messages += expected
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
                                    "mid": Tier(cap=2, burst_cap=4)}, events=160, seed=11)
    assert all(seen[k] > 0 for k in (policy.TAKE, policy.BORROW, policy.PARK, "door_park", "woken", "retry",
                                     "passed_on", "slot_passed")), seen


@pytest.mark.timeout(240)
def test_slots_lent_in_place_above_the_cap_decide_as_the_lease_layer(fresh_aws):
    """A borrowing tier (cap 1, burst 3) beside a light tenant of cap 1, commits run in place:
    slots pass within the cap, are lent on above it while the light tenant wants none, and go back
    to the pool when it does."""
    seen = run_sequence("handoff", {"solo": Tier(cap=1, burst_cap=3), "light": Tier(cap=1)}, events=120, seed=1)
    assert all(seen[k] > 0 for k in (policy.BORROW, "slot_passed", "lent", "woken")), seen


@pytest.mark.timeout(120)
def test_timer_decides_as_the_lease_layer(fresh_aws):
    """Under the timer policy a cap hit defers and nothing parks, on both sides."""
    seen = run_sequence("timer", {"a": Tier(cap=1), "b": Tier(cap=2)}, events=60, seed=5)
    assert seen[policy.DEFER] > 0 and seen[policy.TAKE] > 0 and not seen[policy.PARK], seen
