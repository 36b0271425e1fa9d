"""Attacks on the slot lent above the cap and on the release hints (``HandOff.lend``,
``HandOff.slot_refused``, ``FairTask._above_cap_last``, ``FairTask._none_waited_last``): real moto
DynamoDB, ``FairTask``'s own ``_successor`` / ``_hand_off`` driven as ``_run_leased`` drives them
around ``commit_success`` (nothing of the project mocked).
"""

from __future__ import annotations

import pytest

from leases import transactions
from leases.audit import audit
from leases.models import LeaseItem, TenantItem
from leases.tenants import set_cap
from tasks.base import FairTask
from tests.leases.test_break_handoff import _borrowing_three, _counters, _parked, _running
from tests.leases.test_break_waiting import _tenant
from tests.support.recording import DynamoRecording


@pytest.fixture
def task():
    """A FairTask as a worker child has it, with its process-wide release hints empty."""
    from tasks.imposition_task import ImposeTask

    FairTask._none_waited_last.clear()
    FairTask._above_cap_last.clear()
    yield ImposeTask()
    FairTask._none_waited_last.clear()
    FairTask._above_cap_last.clear()


def _commit(task: FairTask, lease: transactions.Lease) -> transactions.Lease | None:
    """``FairTask._run_leased`` after a run that may pass its slot: successor read, commit, hand-off;
    returns the lease passed to the handed job (run in place next), or None."""
    successor = task._successor(lease.tenant_id, lease_to=lease.worker)
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=successor and successor[1])
    return task._hand_off(lease.tenant_id, successor)


def _release_tries(recording: DynamoRecording, job_id: str) -> int:
    table = LeaseItem.Meta.table_name
    return sum(1 for body in recording.calls("TransactWriteItems") for item in body.get("TransactItems", ())
               if item.get("Delete", {}).get("TableName") == table
               and item["Delete"]["Key"].get("job_id", {}).get("S") == job_id)


def _pending_queries(recording: DynamoRecording) -> int:
    index = TenantItem.by_pending.Meta.index_name
    return sum(1 for body in recording.calls("Query") if body.get("IndexName") == index)


@pytest.mark.parametrize("change", ["tier no longer borrows", "pool at its reserve"])
def test_a_slot_passed_within_the_cap_ends_the_lending_mode(fresh_aws, task, change):
    """A borrowing tier (cap 1, burst 3) holding 3 leases commits: its slot cannot pass within the
    cap, so it is lent (``HandOff.lend_if``: nobody else wants a slot) and the process remembers the
    tenant (``_above_cap_last``) to try the lend first next time. Then the tenant is
    back within its cap (its tier changed to cap 3 without a burst cap; or, tier unchanged, its borrowed leases ended
    elsewhere while another tenant's running jobs took the pool down to its reserve). A commit that
    asks to lend, is refused the lend (no burst cap; the pool's condition check) and passes the slot
    *within* the cap must end the lending mode: the tenant is not above its cap any more.

    Found: ``HandOff.lend`` is only the caller's request, never what applied, so ``_hand_off`` reads
    "passed while lending" and keeps the tenant in ``_above_cap_last``. Every later commit of that
    tenant in the process then reads the pending index (``others_want_slot``) and sends a lend
    transaction that is cancelled before the pass that applies: two release transactions and a
    whole-index query per job, for as long as nobody else wants a slot."""
    tenant, other = _tenant("lendhint"), _tenant("lendfill")
    leases = _borrowing_three(tenant)
    _parked(tenant, 4)
    lent = _commit(task, leases[2])  # above the cap: refused within it, then lent
    assert lent is not None and tenant in FairTask._above_cap_last
    if change == "tier no longer borrows":
        set_cap(tenant, 3)  # in_flight 3, occupied 3 <= cap 3: within the cap, no burst cap
        holder = leases[1]
    else:
        for other_worker in (leases[1], lent):  # other workers' commits, no hand-off
            transactions.commit_success(other_worker, output_key="k", sheets=1, sides=2)
        set_cap(other, 3)
        _running(other, 3)  # busy 1 + 3 > borrowable 3: the pool is at its reserve; other wants no slot
        holder = leases[0]
    passed = _commit(task, holder)  # asks to lend (nobody else wants a slot); passes within the cap
    assert passed is not None
    assert _counters(tenant)["in_flight"] <= (3 if change == "tier no longer borrows" else 1)  # within the cap

    with DynamoRecording(fresh_aws) as recording:
        again = _commit(task, passed)  # the next job of the chain, still within the cap
    assert again is not None
    tries, queries = _release_tries(recording, passed.job_id), _pending_queries(recording)
    assert (tries, queries, tenant in FairTask._above_cap_last) == (1, 0, False), (
        f"a commit within the cap made {tries} release transactions and {queries} pending-index "
        f"queries; tenant still remembered above its cap: {tenant in FairTask._above_cap_last}")
    assert audit([tenant, other]).clean


