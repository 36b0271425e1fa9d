"""Attacks on the claim a releasing commit makes on another tenant's queued job (``HandOff.claim``,
``transactions.Claim``, ``transactions.claim_actions`` in ``transactions.fenced_release``;
``FairTask._successor`` / ``FairTask._hand_on``, 8f1a582), on real moto DynamoDB and SQS (nothing
of the project mocked; faults and interleavings are botocore hooks on the transaction client, or
threads).

Tests whose docstring starts with "Found:" exposed a defect of the change, failed on it and pass
since its fix; the others ("Held:") are attacks that held. Written by a helper set on the change.
"""

from __future__ import annotations

import functools
import time

import pytest

from leases import lifecycle, sweeper, transactions, waiting
from leases.audit import audit
from leases.errors import LeaseLost
from leases.models import JobItem, LeaseItem, TenantItem
from leases.tenants import set_cap
from imposition.common.clocks import get_clocks
from tasks.base import Successor
from tests.leases.test_break_handoff import _borrowing_three, _cluster_busy, _counters, _parked, _running
from tests.leases.test_break_pool_take import _messages, _Sequenced, _yielding_chain
from tests.leases.test_break_waiting import _new_job, _tenant
from tests.support.recording import DynamoRecording
from tests.support.together import together


def _commit(lease: transactions.Lease, successor: Successor) -> None:
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=successor.hand_off)


def _job(job_id: str) -> JobItem:
    return JobItem.get(job_id, consistent_read=True)


def _queued_job(tenant_id: str) -> str:
    job = _new_job(tenant_id)
    assert waiting.admit(job, door=False) is True
    return job.job_id


# -- the claim outlives the hand-off's candidates ---------------------------------------------------


