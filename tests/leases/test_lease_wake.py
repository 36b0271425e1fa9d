"""The wake (the sweep's unblock, a cap change's, the door's) and the wake of borrowers, on real moto
DynamoDB (nothing of the project mocked): a cap raise wakes the oldest waiting jobs, a wake of
borrowers is bounded by the slots no queued job claims, the door of a tier that may borrow."""

from __future__ import annotations

import uuid

from leases import nodes, waiting
from leases.audit import audit
from leases.models import JobItem
from leases.tenants import set_cap
from imposition.common.settings import get_settings
from tests.leases.helpers import counters as _counters
from tests.leases.helpers import claim_of
from tests.leases.helpers import new_job as _new_job
from tests.leases.helpers import parked as _parked
from tests.leases.helpers import running as _running
from tests.support.recording import DynamoRecording


def _tenant(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _queued(tenant_id: str, n: int) -> list[str]:
    """``n`` jobs of ``tenant_id`` queued without a message (as a door or wake leaves them)."""
    ids = []
    for _ in range(n):
        job = _new_job(tenant_id)
        assert waiting.admit(job, claim_of(job), door=False) is True
        ids.append(job.job_id)
    return ids


def _node(borrowable: int) -> None:
    """A live node whose slots leave ``borrowable`` above the reserve (added to any registered)."""
    nodes.register(f"node-{uuid.uuid4().hex[:6]}", borrowable + get_settings().reserve_slots)


def _transactions(recording: DynamoRecording) -> list[int]:
    """Items of each ``TransactWriteItems`` recorded."""
    return [len(body["TransactItems"]) for body in recording.calls("TransactWriteItems")]


# -- a cap raise ---------------------------------------------------------------------------------


def test_a_cap_raise_wakes_the_oldest_waiting_jobs(fresh_aws):
    """Five jobs parked at the door under cap 0; the cap raised to 3: the wake takes the three
    oldest, one transaction each (tenant item + job), each then published with the tenant's group;
    the two youngest wait on; counters exact."""
    tenant = _tenant("batch")
    set_cap(tenant, 0)
    parked = _parked(tenant, 5)
    set_cap(tenant, 3)
    published: list[tuple[str, str]] = []
    with DynamoRecording(fresh_aws) as recording:
        woken = waiting.wake(tenant, publish=lambda t, j: published.append((t, j)), reason="cap_change")
    assert woken == parked[:3]
    assert published == [(tenant, j) for j in parked[:3]]
    assert _transactions(recording) == [2, 2, 2]
    assert _counters(tenant) == {"in_flight": 0, "queued": 3, "waiting": 2, "occupied": 3}
    statuses = {j: JobItem.get(j, consistent_read=True) for j in parked}
    assert [statuses[j].status for j in parked] == ["queued"] * 3 + ["waiting"] * 2
    assert {statuses[j].woken_by for j in parked[:3]} == {"cap_change"}
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
    assert waiting.admit(job, claim_of(job)) is True
    assert JobItem.get(job.job_id, consistent_read=True).status == "queued"
    _running(filler, 1)  # busy 2 = borrowable: nothing to borrow
    later = _new_job(tenant)
    assert waiting.admit(later, claim_of(later)) is False
    assert _counters(tenant) == {"in_flight": 1, "queued": 1, "waiting": 1, "occupied": 2}
    assert audit([tenant, filler]).clean
