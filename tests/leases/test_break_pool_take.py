"""Attacks on the slot that goes back to the pool (``FairTask._take_from_pool``, ``HeldWake`` and
``FairTask._take_held``), the batched wake (``waiting._try_wake_batch``), the wake of borrowers
bounded by ``policy.borrow_spare`` and the contended hand-off's batch read
(``transactions._still_waiting``): real moto DynamoDB and SQS, ``FairTask``'s own methods driven as
``_run_leased`` drives them around ``commit_success`` (nothing of the project mocked; faults are
botocore hooks on the transaction client).

Tests whose docstring starts with "Found:" expose a defect of the change and fail on it; the others
held.
"""

from __future__ import annotations

import json
import functools
import time

import pytest
from botocore.exceptions import ClientError

from leases import nodes, sweeper, transactions, waiting
from leases.audit import audit
from leases.errors import JobNotQueued
from leases.models import JobItem, LeaseItem, TenantItem
from leases.tenants import set_cap
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings
from tasks.base import FairTask, HeldWake, PoolRead, Successor, is_duplicate
from tests.integration.test_message_groups import receive_all
from tests.leases.test_break_handoff import (_borrowing_three, _cluster_busy, _counters,
                                             _handoff, _parked, _running)
from tests.leases.test_break_waiting import _new_job, _tenant
from tests.leases.test_pool_take import _node, _queued, _transactions
from tests.support.recording import DynamoRecording
from tests.support.together import together


def _after_commit(task: FairTask, lease: transactions.Lease) -> transactions.Lease | None:
    """``FairTask._run_leased`` from its successor read to what it runs in place next, for a delivery
    that may still run in place: successor read, commit, then ``FairTask._hand_on``. Returns the
    lease the delivery would run in place next, or None."""
    successor = task._successor(lease.tenant_id, lease_to=lease.worker)
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2,
                                hand_off=successor and successor.hand_off)
    next_run = task._hand_on(lease, successor, True)
    return next_run[0] if next_run is not None else None


def _messages(expect: int, timeout_s: float = 5) -> list[dict]:
    """The job messages on the work queue (received and deleted): exactly ``expect`` of them."""
    got = receive_all(get_settings().imposition_queue, expect, timeout_s=timeout_s) if expect else []
    try:
        extra = receive_all(get_settings().imposition_queue, 1, timeout_s=1.5)
    except Exception:  # noqa: BLE001 - wait_for gives up: nothing more on the queue
        extra = []
    assert not extra, f"unexpected message(s) beyond {expect}: {extra}"
    return got


class _Sequenced:
    """botocore hooks on the transaction client: the k-th ``TransactWriteItems`` call gets
    ``plan[k]``: ``"before"`` (answered 500 before it is sent: nothing applied), ``"after"`` (it
    applies, and the answer is a 500), ``"lost"`` (sent, and whatever its answer, a 500 instead) or
    None (as is). ``on_before(k)`` runs before a call is sent
    (while the hooks are paused: it may write to DynamoDB itself)."""

    def __init__(self, plan: list[str | None], on_before=None) -> None:
        self.plan = list(plan)
        self.k = 0
        self.hits: list[str] = []
        self.on_before = on_before
        self.paused = False
        self._current: str | None = None

    @staticmethod
    def _error(where: str) -> ClientError:
        return ClientError({"Error": {"Code": "InternalServerError", "Message": f"injected {where}"},
                            "ResponseMetadata": {"HTTPStatusCode": 500}}, "TransactWriteItems")

    def before_call(self, model, params, **kwargs):
        if self.paused:
            return
        self._current = self.plan[self.k] if self.k < len(self.plan) else None
        k, self.k = self.k, self.k + 1
        if self.on_before is not None:
            self.paused = True
            try:
                self.on_before(k)
            finally:
                self.paused = False
        if self._current == "before":
            self.hits.append("before")
            raise self._error("before apply")

    def after_call(self, http_response, parsed, model, **kwargs):
        if self.paused:
            return
        if self._current == "after" and http_response.status_code == 200:
            self._current = None
            self.hits.append("after")
            raise self._error("after apply")
        if self._current == "lost":  # whatever the answer (applied or refused), it is lost
            self._current = None
            self.hits.append("lost")
            raise self._error("answer lost")

    def __enter__(self):
        self.events = transactions.tx_connection().client.meta.events
        self.events.register("before-call.dynamodb.TransactWriteItems", self.before_call)
        self.events.register("after-call.dynamodb.TransactWriteItems", self.after_call)
        return self

    def __exit__(self, *exc):
        self.events.unregister("before-call.dynamodb.TransactWriteItems", self.before_call)
        self.events.unregister("after-call.dynamodb.TransactWriteItems", self.after_call)


