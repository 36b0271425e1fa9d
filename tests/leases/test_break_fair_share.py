"""The fair share of a slot a commit could pass on in place (``policy.yields_slot``,
``FairTask._successor``) and the process's skip of its read (``FairTask._alone_until``,
``fair_share_recheck_s``), on real moto DynamoDB (nothing of the project mocked): ``FairTask``'s
own ``_successor`` / ``_hand_off`` / ``_take_from_pool`` driven as ``_run_leased`` drives them."""

from __future__ import annotations

import pytest

from leases import transactions, waiting
from leases.audit import audit
from leases.tenants import set_cap
from imposition.common.settings import get_settings
from tasks.base import FairTask
from tests.leases.test_break_handoff import _counters, _parked, _running
from tests.leases.test_break_lend import _commit, _pending_queries
from tests.leases.test_break_waiting import _new_job, _tenant
from tests.support.recording import DynamoRecording


@pytest.fixture
def recheck_s(monkeypatch):
    """Set ``fair_share_recheck_s`` for this test (the settings cache cleared around it)."""
    def set_(value: float) -> None:
        monkeypatch.setenv("IMPOSITION_FAIR_SHARE_RECHECK_S", str(value))
        get_settings.cache_clear()
    yield set_
    monkeypatch.undo()
    get_settings.cache_clear()


def _chain(tenant: str, cap: int = 4, waiting_jobs: int = 6) -> list[transactions.Lease]:
    set_cap(tenant, cap)
    leases = _running(tenant, cap)
    _parked(tenant, waiting_jobs)
    return leases


def test_a_commit_gives_its_slot_to_a_tenant_two_leases_poorer_and_takes_its_job(fresh_aws, task, recheck_s):
    """A tenant at its cap of 4 with jobs waiting commits while another tenant, no lease, has a job
    queued: the place passes only (its next job queued, to be published) and the slot passes to
    the other tenant's job in the same transaction, for the releasing child to run. Counters exact;
    the releasing tenant back at 4 - 1."""
    recheck_s(0)
    rich, poor = _tenant("fsrich"), _tenant("fspoor")
    leases = _chain(rich)
    [queued] = [job.job_id for job in [_new_job(poor)] if waiting.admit(job, door=False)]
    successor = task._successor(rich, lease_to=leases[0].worker)
    assert successor is not None and successor.hand_off.claim == transactions.Claim(queued, poor)
    with DynamoRecording(fresh_aws) as recording:
        transactions.commit_success(leases[0], output_key="k", sheets=1, sides=2, hand_off=successor.hand_off)
        next_run = task._hand_on(leases[0], successor, True)
    assert next_run is not None
    taken = next_run[0]
    assert (taken.job_id, taken.tenant_id) == (queued, poor) and successor.hand_off.claimed == taken
    assert successor.hand_off.lease is None  # only the place passed to the rich tenant's next job
    assert len(recording.calls("TransactWriteItems")) == 1  # the slot passed in the commit itself
    assert transactions.read_lease(queued).token == taken.token
    assert _counters(rich) == {"in_flight": 3, "queued": 1, "waiting": 5, "occupied": 4}
    assert _counters(poor) == {"in_flight": 1, "queued": 0, "waiting": 0, "occupied": 1}
    assert audit([rich, poor]).clean


def test_one_lease_fewer_is_no_claim_the_slot_passes_in_place(fresh_aws, task, recheck_s):
    """The other tenant holds 3 leases to the releaser's 4 and has a job queued: giving the slot
    would only swap their counts, so it passes in place as before."""
    recheck_s(0)
    rich, other = _tenant("fsfour"), _tenant("fsthree")
    leases = _chain(rich)
    set_cap(other, 4)
    _running(other, 3)
    waiting.admit(_new_job(other), door=False)
    passed = _commit(task, leases[0])
    assert passed is not None and passed.tenant_id == rich
    assert _counters(rich)["in_flight"] == 4
    assert audit([rich, other]).clean


def test_a_process_that_found_nobody_else_skips_the_read_for_the_recheck_interval(fresh_aws, task, recheck_s):
    """``fair_share_recheck_s`` 60: the first commit reads the pending index (nobody else wants a
    slot) and the process remembers it; the tenant's next commits pass in place with no query. A
    tenant that queues a job meanwhile is not seen until the interval ends (the documented bound:
    the interval plus one job); a read that finds it forgets the skip, so the next commit reads again."""
    recheck_s(60)
    rich, late = _tenant("fsskip"), _tenant("fslate")
    leases = _chain(rich)
    with DynamoRecording(fresh_aws) as recording:
        first = _commit(task, leases[0])
    assert first is not None and _pending_queries(recording) == 1
    assert rich in FairTask._alone_until
    waiting.admit(_new_job(late), door=False)  # wants a slot, no lease: a fair-share claim
    with DynamoRecording(fresh_aws) as recording:
        second = _commit(task, leases[1])
    assert second is not None and second.tenant_id == rich  # not seen: the read was skipped
    assert _pending_queries(recording) == 0
    FairTask._alone_until[rich] = 0.0  # the interval ends
    with DynamoRecording(fresh_aws) as recording:
        successor = task._successor(rich, lease_to=leases[2].worker)
    assert _pending_queries(recording) == 1
    assert successor is not None and successor.hand_off.claim is not None  # the claim is seen now
    assert successor.hand_off.claim.tenant_id == late
    assert rich not in FairTask._alone_until
    transactions.commit_success(leases[2], output_key="k", sheets=1, sides=2, hand_off=successor.hand_off)
    next_run = task._hand_on(leases[2], successor, True)
    assert next_run is not None and next_run[0].tenant_id == late
    assert audit([rich, late]).clean


def test_recheck_zero_reads_at_every_commit(fresh_aws, task, recheck_s):
    recheck_s(0)
    rich = _tenant("fsnoskip")
    leases = _chain(rich)
    passed = _commit(task, leases[0])
    with DynamoRecording(fresh_aws) as recording:
        _commit(task, passed)
    assert _pending_queries(recording) == 1 and rich not in FairTask._alone_until
