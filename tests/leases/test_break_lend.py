"""Attacks on the slot lent above the cap and on the release hints (``HandOff.lend``,
``HandOff.slot_refused``, ``FairTask._above_cap_last``, ``FairTask._none_waited_last``): real moto
DynamoDB, ``FairTask``'s own ``_successor`` / ``_hand_off`` driven as ``_run_leased`` drives them
around ``commit_success`` (nothing of the project mocked).
"""

from __future__ import annotations

import time

import pytest

from leases import transactions, waiting
from leases.audit import audit
from leases.models import JobItem, LeaseItem, TenantItem
from leases.tenants import set_cap
from imposition.common.settings import get_settings
from tasks.base import FairTask
from tests.leases.test_break_handoff import (_AfterApplyFault, _assert_passed, _borrowing_three, _cluster_busy,
                                             _counters, _handoff, _parked, _running)
from tests.leases.test_break_waiting import _new_job, _tenant
from tests.support.recording import DynamoRecording


@pytest.fixture(autouse=True)
def read_at_every_commit(monkeypatch):
    """These attacks count the pending-index queries of each commit: no skip of the fair-share read
    (``fair_share_recheck_s`` 0; ``test_break_fair_share.py`` attacks the skip)."""
    monkeypatch.setenv("IMPOSITION_FAIR_SHARE_RECHECK_S", "0")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


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
    whole-index query per job, for as long as nobody else wants a slot. (Since 2026-12-02 every commit
    that could pass its slot reads the index once, for the fair share: one query, never a second.)"""
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
    # One query: the read every commit that could pass its slot makes (the fair share,
    # policy.yields_slot); none more for a lend.
    assert (tries, queries, tenant in FairTask._above_cap_last) == (1, 1, False), (
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
    ("another tenant with no lease has a job queued", False, 1),
    ("pool at its reserve", False, 3),
])
def test_a_first_commit_above_the_cap_lends_once_the_pass_within_it_is_refused(fresh_aws, task, situation,
                                                                               lent, tries):
    """A process's first commit of a borrowing tier above its cap (no ``_above_cap_last`` hint yet):
    the pass within the cap is refused, and the slot is lent in the same release if no other
    tenant wants one (``HandOff.lend_if``, read then) and the pool has it; otherwise the place
    passes only, with no more release transactions than the refusals it took. Every way but one, the
    process then remembers the tenant above its cap; counters, busy and the audit exact. The one: a
    tenant with no lease (two fewer than the releaser's three) has a job queued, so the slot goes
    to that job in the commit (``policy.yields_slot``, ``HandOff.claim``) and no pass is tried at
    all: one transaction.

    Before, the first commit of every process always passed the place only: the slot went back to
    the pool, and the handed job by a publish, a receive and a borrowing acquire to another process
    (`make bench-sched`'s `borrow` rows lost 2-4 slot-seconds in their first two seconds)."""
    tenant, other = _tenant("lendfirst"), _tenant("lendfirstother")
    leases = _borrowing_three(tenant)
    [parked] = _parked(tenant, 1)
    if situation == "another tenant has a job queued":
        _running(other, 2)  # two leases: one fewer than the releaser's after its commit, no fair-share claim
        waiting.admit(_new_job(other), door=False)  # on its way to a slot: it wants one
    elif situation == "another tenant with no lease has a job queued":
        waiting.admit(_new_job(other), door=False)
    elif situation == "pool at its reserve":
        _running(other, 1)
    busy = _cluster_busy()
    with DynamoRecording(fresh_aws) as recording:
        passed = _commit(task, leases[2])
    assert _release_tries(recording, leases[2].job_id) == tries
    assert (tenant in FairTask._above_cap_last) is (tries > 1)
    if lent:
        assert passed is not None
        assert passed.job_id == parked and transactions.still_held(passed)
        assert _cluster_busy() == busy
        assert _counters(tenant) == {"in_flight": 3, "queued": 0, "waiting": 0, "occupied": 3}
    elif situation == "another tenant with no lease has a job queued":  # the slot passed to its job
        assert passed is None and transactions.read_lease(parked) is None
        assert _cluster_busy() == busy
        assert _counters(tenant) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
        assert _counters(other)["in_flight"] == 1
    else:
        assert passed is None and transactions.read_lease(parked) is None
        assert _cluster_busy() == busy - 1
        assert _counters(tenant) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
    assert audit([tenant, other]).clean


# --- a helper's attack on the first commit above the cap (HandOff.lend_if) --------------------------


def _recorded_commit(fresh_aws, task: FairTask, lease: transactions.Lease) -> tuple[transactions.Lease | None, int, int]:
    """``_commit`` with the requests of ``_successor`` and ``commit_success`` recorded (not the
    hand-off's, whose ``wake_borrowers`` queries the pending index too): ``(passed, release
    transactions, pending-index queries)``."""
    with DynamoRecording(fresh_aws) as recording:
        successor = task._successor(lease.tenant_id, lease_to=lease.worker)
        transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=successor and successor[1])
    passed = task._hand_off(lease.tenant_id, successor)
    return passed, _release_tries(recording, lease.job_id), _pending_queries(recording)


def test_a_hinted_commit_reads_whether_others_want_a_slot_once(fresh_aws, task):
    """Attack: ``lend_if`` asked on top of the hint's own read. A borrowing tier (cap 1, burst 3)
    holding 3 leases, 2 jobs waiting; another tenant has a job queued (it wants a slot). The first
    commit is refused within the cap, reads the pending index (``lend_if``), finds the other tenant
    and passes the place only; the process remembers the tenant (``_above_cap_last``). The next
    commit of the tenant reads the index for the hint (``_successor``: others want a slot, no lend).

    Found, and fixed (failed before the fix): ``_successor`` still gives that commit a ``lend_if``
    (``lend_if`` was None only when ``lend`` was True), so after its within-cap pass is refused it
    queries the pending index a second time, milliseconds after the first: 2 whole-index queries
    per commit (moto scans the whole table for each) for every commit above the cap while another
    tenant wants a slot, where the hint alone made 1 before this change. Counters stay exact."""
    tenant, other = _tenant("lfhint"), _tenant("lfhintother")
    leases = _borrowing_three(tenant)
    _parked(tenant, 2)
    _running(other, 2)  # not two leases fewer than the releaser: no fair-share claim on its slot
    waiting.admit(_new_job(other), door=False)  # queued: the other tenant wants a slot
    assert _commit(task, leases[2]) is None  # refused within the cap, not lent: the place passes
    assert tenant in FairTask._above_cap_last
    passed, tries, queries = _recorded_commit(fresh_aws, task, leases[1])
    assert passed is None
    assert _counters(tenant) == {"in_flight": 1, "queued": 2, "waiting": 0, "occupied": 3}
    assert audit([tenant, other]).clean
    assert (tries, queries) == (2, 1), (
        f"a hinted commit above the cap, another tenant wanting a slot: {tries} release transactions, "
        f"{queries} pending-index queries (the second asks again what the hint's read just answered)")


@pytest.mark.parametrize("situation, tries_before", [
    ("a tier without burst cap, its cap lowered", 3),
    ("a borrowing tier frozen by a repair", 2),
])
def test_a_commit_whose_slot_can_never_be_lent_does_not_ask(fresh_aws, task, situation, tries_before):
    """Attack: ``lend_if`` asked whatever refused the pass within the cap. (a) A tier of cap 3
    without a burst cap holding 3 leases, its cap lowered to 1, a job waiting (nobody else wants a
    slot); (b) a borrowing tier (cap 1, burst 3) holding 3 leases, a job waiting, frozen by a
    counter repair. In neither can a lent slot apply: (a) has no burst cap (``LEND_SLOT_TENANT``
    needs one) and ``PASS_ON`` fails too; (b) is frozen, which ``slot_lent_on`` refuses as well.

    Found, and fixed (failed before the fix): the first commit's within-cap refusal always calls
    ``lend_if`` (a whole-index query) and then sends a lend transaction that is certain to be
    cancelled: one query and one release transaction more than before this change ((a) 4 release
    transactions for 3, (b) 3 for 2), on every first commit of a process for such a tenant (and the
    tenant is then remembered in ``_above_cap_last``, whose hinted path repeats the doomed lend).
    The fix: the refused transaction's cancellation returns the tenant's old item
    (``ReturnValuesOnConditionCheckFailure``, as ``acquire`` does), and ``lend_if`` is asked only
    where ``policy.may_lend_slot`` and ``PASS_ON`` hold on it. Counters, busy and the audit stay exact either way."""
    tenant = _tenant("lfnever")
    if situation.startswith("a tier without"):
        set_cap(tenant, 3)
        leases = _running(tenant, 3)
        set_cap(tenant, 1)
    else:
        leases = _borrowing_three(tenant)
    [parked] = _parked(tenant, 1)
    if situation.endswith("repair"):
        TenantItem(tenant).update(actions=[TenantItem.repair_until.set(time.time() + 60)])
    busy = _cluster_busy()
    passed, tries, queries = _recorded_commit(fresh_aws, task, leases[2])
    assert passed is None and _cluster_busy() == busy - 1
    if situation.startswith("a tier without"):  # the cap lowered: the place is freed, the job still waits
        assert JobItem.get(parked, consistent_read=True).status == "waiting"
        assert _counters(tenant) == {"in_flight": 2, "queued": 0, "waiting": 1, "occupied": 2}
    else:  # frozen: the place passes, not the slot
        assert JobItem.get(parked, consistent_read=True).status == "queued"
        assert _counters(tenant) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
    assert audit([tenant]).clean
    # One query: the fair-share read of every commit that could pass its slot; ``lend_if`` answers
    # from it, so a refusal asks no more.
    assert (tries, queries) == (tries_before, 1), (
        f"{situation}: {tries} release transactions and {queries} pending-index queries for a slot "
        f"that no lend could take")


@pytest.mark.parametrize("faults", [1, 2])
def test_ambiguous_lend_after_a_refused_pass_within_the_cap(fresh_aws, task, faults):
    """Attack (held): a process's first commit above the cap (no hint), nobody else wanting a slot:
    the pass within the cap is refused, ``lend_if`` says lend, and the lend applies but its answer
    (and a resend's) is a 5xx. The caller must learn that the slot passed as a lent one
    (``lease``, ``lent``) and that the within-cap pass was refused (``slot_refused``), exactly once;
    ``lend_if`` asked once; busy and counters exact."""
    tenant = _tenant("lfamb")
    leases = _borrowing_three(tenant)
    [parked] = _parked(tenant, 1)
    busy = _cluster_busy()
    asked = []
    hand_off = _handoff(tenant, lease_to="w")
    hand_off.lend_if = lambda: asked.append(1) or task._none_other_wants_slot(tenant)
    with _AfterApplyFault(faults) as fault:
        transactions.commit_success(leases[2], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert fault.hits >= 1 and len(asked) == 1
    _assert_passed(hand_off, parked, "w")
    assert (hand_off.lent, hand_off.slot_refused) == (True, True)
    assert _cluster_busy() == busy
    assert _counters(tenant) == {"in_flight": 3, "queued": 0, "waiting": 0, "occupied": 3}
    assert audit([tenant]).clean


def test_a_lend_if_that_raises_passes_the_place_only(fresh_aws):
    """Attack: ``HandOff.lend_if`` raising (the conformance test's ``lambda: not
    waiting.others_want_slot(...)`` does on a failed query; FairTask's own catches ``Exception``).

    Found, and fixed (failed before the fix; low severity, FairTask's callable never raises): the call
    happens inside ``fenced_release``'s retry chain after the within-cap try was refused, so the
    exception escapes ``commit_success`` with nothing applied: the finished job is not committed, its
    lease stays until the sweeper reclaims it and the job runs again, although the release could
    have passed the place only, as a ``lend_if`` answering False does. A raising ``lend_if`` should
    count as "no" (or the contract say it must never raise)."""
    tenant = _tenant("lfraise")
    leases = _borrowing_three(tenant)
    [parked] = _parked(tenant, 1)
    hand_off = _handoff(tenant, lease_to="w")

    def lend_if() -> bool:
        raise RuntimeError("the pending index could not be read")

    hand_off.lend_if = lend_if
    try:
        transactions.commit_success(leases[2], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    except RuntimeError as exc:
        pytest.fail(f"the commit raised from lend_if, nothing written (lease still held: "
                    f"{transactions.still_held(leases[2])}): {exc}")
    assert hand_off.job_id == parked and hand_off.lease is None
    assert _counters(tenant) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}


def test_a_tenant_back_within_its_cap_leaves_the_lending_mode_at_its_next_commit(fresh_aws, task):
    """Attack: ``HandOff.lent`` True for a slot that was within the cap. A borrowing tier (cap 1,
    burst 3) holding 3 leases, 3 jobs waiting: its first commit is refused within the cap and lends
    (``lend_if``), so the process remembers the tenant (``_above_cap_last``). Its borrowed leases
    then end on other workers (no hand-off): 1 lease, within the cap; the pool has room, the tier
    still borrows, nobody else wants a slot. This process's next commit of the tenant tries the lend
    first (the hint), and the lend applies although the pass within the cap would have: ``lent``
    True, so ``_hand_off`` keeps the tenant in ``_above_cap_last``, and so does every later commit.

    Found, and fixed (failed before the fix; the hinted lend-first predates the ``lend_if`` change, but
    ``HandOff.lent``'s "what applied" does not say whether the slot was above the cap): a tenant
    back within its cap stays in lending mode, each of its commits in this process making a
    whole-index pending query (``_successor``) that a pass within the cap never needs, for as long as
    nobody else wants a slot. The fix: a lend is conditional on the tenant being above its cap too
    (``in_flight > cap``, the negation of ``PASS_SLOT``; ``policy.may_lend_slot``), so that a tenant
    back within it is refused the lend once, passes within the cap (``lent`` False) and leaves the mode."""
    tenant = _tenant("lfwithin")
    leases = _borrowing_three(tenant)
    _parked(tenant, 3)
    lent = _commit(task, leases[2])
    assert lent is not None and tenant in FairTask._above_cap_last
    for other_worker in (leases[1], lent):  # other workers' commits, no hand-off
        transactions.commit_success(other_worker, output_key="k", sheets=1, sides=2)
    assert _counters(tenant)["in_flight"] == 1  # within the cap of 1
    passed = _commit(task, leases[0])
    assert passed is not None  # the slot passed (lent or within the cap: the same writes)
    assert _counters(tenant) == {"in_flight": 1, "queued": 0, "waiting": 1, "occupied": 1}
    passed_again, tries, queries = _recorded_commit(fresh_aws, task, passed)
    assert passed_again is not None
    assert audit([tenant]).clean
    assert (queries, tenant in FairTask._above_cap_last) == (1, False), (  # the fair-share read only
        f"a tenant within its cap: {queries} pending-index queries per commit, still in lending mode: "
        f"{tenant in FairTask._above_cap_last}")