def _retry_later(tenant_id: str, n: int, delay_s: float = 600) -> list[str]:
    """``n`` jobs of ``tenant_id`` that ran once and failed retryably: released for a retry due in
    ``delay_s`` (``FairTask._on_job_error``: its copy is held by SQS that long; ``due_at`` = then)."""
    ids = []
    for lease in _running(tenant_id, n):
        transactions.release_for_retry(lease, error="x", error_code="injected", delay_s=delay_s)
        ids.append(lease.job_id)
    return ids


# -- the take from the pool ---------------------------------------------------------------------------


def test_a_take_from_the_pool_leaves_a_job_whose_retry_is_not_due(fresh_aws, task):
    """Found: the take from the pool runs a job in its retry backoff at once. Tenant b's only queued
    job failed retryably and was released for a retry due in 10 minutes (its copy held by SQS that
    long, ``due_at`` then). A borrowing tier's commit above its cap is refused the lend because b
    "wants a slot" (its ``queued`` counts the backing-off job) and the slot goes back to the pool:
    ``_take_from_pool`` takes b's oldest queued job (the ``by-queued`` index is ordered by
    submission, and neither it nor ``acquire`` looks at ``due_at``) and runs attempt 2 in place,
    ten minutes early. The retry copy, delivered later, is then dropped as a duplicate (or, if the
    in-place run failed again, runs attempt 3 at once: its delay has passed), so a failing job is
    retried back to back, burning its attempt budget against whatever transient fault it hit."""
    releaser, other = _tenant("bo-a"), _tenant("bo-b")
    leases = _borrowing_three(releaser)  # cap 1, burst 3, 3 leases; borrowable 3
    _parked(releaser, 1)
    set_cap(other, 2)
    [backing_off] = _retry_later(other, 1)
    assert _counters(other) == {"in_flight": 0, "queued": 1, "waiting": 0, "occupied": 1}

    taken = _after_commit(task, leases[2])

    job = JobItem.get(backing_off, consistent_read=True)
    assert taken is None or taken.job_id != backing_off, (
        f"the take from the pool ran job {backing_off} (attempt {job.attempts}) "
        f"{float(job.started_at) - time.time() + 600:.0f} s before its retry was due")
    assert (job.status, int(job.attempts)) == ("queued", 1)
    assert audit([releaser, other]).clean


def test_a_commit_above_the_cap_takes_another_tenants_queued_job_in_place(fresh_aws, task):
    """Attack (held): the whole path of ``_run_leased`` after a borrowing tier's commit above its
    cap while tenant b has two jobs queued and room: the place passes to the releaser's oldest
    waiting job (published), the slot goes back to the pool and is taken for b's oldest queued job
    (b's lease for this worker; no message for it). b's own message, delivered later, is a
    duplicate. Counters, the cluster's busy and the audit exact; one message on the queue."""
    releaser, other = _tenant("tp-a"), _tenant("tp-b")
    leases = _borrowing_three(releaser)
    [handed] = _parked(releaser, 1)
    set_cap(other, 2)
    queued = _queued(other, 2)
    busy = _cluster_busy()

    taken = _after_commit(task, leases[2])

    assert taken is not None and (taken.job_id, taken.tenant_id, taken.worker) == (queued[0], other, "w")
    assert transactions.still_held(taken)
    assert _cluster_busy() == busy  # the release's −1, the take's +1
    assert _counters(releaser) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
    assert _counters(other) == {"in_flight": 1, "queued": 1, "waiting": 0, "occupied": 2}
    [message] = _messages(1)
    assert message["kwargs"] == {"tenant_id": releaser, "job_id": handed}
    with pytest.raises(JobNotQueued) as delivered:  # b's own message for the taken job
        transactions.acquire(queued[0], other, "w/2")
    assert is_duplicate(delivered.value, after_attempt=0)
    assert audit([releaser, other]).clean