@pytest.mark.parametrize("answers", [[None, None], [None, "lost"]], ids=["answered", "second answer lost"])
@pytest.mark.parametrize("first_refusal", ["candidate woken elsewhere", "releaser's cap lowered"])
def test_a_claim_refused_after_the_hand_off_was_dropped_does_not_lose_the_commit(fresh_aws, task, first_refusal,
                                                                                   answers):
    """Found: the commit's first try is refused for the hand-off alone (its only candidate was woken
    by another release of the tenant, or the tenant's cap was lowered below ``occupied``): the
    release drops the hand-off (``candidates`` empty) but keeps the claim, and tries again. Before
    that second try the claimed job is taken by its own delivery (an acquire of the claimant). The
    second try is refused for the claim only, but with no candidate left (``handing`` False) and
    no none-waiting check (``checking`` False) ``fenced_release`` does not look at the claim's
    reasons at all: it reads back, finds none of its tries applied and returns False, so
    ``commit_success`` raises ``LeaseLost`` although the lease is still ours and nothing was
    written. The worker drops the finished job's result (``_on_lease_lost``), and the job runs
    again once the sweeper reclaims the lease. With the second try's answer lost, the read-back
    finds the lease held, tries the claim again, and ends the same way. Fixed: a try refused for
    the claim's conditions alone drops the claim and tries again whatever else it carried."""
    rich, poor = _tenant("cl-rich"), _tenant("cl-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    claim = successor.hand_off.claim
    if first_refusal == "candidate woken elsewhere":
        successor.hand_off.candidates[:] = successor.hand_off.candidates[:1]
        set_cap(rich, 5)  # room for one: a wake elsewhere moves the oldest waiting job to queued
        woken = waiting.wake(rich, publish=lambda *a, **k: None, reason="cap_change")
        set_cap(rich, 4)
        assert successor.hand_off.candidates[0] in woken
    else:
        set_cap(rich, 2)

    def before(k: int) -> None:
        if k == 1:  # between the refused first try and the second: the claimant's delivery takes it
            transactions.acquire(claim.job_id, poor, "delivery")

    with _Sequenced(answers, on_before=before):
        try:
            _commit(lease, successor)
        except LeaseLost as exc:
            still = transactions.still_held(lease)
            pytest.fail(f"commit refused as LeaseLost ({exc}) while the lease is still held: {still}; "
                        f"the job stays {_job(lease.job_id).status}")
    assert _job(lease.job_id).status == "succeeded"
    assert successor.hand_off.claimed is None
    assert audit([rich, poor]).clean


# -- the claim's counters after every path ----------------------------------------------------------


def test_a_claim_with_the_releasers_cap_lowered_frees_the_place_and_passes_the_slot(fresh_aws, task):
    """Held: the releaser's cap is lowered below its ``occupied`` between the read and the commit:
    the hand-off is refused (``place_passes_on``) and dropped, the claim is kept and applies in the
    next try: the releaser frees its place and its lease (in_flight − 1, occupied − 1), the claimant
    takes the slot (in_flight + 1, queued − 1), busy unchanged, audit clean; the child runs the
    claimed lease next."""
    rich, poor = _tenant("cc-rich"), _tenant("cc-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    claim = successor.hand_off.claim
    set_cap(rich, 2)
    busy = _cluster_busy()
    _commit(lease, successor)
    assert successor.hand_off.job_id is None and successor.hand_off.claimed is not None
    assert successor.hand_off.claimed.job_id == claim.job_id
    next_run = task._hand_on(lease, successor, True)
    assert next_run is not None and next_run[0] == successor.hand_off.claimed
    assert _counters(rich) == {"in_flight": 3, "queued": 0, "waiting": 6, "occupied": 3}
    assert _counters(poor) == {"in_flight": 1, "queued": 0, "waiting": 0, "occupied": 1}
    assert _cluster_busy() == busy
    assert audit([rich, poor]).clean


def test_a_borrowed_lease_passes_its_slot_to_a_claim(fresh_aws, task):
    """Held: a borrowing tier (cap 1, burst 3) holding three leases, two borrowed, one job parked;
    tenant b (no lease) has a job queued: the commit of a borrowed lease claims b's job. The
    releaser's place passes to its parked job (queued, published: no slot for it), b's job runs
    under the releasing worker, busy unchanged; the sweeper finds nothing; audit clean."""
    releaser, other = _tenant("cb-a"), _tenant("cb-b")
    leases = _borrowing_three(releaser)
    [parked] = _parked(releaser, 1)
    set_cap(other, 2)
    queued = _queued_job(other)
    successor = task._successor(releaser, lease_to=leases[2].worker)
    assert successor is not None and successor.hand_off.claim == transactions.Claim(queued, other)
    busy = _cluster_busy()
    _commit(leases[2], successor)
    next_run = task._hand_on(leases[2], successor, True)
    assert next_run is not None and (next_run[0].job_id, next_run[0].tenant_id) == (queued, other)
    assert _job(parked).status == "queued" and _job(queued).status == "running"
    [message] = _messages(1)  # the handed job's, published once; none for the claimed job
    assert message["kwargs"] == {"tenant_id": releaser, "job_id": parked}
    assert _counters(releaser) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
    assert _counters(other) == {"in_flight": 1, "queued": 0, "waiting": 0, "occupied": 1}
    assert _cluster_busy() == busy
    assert audit([releaser, other]).clean


def test_a_claim_whose_job_was_cancelled_passes_in_place(fresh_aws, task):
    """Held: the claimed job is cancelled between the read and the commit: the claim is refused,
    the slot passes in place to the releaser's own next job; the claimant's counters only moved by
    the cancel; audit clean."""
    rich, poor = _tenant("cx-rich"), _tenant("cx-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    lifecycle.cancel(successor.hand_off.claim.job_id)
    before, busy = _counters(poor), _cluster_busy()
    _commit(lease, successor)
    assert successor.hand_off.claimed is None and successor.hand_off.lease is not None
    assert (_job(successor.hand_off.claim.job_id).status, _job(successor.hand_off.claim.job_id).error_code) == (
        "failed", "cancelled")
    assert _counters(poor) == before and _cluster_busy() == busy
    assert audit([rich, poor]).clean


def test_a_claim_of_a_borrowing_tier_at_its_cap_is_refused_in_the_commit(fresh_aws, task):
    """Held: the claimant is a borrowing tier (cap 1, burst 3) already at its cap with a job queued
    (it could borrow, but a claim takes within the cap only): the claim is refused and the slot
    passes in place; the claimant is not taken above its cap."""
    rich, poor = _tenant("cbt-rich"), _tenant("cbt-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    set_cap(poor, 1, burst_cap=3)
    _running(poor, 1)
    claimed_job = successor.hand_off.claim.job_id
    _commit(lease, successor)
    assert successor.hand_off.claimed is None and successor.hand_off.lease is not None
    assert _job(claimed_job).status == "queued"
    assert _counters(poor)["in_flight"] == 1
    assert audit([rich, poor]).clean


def test_a_claim_refused_with_the_releasers_cap_lowered_ends_in_a_plain_release(fresh_aws, task):
    """Held: the claimant is frozen and the releaser's cap lowered below its ``occupied``, both
    after the read: the first try is refused for both; the claim is dropped, the pass in place is
    refused, then the place only, then a plain release applies (the place freed, busy − 1);
    counters exact, audit clean."""
    rich, poor = _tenant("cz-rich"), _tenant("cz-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    TenantItem(poor).update(actions=[TenantItem.repair_until.set(time.time() + 600)])
    set_cap(rich, 2)
    before, busy = _counters(poor), _cluster_busy()
    _commit(lease, successor)
    assert successor.hand_off.claimed is None and successor.hand_off.lease is None
    assert successor.hand_off.job_id is None
    assert _counters(rich) == {"in_flight": 3, "queued": 0, "waiting": 6, "occupied": 3}
    assert _counters(poor) == before and _cluster_busy() == busy - 1
    TenantItem(poor).update(actions=[TenantItem.repair_until.remove()])
    assert audit([rich, poor]).clean


# -- ambiguous answers and refused claims -----------------------------------------------------------


@pytest.mark.parametrize("plan", [["lost"], ["before"], [None, "lost"], [None, "after"]])
def test_a_claim_taken_elsewhere_with_ambiguous_answers_passes_in_place_once(fresh_aws, task, plan):
    """Held: the claimed job is taken by its own delivery just before the commit's first try, and
    the tries are answered 500 (the refused claim's answer lost, a 500 before it is sent, the
    in-place try's answer lost or applied-then-500): the release reads back which try applied and
    reports the in-place lease; no claim lease, the job ran once, counters exact."""
    rich, poor = _tenant("ca-rich"), _tenant("ca-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    claim = successor.hand_off.claim

    def before(k: int) -> None:
        if k == 0:
            transactions.acquire(claim.job_id, poor, "delivery")

    busy = _cluster_busy()
    with _Sequenced(plan, on_before=before):
        _commit(lease, successor)
    assert successor.hand_off.claimed is None and successor.hand_off.lease is not None
    assert transactions.still_held(successor.hand_off.lease)
    held = transactions.read_lease(claim.job_id)
    assert held is not None and held.worker == "delivery"
    assert int(_job(claim.job_id).attempts) == 1
    assert _counters(poor) == {"in_flight": 1, "queued": 0, "waiting": 0, "occupied": 1}
    assert _counters(rich) == {"in_flight": 4, "queued": 0, "waiting": 5, "occupied": 4}
    assert _cluster_busy() == busy + 1  # the delivery's acquire
    assert audit([rich, poor]).clean


def test_a_claim_applied_and_answered_500_is_not_taken_again_by_the_delivery(fresh_aws, task):
    """Held: the claiming commit applies and its answer is lost; the claimant's own message is then
    delivered: its acquire finds the job running and is a duplicate; one lease, one attempt."""
    rich, poor = _tenant("cd-rich"), _tenant("cd-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    claim = successor.hand_off.claim
    with _Sequenced(["lost"]):
        _commit(lease, successor)
    assert successor.hand_off.claimed is not None
    from leases.errors import JobNotQueued
    from tasks.base import is_duplicate
    with pytest.raises(JobNotQueued) as delivered:
        transactions.acquire(claim.job_id, poor, "delivery")
    assert is_duplicate(delivered.value, after_attempt=0)
    assert int(_job(claim.job_id).attempts) == 1
    assert audit([rich, poor]).clean


# -- concurrent releasers ---------------------------------------------------------------------------


def test_concurrent_releasers_of_one_tenant_claim_one_job_once(fresh_aws, task):
    """Held: four leases of the rich tenant commit at once (a Barrier), all having read the same
    claim on the poor tenant's one queued job (cap 1): exactly one claims it, the other three pass
    their slots in place; no job runs twice, no cap exceeded, busy unchanged, audit clean."""
    rich, poor = _tenant("cr-rich"), _tenant("cr-poor")
    set_cap(rich, 4)
    set_cap(poor, 1)
    leases = _running(rich, 4)
    _parked(rich, 8)
    queued = _queued_job(poor)
    successors = [task._successor(rich, lease_to=f"w/{i}") for i in range(4)]
    assert all(s is not None and s.hand_off.claim == transactions.Claim(queued, poor) for s in successors)
    busy = _cluster_busy()
    together([functools.partial(_commit, leases[i], successors[i]) for i in range(4)])
    claimed = [s.hand_off.claimed for s in successors if s.hand_off.claimed is not None]
    assert len(claimed) == 1 and claimed[0].job_id == queued
    passed = [s.hand_off.lease for s in successors if s.hand_off.lease is not None]
    assert len({p.job_id for p in passed}) == len(passed)
    assert _counters(poor)["in_flight"] == 1
    assert _counters(rich)["in_flight"] <= 4
    assert _cluster_busy() == busy
    assert audit([rich, poor]).clean


def test_concurrent_releasers_of_several_tenants_keep_every_cap(fresh_aws, task):
    """Held: two rich tenants (cap 4, four leases, jobs parked) and two poor tenants (cap 1, two
    jobs queued each): eight commits at once (a Barrier), each having read a claim. Every claim
    that applies keeps its claimant within its cap of 1; no job has two leases or two attempts;
    busy unchanged; audit clean."""
    richs = [_tenant(f"cm-rich{i}") for i in range(2)]
    poors = [_tenant(f"cm-poor{i}") for i in range(2)]
    pairs = []
    for rich in richs:
        set_cap(rich, 4)
        pairs += [(rich, lease) for lease in _running(rich, 4)]
        _parked(rich, 8)
    for poor in poors:
        set_cap(poor, 1)
        _queued_job(poor)
        _queued_job(poor)
    successors = [task._successor(rich, lease_to=f"w/{i}") for i, (rich, _) in enumerate(pairs)]
    assert all(s is not None and s.hand_off.claim is not None for s in successors)
    busy = _cluster_busy()
    together([functools.partial(_commit, lease, successor) for (_, lease), successor in zip(pairs, successors)],
             timeout_s=180)
    claimed = [s.hand_off.claimed for s in successors if s.hand_off.claimed is not None]
    assert 1 <= len(claimed) <= 2 and len({c.job_id for c in claimed}) == len(claimed)
    for poor in poors:
        assert _counters(poor)["in_flight"] <= 1
    for rich in richs:
        assert _counters(rich)["in_flight"] <= 4
    for c in claimed:
        assert int(_job(c.job_id).attempts) == 1
    assert _cluster_busy() == busy
    assert audit([*richs, *poors]).clean


# -- the sweeper and the claimed lease ------------------------------------------------------------


def test_the_sweeper_reclaims_an_abandoned_claimed_lease(fresh_aws, task):
    """Held: the child that claimed a job dies before running it; once the claimed lease expires
    past the sweeper's grace, the sweeper reclaims it: the job goes back to queued (for the
    claimant's tenant), its counters and busy are exact, audit clean."""
    rich, poor = _tenant("cs-rich"), _tenant("cs-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    _commit(lease, successor)
    claimed = successor.hand_off.claimed
    assert claimed is not None
    busy = _cluster_busy()
    past = time.time() - get_clocks().infra_report_grace_s - 1.0
    LeaseItem(claimed.job_id).update(actions=[LeaseItem.expires_at.set(past)])
    sweeper.sweep(time.time(), publish=lambda *a, **k: None)
    assert transactions.read_lease(claimed.job_id) is None
    assert _job(claimed.job_id).status in ("queued", "failed")
    assert _counters(poor)["in_flight"] == 0
    assert _cluster_busy() == busy - 1
    assert audit([rich, poor]).clean


def test_a_claim_refused_for_a_frozen_claimant_costs_one_try_and_the_repair_keeps_its_counters(fresh_aws, task):
    """Held: the claimant is frozen (a counter repair in progress) after the read: two release
    transactions, the second in place; the claimant's item unchanged."""
    rich, poor = _tenant("cf-rich"), _tenant("cf-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    TenantItem(poor).update(actions=[TenantItem.repair_until.set(time.time() + 600)])
    before = _counters(poor)
    with DynamoRecording(fresh_aws) as recording:
        _commit(lease, successor)
    assert len(recording.calls("TransactWriteItems")) == 2
    assert successor.hand_off.claimed is None and successor.hand_off.lease is not None
    assert _counters(poor) == before
    TenantItem(poor).update(actions=[TenantItem.repair_until.remove()])
    assert audit([rich, poor]).clean
