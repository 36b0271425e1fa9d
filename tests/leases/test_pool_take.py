"""The slot that goes back to the pool, on real moto DynamoDB and SQS (nothing of the project
mocked): several waiting jobs woken in one transaction, a wake of borrowers bounded by the slots
no queued job claims, the door for a tier that may borrow, a releaser taking the next job in place
(another tenant's queued job, or the job its own wake brought), and the spread of concurrent
releasers over a tenant's waiting line."""

from __future__ import annotations

import uuid

import pytest

from leases import lifecycle, nodes, transactions, waiting
from leases.audit import audit
from leases.errors import CapReached, JobNotQueued
from leases.models import JobItem
from leases.tenants import set_cap
from imposition.common.settings import get_settings
from tasks.base import HeldWake, PoolRead, is_duplicate
from tests.integration.test_message_groups import receive_all
from tests.leases.test_break_handoff import _counters, _parked, _running
from tests.leases.test_break_waiting import _new_job, _tenant
from tests.support.recording import DynamoRecording


def _queued(tenant_id: str, n: int) -> list[str]:
    """``n`` jobs of ``tenant_id`` queued without a message (as a door or wake leaves them)."""
    ids = []
    for _ in range(n):
        job = _new_job(tenant_id)
        assert waiting.admit(job, door=False) is True
        ids.append(job.job_id)
    return ids


def _node(borrowable: int) -> None:
    """A live node whose slots leave ``borrowable`` above the reserve (added to any registered)."""
    nodes.register(f"node-{uuid.uuid4().hex[:6]}", borrowable + get_settings().reserve_slots)


def _transactions(recording: DynamoRecording) -> list[int]:
    """Items of each ``TransactWriteItems`` recorded."""
    return [len(body["TransactItems"]) for body in recording.calls("TransactWriteItems")]


# -- several waiting jobs woken in one transaction --------------------------------------------------


def test_a_cap_raise_wakes_the_oldest_waiting_jobs_in_one_transaction(fresh_aws):
    """Five jobs parked at the door under cap 0; the cap raised to 3: one transaction wakes the three
    oldest (tenant item + 3 jobs), each then published with the tenant's group; the two youngest
    wait on; counters exact."""
    tenant = _tenant("batch")
    set_cap(tenant, 0)
    parked = _parked(tenant, 5)
    set_cap(tenant, 3)
    published: list[tuple[str, str]] = []
    with DynamoRecording(fresh_aws) as recording:
        woken = waiting.wake(tenant, publish=lambda t, j: published.append((t, j)), reason="cap_change")
    assert woken == parked[:3]
    assert published == [(tenant, j) for j in parked[:3]]
    assert _transactions(recording) == [4]
    assert _counters(tenant) == {"in_flight": 0, "queued": 3, "waiting": 2, "occupied": 3}
    statuses = {j: JobItem.get(j, consistent_read=True) for j in parked}
    assert [statuses[j].status for j in parked] == ["queued"] * 3 + ["waiting"] * 2
    assert {statuses[j].woken_by for j in parked[:3]} == {"cap_change"}
    assert audit([tenant]).clean


def test_a_batched_wake_is_refused_whole_when_a_job_moved_or_the_counters_did(fresh_aws):
    """The batch's conditions: each job still waiting, the tenant's counters as read. One job
    cancelled since the read, or the tenant read before another wake: refused, nothing written; a
    wake then wakes one at a time and the counters stay exact."""
    tenant = _tenant("batchno")
    set_cap(tenant, 0)
    parked = _parked(tenant, 4)
    set_cap(tenant, 3)
    stale_tenant = waiting.read_tenant(tenant)
    jobs = waiting.oldest_waiting(tenant, 3)
    assert lifecycle.cancel(parked[1]).status == "failed"
    assert waiting._try_wake_batch(jobs, stale_tenant, 1.0, "cap_change") is False
    assert _counters(tenant) == {"in_flight": 0, "queued": 0, "waiting": 3, "occupied": 0}
    assert JobItem.get(parked[0], consistent_read=True).status == "waiting"

    fresh = waiting.read_tenant(tenant)
    assert waiting._try_wake_batch(waiting.oldest_waiting(tenant, 1), fresh, 2.0, "cap_change") is True
    assert waiting._try_wake_batch(waiting.oldest_waiting(tenant, 2), fresh, 3.0, "cap_change") is False  # occupied moved
    assert _counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 2, "occupied": 1}

    woken = waiting.wake(tenant, publish=lambda t, j: None, reason="cap_change")
    assert woken == [parked[2], parked[3]]
    assert _counters(tenant) == {"in_flight": 0, "queued": 3, "waiting": 0, "occupied": 3}
    assert audit([tenant]).clean