def test_concurrent_takes_from_the_pool_keep_the_claimants_cap(fresh_aws, task):
    """Attack (held): six releasers read at once that tenant b (cap 2, one lease, four jobs
    queued) wants a slot, then all take from the pool at once: b has room for one, so exactly one
    take applies; the others are refused and change nothing (b's messages bring the rest)."""
    releaser, other = _tenant("tc-a"), _tenant("tc-b")
    set_cap(other, 2)
    _running(other, 1)
    queued = _queued(other, 4)
    pools = []
    for _ in range(6):
        pool = PoolRead()
        assert task._none_other_wants_slot(releaser, pool) is False
        pools.append(pool)
    results = together([functools.partial(task._take_from_pool, pool, f"w/{i}") for i, pool in enumerate(pools)],
                       timeout_s=60)
    taken = [lease for lease in results if lease is not None]
    assert [lease.job_id for lease in taken] == [queued[0]]
    assert _counters(other) == {"in_flight": 2, "queued": 3, "waiting": 0, "occupied": 5}
    assert audit([other]).clean


# -- the job a release's own wake brought, held back --------------------------------------------------


class _DenyAcquire:
    """Answer the next TransactWriteItems that holds a lease ``Put`` with ``AccessDeniedException``
    (an error that says nothing about the job: an acquire that fails outright)."""

    def __init__(self) -> None:
        self.hits = 0

    def before_call(self, model, params, **kwargs):
        body = json.loads(params.get("body") or b"{}")
        if self.hits == 0 and any("Put" in item for item in body.get("TransactItems", ())):
            self.hits += 1
            raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "injected"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, "TransactWriteItems")

    def __enter__(self):
        self.events = transactions.tx_connection().client.meta.events
        self.events.register("before-call.dynamodb.TransactWriteItems", self.before_call)
        return self

    def __exit__(self, *exc):
        self.events.unregister("before-call.dynamodb.TransactWriteItems", self.before_call)


def test_a_held_job_whose_take_fails_outright_is_published(fresh_aws, task):
    """Attack (held): a commit that frees its slot (none waited to be handed it: the successor read
    failed, so the release frees the place) wakes the tenant's next job through a ``HeldWake``; the
    take of that job in place fails with an error DynamoDB gives for no condition
    (AccessDenied): the job must not be left queued without a message: it is published, once."""
    tenant = _tenant("held-deny")
    set_cap(tenant, 1)
    [lease] = _running(tenant, 1)
    [job] = _parked(tenant, 1)
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2)  # no hand-off: place freed
    held = HeldWake()
    task._hand_off(tenant, None, held)
    assert held.job == (tenant, job)
    with _DenyAcquire() as deny:
        assert task._take_held(held.job, "w/1") is None
    assert deny.hits == 1
    [message] = _messages(1)
    assert message["kwargs"] == {"tenant_id": tenant, "job_id": job}
    assert JobItem.get(job, consistent_read=True).status == "queued"
    assert _counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 0, "occupied": 1}
    assert audit([tenant]).clean


def test_a_held_borrower_is_taken_in_place_with_a_borrowing_acquire(fresh_aws, task):
    """Attack (held): a plain tier's commit (nobody waiting) frees its slot; the borrowers' wake
    brings borrowing tier b's job and holds it back (no pool read: no lend could apply), so the held
    job is taken in place with a borrowing acquire: one lease above b's cap, within its burst cap
    and the pool's; nothing published, busy unchanged."""
    releaser, borrower = _tenant("hb-a"), _tenant("hb-b")
    set_cap(borrower, 1, burst_cap=3)
    _running(borrower, 1)
    [parked] = _parked(borrower, 1)  # no node yet: nothing to borrow, parked
    _node(2)
    set_cap(releaser, 1)
    [lease] = _running(releaser, 1)  # busy 2 = borrowable: the pool is at its reserve
    busy = _cluster_busy()

    taken = _after_commit(task, lease)

    assert taken is not None and (taken.job_id, taken.tenant_id) == (parked, borrower)
    assert _cluster_busy() == busy
    assert _counters(borrower) == {"in_flight": 2, "queued": 0, "waiting": 0, "occupied": 2}
    _messages(0)
    assert audit([releaser, borrower]).clean