@pytest.mark.parametrize("first", ["lend refused by the pool", "lent"])
def test_ambiguous_commit_after_a_lend_try_reports_what_applied(fresh_aws, first):
    """Attack (held): the commit's answers are 5xx after apply, on a lend that applies or after a
    lend refused by the pool's condition check (another tenant in the reserve) and a pass within
    the cap refused: the caller learns the lease passed (or that only the place passed), with
    ``slot_refused`` as the applied try saw it; busy and counters exact."""
    from tests.leases.test_break_handoff import _AfterApplyFault, _assert_passed, _cluster_busy, _handoff

    tenant, other = _tenant("lendamb"), _tenant("lendambother")
    leases = _borrowing_three(tenant)
    [parked] = _parked(tenant, 1)
    if first == "lend refused by the pool":
        _running(other, 1)
    busy = _cluster_busy()
    hand_off = _handoff(tenant, lease_to="w")
    hand_off.lend = True
    with _AfterApplyFault(2) as fault:
        transactions.commit_success(leases[2], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert fault.hits >= 1
    if first == "lent":
        _assert_passed(hand_off, parked, "w")
        assert (_cluster_busy(), hand_off.slot_refused) == (busy, False)
        assert _counters(tenant) == {"in_flight": 3, "queued": 0, "waiting": 0, "occupied": 3}
    else:
        assert (hand_off.job_id, hand_off.lease, hand_off.slot_refused) == (parked, None, True)
        assert _cluster_busy() == busy - 1
        assert _counters(tenant) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
    assert audit([tenant, other]).clean


@pytest.mark.parametrize("situation, lent, tries", [
    ("nobody else wants a slot", True, 2),
    ("another tenant has a job queued", False, 2),
    ("pool at its reserve", False, 3),
])
def test_a_first_commit_above_the_cap_lends_once_the_pass_within_it_is_refused(fresh_aws, task, situation,
                                                                               lent, tries):
    """A process's first commit of a borrowing tier above its cap (no ``_above_cap_last`` hint yet):
    the pass within the cap is refused, and the slot is lent in the same release if no other
    tenant wants one (``HandOff.lend_if``, read then) and the pool has it; otherwise the place
    passes only, with no more release transactions than the refusals it took. Every way, the
    process then remembers the tenant above its cap; counters, busy and the audit exact.

    Before, the first commit of every process always passed the place only: the slot went back to
    the pool, and the handed job by a publish, a receive and a borrowing acquire to another process
    (`make bench-sched`'s `borrow` rows lost 2-4 slot-seconds in their first two seconds)."""
    from leases import waiting
    from tests.leases.test_break_handoff import _cluster_busy
    from tests.leases.test_break_waiting import _new_job

    tenant, other = _tenant("lendfirst"), _tenant("lendfirstother")
    leases = _borrowing_three(tenant)
    [parked] = _parked(tenant, 1)
    if situation == "another tenant has a job queued":
        waiting.admit(_new_job(other), door=False)  # on its way to a slot: it wants one
    elif situation == "pool at its reserve":
        _running(other, 1)
    busy = _cluster_busy()
    with DynamoRecording(fresh_aws) as recording:
        passed = _commit(task, leases[2])
    assert _release_tries(recording, leases[2].job_id) == tries
    assert tenant in FairTask._above_cap_last
    if lent:
        assert passed is not None
        assert passed.job_id == parked and transactions.still_held(passed)
        assert _cluster_busy() == busy
        assert _counters(tenant) == {"in_flight": 3, "queued": 0, "waiting": 0, "occupied": 3}
    else:
        assert passed is None and transactions.read_lease(parked) is None
        assert _cluster_busy() == busy - 1
        assert _counters(tenant) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
    assert audit([tenant, other]).clean