# -- the wake of borrowers, bounded by the slots no queued job claims -------------------------------


def test_wake_of_borrowers_wakes_no_more_jobs_than_unclaimed_slots(fresh_aws):
    """Three slots above the reserve free, two borrowing tiers at their caps with waiting jobs, and
    two of a third tenant's jobs queued (on their way to two of those slots): one job is woken, not
    one of each tier. At least one is, even where the queued jobs claim every free slot (a queued
    job may be in retry backoff, on its way to no slot); with none free, none."""
    first, second, claimant = _tenant("bwa"), _tenant("bwb"), _tenant("bwc")
    for tenant in (first, second):
        set_cap(tenant, 1, burst_cap=3)
        _running(tenant, 1)
        _parked(tenant, 2)  # parked at the door: no node registered yet, nothing to borrow
    _node(5)
    assert nodes.slots().busy == 2  # borrowable 5: three slots to borrow
    _queued(claimant, 2)
    woken = waiting.wake_borrowers(publish=lambda t, j: None)
    assert len(woken) == 1
    assert sum(_counters(t)["queued"] for t in (first, second)) == 1
    assert len(waiting.wake_borrowers(publish=lambda t, j: None)) == 1  # 3 free, 3 claimed: the floor
    _running(claimant, 1)
    _running(claimant, 1)
    _running(claimant, 1)  # busy 5 = borrowable
    assert waiting.wake_borrowers(publish=lambda t, j: None) == []
    assert audit([first, second, claimant]).clean


# -- the door of a tier that may borrow -------------------------------------------------------------


def test_the_door_queues_a_borrowing_tier_at_its_cap_while_a_slot_is_free_to_borrow(fresh_aws):
    """Cap 1, burst 3, one lease held: with slots above the reserve free, a new job is queued at the
    door (no park, no wake); with the pool at its reserve, it is parked."""
    tenant, filler = _tenant("bdoor"), _tenant("bfill")
    _node(2)
    set_cap(tenant, 1, burst_cap=3)
    _running(tenant, 1)
    job = _new_job(tenant)
    assert waiting.admit(job) is True
    assert JobItem.get(job.job_id, consistent_read=True).status == "queued"
    _running(filler, 1)  # busy 2 = borrowable: nothing to borrow
    later = _new_job(tenant)
    assert waiting.admit(later) is False
    assert _counters(tenant) == {"in_flight": 1, "queued": 1, "waiting": 1, "occupied": 2}
    assert audit([tenant, filler]).clean


# -- a releaser takes the next job in place ----------------------------------------------------------


def test_a_slot_back_in_the_pool_is_taken_for_the_oldest_queued_job_of_a_tenant_below_its_cap(fresh_aws, task):
    """Tenant b has two jobs queued and room under its cap; the releaser (whose lend was refused
    because b wants a slot) takes b's oldest in place: b's lease, ``queued − 1``, ``in_flight + 1``.
    The job's own message, delivered later, finds it running and is a duplicate to drop."""
    releaser, other = _tenant("pool-a"), _tenant("pool-b")
    queued = _queued(other, 2)
    pool = PoolRead()
    assert task._none_other_wants_slot(releaser, pool) is False
    assert set(pool.wanting or {}) == {other}
    lease = task._take_from_pool(pool, "w/1")
    assert lease is not None and (lease.job_id, lease.tenant_id, lease.worker) == (queued[0], other, "w/1")
    assert _counters(other) == {"in_flight": 1, "queued": 1, "waiting": 0, "occupied": 2}
    with pytest.raises(JobNotQueued) as delivered:
        transactions.acquire(queued[0], other, "w/2")
    assert is_duplicate(delivered.value, after_attempt=0)
    assert audit([other]).clean


def test_no_take_from_the_pool_for_a_tenant_at_its_cap_or_a_job_gone(fresh_aws, task):
    """b at its cap with a job queued: nobody to take (b's message brings it, to park). c's only
    queued job started by its message between the read and the take: the take is refused, nothing
    written."""
    releaser, full, raced = _tenant("pool-r"), _tenant("pool-full"), _tenant("pool-race")
    set_cap(full, 1)
    _running(full, 1)
    _queued(full, 1)
    pool = PoolRead()
    task._none_other_wants_slot(releaser, pool)
    assert task._take_from_pool(pool, "w/1") is None
    assert _counters(full) == {"in_flight": 1, "queued": 1, "waiting": 0, "occupied": 2}

    [job] = _queued(raced, 1)
    pool = PoolRead()
    task._none_other_wants_slot(releaser, pool)
    transactions.acquire(job, raced, "w/2")  # its message won
    before = _counters(raced)
    assert task._take_from_pool(pool, "w/1") is None
    assert _counters(raced) == before
    assert audit([full, raced]).clean