# -- the wake of borrowers, bounded by borrow_spare -----------------------------------------------------


def test_jobs_in_retry_backoff_do_not_keep_idle_slots_from_the_borrowers(fresh_aws):
    """Found: ``borrow_spare`` counts every queued job as "on its way to a slot", a job in its retry
    backoff too (``queued``, due in up to ``retry_backoff_max_s`` = 900 s). Tenant c has two jobs
    backing off for 10 minutes; a borrowing tier waits with two slots above the reserve idle:
    ``borrowable 3 − busy 1 − Σ queued 2 = 0``, so every release's wake of borrowers wakes nobody,
    for the whole backoff; only the sweeper (every ``sweep_interval_s``, 60 s by default) wakes the
    borrower. Before the change one job per borrowing tier was woken."""
    borrower, retrying = _tenant("bs-a"), _tenant("bs-c")
    set_cap(borrower, 1, burst_cap=3)
    _running(borrower, 1)
    parked = _parked(borrower, 2)  # no node yet: nothing to borrow, parked at the door
    _node(3)
    set_cap(retrying, 2)
    _retry_later(retrying, 2)
    assert _cluster_busy() == 1  # two slots above the reserve idle, nobody due to take them for 600 s

    woken = waiting.wake_borrowers(publish=lambda t, j: None)

    assert woken == parked[:1], (
        f"wake of borrowers woke {woken} with 2 slots idle above the reserve: "
        f"counters {_counters(retrying)} of the tenant backing off count as claims")
    assert audit([borrower, retrying]).clean


def test_wake_of_borrowers_from_a_stale_pending_read_keeps_the_burst_cap_and_counters(fresh_aws):
    """Attack (held): the borrowers' wake reads the slot counter once and hands it to each
    ``wake(cluster=…)``; meanwhile another releaser's wake fills the tier to its burst cap. The
    wake's condition (``has_place``) refuses: nothing over the burst cap, counters exact."""
    borrower = _tenant("bstale")
    set_cap(borrower, 1, burst_cap=2)
    _running(borrower, 1)
    parked = _parked(borrower, 3)
    _node(5)
    cluster = transactions.cluster_state(nodes.slots())
    assert waiting.wake(borrower, publish=lambda t, j: None, reason="borrow", limit=1) == parked[:1]
    assert waiting.wake(borrower, publish=lambda t, j: None, reason="borrow", limit=1, cluster=cluster) == []
    assert _counters(borrower) == {"in_flight": 1, "queued": 1, "waiting": 2, "occupied": 2}
    assert audit([borrower]).clean


# -- the batched wake ------------------------------------------------------------------------------------


def test_a_cap_raise_wakes_every_job_it_has_room_for_beyond_one_transaction(fresh_aws):
    """Found (low): ``wake`` wakes at most ``TRANSACT_WRITE_MAX_ITEMS − 1`` = 99 jobs: with room for
    more, the batch of the oldest 99 applies and ``wake`` returns at once, although the docstring
    (and the code before the change) wakes "while it has room". 101 jobs parked under cap 0, the
    cap raised to 101: two are left waiting with room, until the next release or sweep."""
    tenant = _tenant("batch-big")
    set_cap(tenant, 0)
    parked = _parked(tenant, 101)
    set_cap(tenant, 101)
    woken = waiting.wake(tenant, publish=lambda t, j: None, reason="cap_change")
    assert len(woken) == 101, f"{len(woken)} woken with room for 101; counters {_counters(tenant)}"
    assert woken == parked
    assert _counters(tenant) == {"in_flight": 0, "queued": 101, "waiting": 0, "occupied": 101}
    assert audit([tenant]).clean


@pytest.mark.parametrize("plan", [
    ["after"],
    ["before", "after"],
    ["before", "before", "after"],
], ids=lambda p: "-".join(p))
def test_a_batched_wake_answered_500_learns_it_applied(fresh_aws, plan):
    """Attack (held): the batch's transaction is answered 500 before it is sent (nothing applied:
    tried again) and/or after it applied: the wake reads its first job back and learns that the
    batch applied, once: the three oldest woken and published once each, nothing woken twice,
    counters exact."""
    tenant = _tenant("batch-amb")
    set_cap(tenant, 0)
    parked = _parked(tenant, 4)
    set_cap(tenant, 3)
    published: list[str] = []
    with _Sequenced(plan) as faults:
        woken = waiting.wake(tenant, publish=lambda t, j: published.append(j), reason="cap_change")
    assert faults.hits == plan
    assert woken == published == parked[:3]
    assert _counters(tenant) == {"in_flight": 0, "queued": 3, "waiting": 1, "occupied": 3}
    assert [JobItem.get(j, consistent_read=True).status for j in parked] == ["queued"] * 3 + ["waiting"]
    assert audit([tenant]).clean


@pytest.mark.parametrize("where", ["before", "lost"])
def test_a_batched_wake_answered_500_while_its_oldest_job_was_woken_elsewhere(fresh_aws, where):
    """Attack (held): between the wake's read and its batch, another releaser wakes the oldest
    job; the batch is then answered 500 (``before``: never sent; ``lost``: sent and refused by its
    conditions, the 500 only hides the answer). Read back, the first job is not waiting and not
    this wake's: the wake goes one at a time and wakes the next two, within the cap (3)."""
    tenant = _tenant("batch-race")
    set_cap(tenant, 0)
    parked = _parked(tenant, 4)
    set_cap(tenant, 3)

    def concurrent(k: int) -> None:
        if k == 0:
            assert waiting._try_wake(parked[0], tenant, time.time() - 1, "release") == "woken"

    published: list[str] = []
    with _Sequenced([where], on_before=concurrent) as faults:
        woken = waiting.wake(tenant, publish=lambda t, j: published.append(j), reason="cap_change")
    assert faults.hits[:1] == [where]
    assert woken == published == parked[1:3]
    assert _counters(tenant) == {"in_flight": 0, "queued": 3, "waiting": 1, "occupied": 3}
    assert audit([tenant]).clean


def test_a_batched_wake_of_a_borrowing_tier_holds_the_burst_cap(fresh_aws):
    """Attack (held): a borrowing tier (cap 1, burst 3) with one lease and four jobs parked; four
    slots above the reserve: the room is min(burst 3 − occupied 1, spare 4) = 2, woken in one
    transaction; occupied reaches the burst cap, not beyond."""
    tenant = _tenant("batch-burst")
    set_cap(tenant, 1, burst_cap=3)
    _running(tenant, 1)
    parked = _parked(tenant, 4)  # no node: parked
    _node(5)
    with DynamoRecording(fresh_aws) as recording:
        woken = waiting.wake(tenant, publish=lambda t, j: None, reason="borrow")
    assert woken == parked[:2]
    assert _transactions(recording) == [3]
    assert _counters(tenant) == {"in_flight": 1, "queued": 2, "waiting": 2, "occupied": 3}
    assert audit([tenant]).clean


# -- contended hand-offs: the batch read of the candidates still waiting -------------------------------