def test_a_job_the_release_woke_is_taken_in_place_or_published(fresh_aws, task):
    """A borrowing tier (cap 1, burst 3) at its cap, two slots above the reserve free: the job a wake
    brought is held back (:class:`HeldWake`) and taken with a borrowing acquire. The next one is
    woken too, but another tenant takes the last slot above the reserve before the take: refused,
    it is published instead (its message on SQS, the job still queued)."""
    tenant, filler = _tenant("held"), _tenant("heldfill")
    set_cap(tenant, 1, burst_cap=3)
    _running(tenant, 1)
    first, second = _parked(tenant, 2)  # parked at the door: no node registered yet
    _node(3)

    held = HeldWake()
    assert waiting.wake(tenant, publish=held, limit=1) == [first]
    assert held.job == (tenant, first)
    lease = task._take_held(held.job, "w/1")
    assert lease is not None and lease.job_id == first
    assert JobItem.get(first, consistent_read=True).status == "running"

    held = HeldWake()
    assert waiting.wake(tenant, publish=held, limit=1) == [second]
    _running(filler, 1)  # busy 3 = borrowable: nothing left to borrow
    assert held.job is not None and task._take_held(held.job, "w/1") is None
    [message] = receive_all(get_settings().imposition_queue, 1)
    assert message["kwargs"] == {"tenant_id": tenant, "job_id": second}
    assert JobItem.get(second, consistent_read=True).status == "queued"
    assert _counters(tenant) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
    assert audit([tenant, filler]).clean


def test_a_take_refused_at_the_cap_does_not_borrow_for_a_tier_that_does_not(fresh_aws, task):
    """A tier without a burst cap at its cap: the held job is refused (CapReached, no borrowing
    acquire tried) and published."""
    tenant = _tenant("heldcap")
    set_cap(tenant, 1)
    _running(tenant, 1)
    [job] = _queued(tenant, 1)
    with pytest.raises(CapReached) as refused:
        transactions.acquire(job, tenant, "w/0")
    assert not refused.value.may_borrow
    assert task._take_held((tenant, job), "w/1") is None
    [message] = receive_all(get_settings().imposition_queue, 1)
    assert message["kwargs"] == {"tenant_id": tenant, "job_id": job}


# -- concurrent releasers skip the jobs handed meanwhile ---------------------------------------------


def test_releasers_that_read_the_same_line_hand_on_in_submission_order(fresh_aws):
    """Five leases of one tenant commit one after another with hand-offs read before any of them
    applied (the same stale line): each hands its place to the next waiting job, in submission
    order, and after one refused try (its first candidate went to an earlier release) a batch read
    of the rest skips every job taken meanwhile: two transactions at most, not k. Counters exact."""
    tenant = _tenant("stale-line")
    set_cap(tenant, 5)
    leases = _running(tenant, 5)
    parked = _parked(tenant, 6)
    jobs = waiting.oldest_waiting(tenant, 8)
    hand_offs = [transactions.HandOff([j.job_id for j in jobs], 1.0) for _ in leases]
    tries = []
    for lease, hand_off in zip(leases, hand_offs):
        with DynamoRecording(fresh_aws) as recording:
            transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
        tries.append((len(recording.calls("TransactWriteItems")), len(recording.calls("BatchGetItem"))))
    assert [h.job_id for h in hand_offs] == parked[:5]
    assert tries == [(1, 0)] + [(2, 1)] * 4
    assert _counters(tenant) == {"in_flight": 0, "queued": 5, "waiting": 1, "occupied": 5}
    assert audit([tenant]).clean


def test_still_waiting_keeps_the_order_and_drops_jobs_gone_or_foreign(fresh_aws):
    """The batch read keeps, in their order, the candidates still waiting for the tenant: not a job
    woken, cancelled, another tenant's, or one that does not exist."""
    tenant, other = _tenant("still"), _tenant("still-other")
    set_cap(tenant, 0)
    set_cap(other, 0)
    a, b, c, d = _parked(tenant, 4)
    [foreign] = _parked(other, 1)
    set_cap(tenant, 1)
    assert waiting.wake(tenant, publish=lambda t, j: None) == [a]
    assert lifecycle.cancel(c).status == "failed"
    assert transactions._still_waiting([d, a, "no-such-job", foreign, b, c], tenant) == [d, b]
    assert transactions._still_waiting([b], tenant) == [b]  # one candidate: nothing to read