def test_a_contended_hand_off_answered_500_after_it_applied_reports_the_job_it_handed(fresh_aws):
    """Attack (held): two releases read the same line; the second's first try is refused (its
    candidate went to the first release), the batch read skips it, and the try that hands the
    place to the next job applies but is answered 500: the release learns that it applied and which
    job it handed (the one of the try that applied, not the first candidate); counters exact."""
    tenant = _tenant("contend-amb")
    set_cap(tenant, 2)
    first_lease, second_lease = _running(tenant, 2)
    parked = _parked(tenant, 3)
    stale_first, stale_second = _handoff(tenant), _handoff(tenant)
    transactions.commit_success(first_lease, output_key="k", sheets=1, sides=2, hand_off=stale_first)
    assert stale_first.job_id == parked[0]
    with _Sequenced([None, "after"]) as faults:
        transactions.commit_success(second_lease, output_key="k", sheets=1, sides=2, hand_off=stale_second)
    assert faults.hits == ["after"]
    assert stale_second.job_id == parked[1]
    assert [JobItem.get(j, consistent_read=True).status for j in parked] == ["queued", "queued", "waiting"]
    assert _counters(tenant) == {"in_flight": 0, "queued": 2, "waiting": 1, "occupied": 2}
    assert audit([tenant]).clean


# -- the claim passed in the commit (HandOff.claim) ----------------------------------------------------


def _yielding_chain(task: FairTask, rich: str, poor: str) -> tuple[transactions.Lease, Successor]:
    """``rich`` at its cap of 4, six jobs parked; ``poor`` (no lease) one job queued: the rich
    tenant's first commit yields its slot to it (``HandOff.claim``). Returns that lease and its
    successor read."""
    set_cap(rich, 4)
    leases = _running(rich, 4)
    _parked(rich, 6)
    waiting.admit(_new_job(poor), door=False)
    successor = task._successor(rich, lease_to=leases[0].worker)
    assert successor is not None and successor.hand_off.claim is not None
    return leases[0], successor


@pytest.mark.parametrize("refusal", ["retry not due", "claimant frozen", "claimant at its cap"])
def test_a_claim_refused_in_the_commit_passes_the_slot_in_place_in_the_next_try(fresh_aws, task, refusal):
    """Held. The commit would pass its slot to another tenant's job, but between the read and the
    commit that job (or its tenant) stopped being claimable: its retry is not due, its tenant is
    frozen by a counter repair, or its tenant is at its cap. The claim's conditions refuse the
    first try; the second passes the slot to the releasing tenant's own next job, in place. Two
    release transactions, nothing of the claimant's changed, busy unchanged, audit clean."""
    rich, poor = _tenant("clr-rich"), _tenant("clr-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    if refusal == "retry not due":
        [later] = _retry_later(poor, 1)
        successor.hand_off.claim = transactions.Claim(later, poor)
    elif refusal == "claimant frozen":
        TenantItem(poor).update(actions=[TenantItem.repair_until.set(time.time() + 600)])
    else:
        set_cap(poor, 0)
    before, busy = _counters(poor), _cluster_busy()
    with DynamoRecording(fresh_aws) as recording:
        transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=successor.hand_off)
        next_run = task._hand_on(lease, successor, True)
    assert len(recording.calls("TransactWriteItems")) == 2
    assert successor.hand_off.claimed is None and successor.hand_off.lease is not None
    assert next_run is not None and next_run[0] == successor.hand_off.lease and next_run[0].tenant_id == rich
    assert _counters(poor) == before and _cluster_busy() == busy
    assert _counters(rich) == {"in_flight": 4, "queued": 0, "waiting": 5, "occupied": 4}
    assert audit([rich, poor]).clean


@pytest.mark.parametrize("plan", [["before"], ["after"], ["lost"]])
def test_a_claiming_commit_answered_500_learns_whether_it_passed_the_slot(fresh_aws, task, plan):
    """Held. The commit that passes its slot to another tenant's job is answered 500: before it was
    sent (nothing applied: tried again, it applies), after it applied, or with its answer lost. The
    release reads back which of its tries applied and reports the claimed lease of that try, which
    is the lease in DynamoDB; the child runs that job next. Counters and busy exact."""
    rich, poor = _tenant("cla-rich"), _tenant("cla-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    claim, busy = successor.hand_off.claim, _cluster_busy()
    with _Sequenced(plan) as faults:
        transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=successor.hand_off)
    assert faults.hits == plan
    claimed = successor.hand_off.claimed
    assert claimed is not None and claimed.job_id == claim.job_id
    held = transactions.read_lease(claim.job_id)
    assert held is not None and (held.token, held.tenant_id, held.worker) == (claimed.token, poor, lease.worker)
    next_run = task._hand_on(lease, successor, True)
    assert next_run is not None and next_run[0] == claimed
    assert _counters(poor) == {"in_flight": 1, "queued": 0, "waiting": 0, "occupied": 1}
    assert _counters(rich) == {"in_flight": 3, "queued": 1, "waiting": 5, "occupied": 4}
    assert _cluster_busy() == busy
    assert audit([rich, poor]).clean


def test_a_claim_of_the_releasing_tenant_itself_is_refused_before_anything_is_sent(fresh_aws, task):
    """A claim passes a slot across tenants: one naming the releasing tenant is a caller's error
    (``ValueError``), raised before any transaction, and the lease stays."""
    rich, poor = _tenant("cls-rich"), _tenant("cls-poor")
    lease, successor = _yielding_chain(task, rich, poor)
    [own] = _parked(rich, 1)
    successor.hand_off.claim = transactions.Claim(own, rich)
    with pytest.raises(ValueError, match=rich):
        transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=successor.hand_off)
    assert transactions.still_held(lease)


# -- an ambiguous take ----------------------------------------------------------------------------------


class _FailLeaseRead:
    """Answer the next ``n`` GetItem calls on the lease table 500 (before they are sent): the
    acquire's read-back after an ambiguous answer fails too (``AcquireUnresolved``)."""

    def __init__(self, n: int = 1) -> None:
        self.left = n
        self.hits = 0

    def before_call(self, model, params, **kwargs):
        body = json.loads(params.get("body") or b"{}")
        if self.left > 0 and body.get("TableName") == LeaseItem.Meta.table_name:
            self.left -= 1
            self.hits += 1
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected"},
                               "ResponseMetadata": {"HTTPStatusCode": 500}}, "GetItem")

    def __enter__(self):
        self.events = LeaseItem._get_connection().connection.client.meta.events
        self.events.register("before-call.dynamodb.GetItem", self.before_call)
        return self

    def __exit__(self, *exc):
        self.events.unregister("before-call.dynamodb.GetItem", self.before_call)


def test_an_unresolved_take_from_the_pool_does_not_cost_the_job_an_attempt(fresh_aws, task):
    """Found: a take from the pool whose acquire applied but was answered 500, and whose read-back
    failed too (``AcquireUnresolved``), is dropped on the floor ("left to the sweeper"): the job
    runs under nobody's lease, its own message is then dropped as a duplicate, and once the lease
    expires the sweeper reclaims it as ``holder_vanished``: a charged attempt that never ran. The
    delivery path (``FairTask.__call__``) resolves such an acquire (``_resolve_acquire``: runs the
    lease, or records the attempt ``infra_lost``, uncharged). Here a job with one attempt left is
    failed "out of attempts" without ever having run. ``_take_held`` drops it the same way."""
    releaser, other = _tenant("tu-a"), _tenant("tu-b")
    set_cap(other, 2)
    job = _new_job(other)
    job.max_attempts = 1
    assert waiting.admit(job, door=False) is True
    pool = PoolRead()
    assert task._none_other_wants_slot(releaser, pool) is False

    with _Sequenced(["after"]) as applied, _FailLeaseRead() as unread:
        taken = task._take_from_pool(pool, "w/1")
    assert (applied.hits, unread.hits) == (["after"], 1)

    if taken is None:  # nobody runs the job now: what becomes of it?
        lease = transactions.read_lease(job.job_id)
        if lease is not None:  # the take applied: its lease expires, past the sweeper's grace
            past = time.time() - get_clocks().infra_report_grace_s - 1.0
            LeaseItem(job.job_id).update(actions=[LeaseItem.expires_at.set(past)])
            sweeper.sweep(time.time(), publish=lambda *a, **k: None)
    after = JobItem.get(job.job_id, consistent_read=True)
    assert after.status != "failed", (
        f"job {job.job_id} never ran, and ended failed: {after.error} (attempts {after.attempts}, "
        f"charged {after.charged_attempts}, lost {after.lost_attempts})")
    assert after.charged_attempts == 0 or taken is not None
    assert audit([other]).clean
