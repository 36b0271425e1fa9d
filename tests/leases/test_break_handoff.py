"""Attacks on the release hand-off (``fenced_release`` with ``HandOff``): real moto DynamoDB.

Simulated workers are threads that follow ``FairTask``'s release protocol (``_successor``: read the
tenant's oldest waiting jobs; commit/fail with the ``HandOff``; publish the handed job or else
wake; then ``wake_borrowers``), sharing an in-memory queue instead of SQS, so the races are between
real DynamoDB transactions. Alongside: cap changes, operator cancels, ambiguous failures.
"""

from __future__ import annotations

import collections
import random
import threading
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from pynamodb.exceptions import UpdateError

from leases import lifecycle, nodes, sweeper, transactions, waiting
from leases.audit import audit
from leases.errors import CapReached, JobNotQueued, LeaseContention, LeaseLost, WrongJobStatus
from leases.models import JobItem, JobStatus, LeaseItem, TenantItem
from leases.tenants import set_cap
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings
from tests.leases.test_break_waiting import SimCluster, _assert_clean, _new_job, _tenant, _wait_final

pytestmark = pytest.mark.file_duration_s(90)  # the long files run first (tests/conftest.py)


def _counters(tenant_id: str) -> dict[str, int]:
    item = TenantItem.get(tenant_id, consistent_read=True)
    return {k: int(getattr(item, k) or 0) for k in ("in_flight", "queued", "waiting", "occupied")}


def _handoff(tenant_id: str, lease_to: str | None = None) -> transactions.HandOff:
    """``FairTask._successor``'s read (``lease_to``: pass the slot too, as a run in place does)."""
    jobs = waiting.oldest_waiting(tenant_id, get_settings().handoff_scan_limit)
    return transactions.HandOff([j.job_id for j in jobs], time.time(), lease_to=lease_to,
                                parked_at={j.job_id: float(j.parked_at) for j in jobs})


class HandOffSim(SimCluster):
    """SimCluster whose commits and failures hand their place on as ``FairTask`` does, and which
    counts acquires and final commits per job; with ``in_place``, a commit passes its slot too and
    the worker runs the passed lease itself, as ``FairTask._run_in_place`` does."""

    def __init__(self, *a, in_place: bool = False, **kw) -> None:
        super().__init__(*a, **kw)
        self.in_place = in_place
        self.passed: list[str] = []
        self.acquires: collections.Counter = collections.Counter()
        self.finals: collections.Counter = collections.Counter()
        self.handed: list[str] = []
        self.running_jobs: set[str] = set()
        self.twice: list[str] = []
        self.unreachable: list[str] = []  # releases that outlasted their retries (left to the sweeper)

    def _acquire(self, job_id: str, after_attempt: int):
        tid = self.tenant_id
        try:
            return transactions.acquire(job_id, tid, "w")
        except JobNotQueued as exc:
            from tasks.base import is_duplicate
            if not is_duplicate(exc, after_attempt):
                time.sleep(0.05)
                self.q.put((job_id, after_attempt))
            return None
        except CapReached as exc:
            for _ in range(5):
                try:
                    if exc.may_borrow:
                        try:
                            return transactions.acquire(job_id, tid, "w", borrow=True)
                        except CapReached as refused:
                            exc = refused
                    if waiting.park(job_id, tid):
                        return None
                    return transactions.acquire(job_id, tid, "w")
                except CapReached as again:
                    exc = again
                except JobNotQueued:
                    return None
            self.q.put((job_id, after_attempt))
            return None
        except LeaseContention:
            self.q.put((job_id, after_attempt))
            return None

    def _run_one(self, job_id: str, after_attempt: int) -> None:
        lease = self._acquire(job_id, after_attempt)
        while lease is not None:
            lease = self._run_lease(lease)

    def _run_lease(self, lease: transactions.Lease) -> transactions.Lease | None:
        """Run one lease to its release; returns the lease its commit passed on (in place), if any."""
        tid, job_id = self.tenant_id, lease.job_id
        with self.lock:
            self.acquires[job_id] += 1
            if job_id in self.running_jobs:
                self.twice.append(job_id)
            self.running_jobs.add(job_id)
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(random.uniform(0.0, 0.04))
        with self.lock:
            self.running -= 1
            self.running_jobs.discard(job_id)
        job = transactions.read_job(job_id)
        r = random.random()
        hand_off = None
        try:
            if r < 0.15 and int(job.attempts) < int(job.max_attempts):
                self.publish(tid, job_id, after_attempt=int(job.attempts))
                transactions.release_for_retry(lease, error="x", error_code="injected")
            else:
                hand_off = _handoff(tid, lease_to="w" if self.in_place and r >= 0.3 else None)
                if r < 0.3:
                    transactions.fail_job(lease, error="x", error_code="injected", hand_off=hand_off)
                else:
                    transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
                with self.lock:
                    self.finals[job_id] += 1
        except LeaseLost:
            return None
        except LeaseContention as exc:
            self._unreachable(lease, int(job.attempts), exc)
            return None
        if hand_off is not None and hand_off.lease is not None:
            with self.lock:
                self.handed.append(hand_off.job_id)
                self.passed.append(hand_off.job_id)
            return hand_off.lease
        if hand_off is not None and hand_off.job_id is not None:
            self.handed.append(hand_off.job_id)
            self.publish(tid, hand_off.job_id)
        elif hand_off is None or not hand_off.none_waited:  # a release that found none waiting needs no wake
            waiting.wake(tid, publish=self.publish)
        waiting.wake_borrowers(publish=self.publish)
        return None


    def _unreachable(self, lease: transactions.Lease, attempt: int, exc: LeaseContention) -> None:
        """``FairTask._on_release_unreachable``: the release outlasted its retries (it did not apply),
        so the attempt is reported ``infra_lost`` and the lease left to the sweeper. The lease is
        then expired on the spot, past the sweeper's grace (its TTL passing), so the sweeper thread
        reclaims it now instead of in ``lease_ttl_s``."""
        with self.lock:
            self.unreachable.append(f"{lease.job_id}: {exc}")
        transactions.record_infra_lost(lease.job_id, attempt, detail=str(exc))
        past = time.time() - get_clocks().infra_report_grace_s - 1.0
        try:
            LeaseItem(lease.job_id).update(actions=[LeaseItem.expires_at.set(past)],
                                           condition=LeaseItem.token == lease.token)
        except UpdateError as gone:
            if transactions.error_code(gone) != "ConditionalCheckFailedException":
                raise

    def _sweeper(self):
        """The sweeper's whole pass (expired leases, then ``bring_back``), as Celery beat runs it."""
        while not self.stop.is_set():
            try:
                sweeper.sweep(time.time(), publish=self.publish)
            except LeaseContention:
                pass  # the sweep stops; the next one picks up where it left off
            except BaseException as exc:  # noqa: BLE001 - a thread's error is collected and asserted on
                self.errors.append(exc)
            time.sleep(random.uniform(0.05, 0.3))


def _submit(sim: SimCluster, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        job = _new_job(sim.tenant_id)
        if waiting.admit(job):
            sim.publish(sim.tenant_id, job.job_id)
        else:
            waiting.wake(sim.tenant_id, publish=sim.publish, reason="door")
        ids.append(job.job_id)
    return ids


def _over_cap(tenant_id: str) -> list[str]:
    return [d.detail for d in audit([tenant_id]).drifts if d.kind == "over_cap"]


def _assert_ran_once(sim: HandOffSim, statuses: dict[str, str]) -> None:
    final_twice = {j: n for j, n in sim.finals.items() if n > 1}
    assert not final_twice and not sim.twice, (final_twice, sim.twice)
    for job in JobItem.batch_get(list(statuses), consistent_read=True):
        assert sim.acquires[job.job_id] == int(job.attempts or 0), (job.job_id, sim.acquires[job.job_id], job.attempts)


def test_handoff_storm_one_tenant_many_releasers(fresh_aws):
    """10 releasers of one tenant (cap 2), 60 jobs, every commit/failure hands its place on."""
    tenant = _tenant("ho")
    set_cap(tenant, 2)
    sim = HandOffSim(tenant, workers=10, sweepers=1)
    sim.start()
    ids = _submit(sim, 60)
    overs = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all(
            JobStatus(j.status).is_final for j in JobItem.batch_get(ids, consistent_read=True)):
        overs += _over_cap(tenant)
        time.sleep(0.5)
    statuses = _wait_final(ids, 150)
    sim.join()
    assert not sim.errors, sim.errors[:3]
    assert not overs, overs[:3]
    assert sim.most <= 2, sim.most
    assert sim.handed, "no release handed its place on: the attack did not exercise the hand-off"
    _assert_ran_once(sim, statuses)
    _assert_clean(tenant, statuses)


@pytest.mark.parametrize("in_place", [False, True], ids=["published", "in_place"])
def test_handoff_storm_with_cap_flapping_and_cancels(fresh_aws, in_place):
    """Hand-off storm while the cap goes 0/1/3/2 and an operator cancels waiting/queued jobs
    (``in_place``: commits pass their slots, as a run in place does)."""
    tenant = _tenant("hoflap")
    set_cap(tenant, 2)
    sim = HandOffSim(tenant, workers=8, sweepers=1, in_place=in_place)
    sim.start()
    ids = _submit(sim, 50)
    cancelled: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def canceller():
        while not stop.is_set():
            try:
                for job in waiting.oldest_waiting(tenant, 3)[:1]:
                    try:
                        lifecycle.cancel(job.job_id)
                        cancelled.append(job.job_id)
                        waiting.wake(tenant, publish=sim.publish, reason="cancel")
                    except (WrongJobStatus, LeaseContention):
                        pass
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
            time.sleep(random.uniform(0.1, 0.4))

    c = threading.Thread(target=canceller, daemon=True)
    c.start()
    overs = []
    for cap in (0, 3, 1, 0, 2, 3, 0, 1, 2):
        set_cap(tenant, cap)
        waiting.wake(tenant, publish=sim.publish, reason="cap_change")
        time.sleep(0.8)
        overs += _over_cap(tenant)
    stop.set()
    c.join(10)
    set_cap(tenant, 2)
    waiting.wake(tenant, publish=sim.publish, reason="cap_change")
    statuses = _wait_final(ids, 150)
    sim.join()
    assert not sim.errors and not errors, (sim.errors[:3], errors[:3])
    assert not overs, overs[:3]
    assert sim.passed or not in_place, "no commit passed its slot: the attack did not exercise it"
    _assert_ran_once(sim, statuses)
    _assert_clean(tenant, statuses)


def _running(tenant_id: str, n: int) -> list[transactions.Lease]:
    leases = []
    for _ in range(n):
        job = _new_job(tenant_id)
        waiting.admit(job, door=False)
        leases.append(transactions.acquire(job.job_id, tenant_id, "w"))
    return leases


def _parked(tenant_id: str, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        job = _new_job(tenant_id)
        assert waiting.admit(job) is False
        ids.append(job.job_id)
    return ids


def test_stale_candidate_list_skips_gone_foreign_and_cancelled_jobs(fresh_aws):
    """A hand-off whose candidates are: a job id that does not exist, another tenant's waiting job,
    a cancelled one, one already woken, then a waiting one: the last gets the place, nothing else
    moves, counters exact."""
    tenant, other = _tenant("stale"), _tenant("other")
    set_cap(tenant, 1)
    set_cap(other, 1)
    [lease] = _running(tenant, 1)
    _running(other, 1)
    cancelled, woken, target = _parked(tenant, 3)
    [foreign] = _parked(other, 1)
    lifecycle.cancel(cancelled)
    set_cap(tenant, 2)
    assert waiting.wake(tenant, publish=lambda *a, **k: None, reason="cap_change") == [woken]
    set_cap(tenant, 1)
    hand_off = transactions.HandOff([uuid.uuid4().hex, foreign, cancelled, woken, target], time.time())
    before = _counters(tenant)
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
    after = _counters(tenant)
    # occupied was 2 (1 lease + 1 woken queued) > cap 1: PASS_ON refuses, the place is freed instead.
    assert hand_off.job_id is None, (hand_off.job_id, before, after)
    assert JobItem.get(foreign, consistent_read=True).status == "waiting"
    assert JobItem.get(target, consistent_read=True).status == "waiting"
    assert after == {"in_flight": 0, "queued": 1, "waiting": 1, "occupied": 1}, after
    assert audit([tenant, other]).clean


def test_stale_candidates_then_the_waiting_one_is_handed(fresh_aws):
    tenant, other = _tenant("stale2"), _tenant("other2")
    set_cap(tenant, 1)
    set_cap(other, 1)
    [lease] = _running(tenant, 1)
    _running(other, 1)
    cancelled, target = _parked(tenant, 2)
    [foreign] = _parked(other, 1)
    lifecycle.cancel(cancelled)
    hand_off = transactions.HandOff([uuid.uuid4().hex, foreign, cancelled, target], time.time())
    transactions.fail_job(lease, error="x", error_code="injected", hand_off=hand_off)
    assert hand_off.job_id == target
    assert JobItem.get(target, consistent_read=True).status == "queued"
    assert JobItem.get(foreign, consistent_read=True).status == "waiting"
    assert JobItem.get(cancelled, consistent_read=True).status == "failed"
    assert _counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 0, "occupied": 1}
    assert audit([tenant, other]).clean


@pytest.mark.parametrize("new_cap, handed", [(0, False), (1, False), (2, True), (5, True)])
def test_cap_changed_between_successor_read_and_release(fresh_aws, new_cap, handed):
    """cap 2, 2 leases, 3 waiting; the cap changes after the successor list was read."""
    tenant = _tenant("capchg")
    set_cap(tenant, 2)
    leases = _running(tenant, 2)
    parked = _parked(tenant, 3)
    hand_off = _handoff(tenant)
    assert hand_off.candidates == parked
    set_cap(tenant, new_cap)
    transactions.commit_success(leases[0], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert (hand_off.job_id is not None) == handed, (new_cap, hand_off.job_id, _counters(tenant))
    if not handed:
        woken = waiting.wake(tenant, publish=lambda *a, **k: None)
        c = _counters(tenant)
        assert c["occupied"] <= max(new_cap, 1), (new_cap, c, woken)  # 1: the lease still running
    c = _counters(tenant)
    assert c["in_flight"] + c["queued"] == c["occupied"], c
    assert audit([tenant]).clean


def _borrowing_three(tenant: str) -> list[transactions.Lease]:
    """A node of 3 slots above the reserve; ``tenant`` a tier of cap 1, burst 3, holding 3 leases
    (the last 2 borrowed)."""
    nodes.register(f"node-{uuid.uuid4().hex[:6]}", 3 + get_settings().reserve_slots)
    set_cap(tenant, 1, burst_cap=3)
    jobs = [_new_job(tenant) for _ in range(3)]
    for job in jobs:
        waiting.admit(job, door=False)
    leases = [transactions.acquire(jobs[0].job_id, tenant, "w")]
    return leases + [transactions.acquire(j.job_id, tenant, "w", borrow=True) for j in jobs[1:]]


def test_borrowing_tier_at_the_reserve_hand_off(fresh_aws):
    """Tier cap 1 burst 3 holding 3 leases (2 borrowed), cluster at its reserve: a commit hands its
    place on; the successor cannot borrow and must park again, counters exact, no lease over 3."""
    tenant, other = _tenant("burst"), _tenant("filler")
    leases = _borrowing_three(tenant)
    parked = _parked(tenant, 2)
    hand_off = _handoff(tenant)
    # another tenant takes the freed slot (no borrow needed) before the successor can acquire
    transactions.commit_success(leases[2], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert hand_off.job_id == parked[0]
    _running(other, 1)
    with pytest.raises(CapReached) as refused:
        transactions.acquire(parked[0], tenant, "w")
    assert refused.value.may_borrow
    with pytest.raises(CapReached):
        transactions.acquire(parked[0], tenant, "w", borrow=True)
    assert waiting.park(parked[0], tenant)
    assert _counters(tenant) == {"in_flight": 2, "queued": 0, "waiting": 2, "occupied": 2}
    assert audit([tenant, other]).clean


class _AfterApplyFault:
    """A botocore ``after-call`` hook on the process's transaction client: the first
    ``n`` TransactWriteItems calls that *applied* are answered as a 500 (the write happened, the
    answer was lost), as DynamoDB's "InternalServerError … may or may not have succeeded"."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.hits = 0

    def __call__(self, http_response, parsed, model, **kwargs):
        if self.left > 0 and http_response.status_code == 200:
            self.left -= 1
            self.hits += 1
            raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected after apply"},
                               "ResponseMetadata": {"HTTPStatusCode": 500}}, "TransactWriteItems")

    def __enter__(self):
        self.events = transactions.tx_connection().client.meta.events
        self.events.register("after-call.dynamodb.TransactWriteItems", self)
        return self

    def __exit__(self, *exc):
        self.events.unregister("after-call.dynamodb.TransactWriteItems", self)


@pytest.mark.parametrize("faults", [1, 2, 3])
def test_ambiguous_release_with_hand_off_after_apply(fresh_aws, faults):
    """The hand-off release applies but its answer is a 5xx (and the resends' too): the caller must
    learn that it applied and which job was handed the place, exactly once."""
    tenant = _tenant("amb")
    set_cap(tenant, 1)
    [lease] = _running(tenant, 1)
    first, second = _parked(tenant, 2)
    hand_off = _handoff(tenant)
    with _AfterApplyFault(faults) as fault:
        transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert fault.hits >= 1
    assert hand_off.job_id == first, hand_off
    assert JobItem.get(first, consistent_read=True).status == "queued"
    assert JobItem.get(second, consistent_read=True).status == "waiting"
    assert _counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 1, "occupied": 1}
    assert audit([tenant]).clean


def test_ambiguous_hand_off_whose_successor_is_cancelled_meanwhile(fresh_aws):
    """The hand-off applies, the answer is lost, and the handed job is cancelled before the
    read-back: the release is still known as applied, the hand-off reported, counters exact."""
    tenant = _tenant("ambc")
    set_cap(tenant, 1)
    [lease] = _running(tenant, 1)
    first, second = _parked(tenant, 2)
    hand_off = _handoff(tenant)

    class CancelThenFault(_AfterApplyFault):
        def __call__(self, http_response, parsed, model, **kwargs):
            if self.left > 0 and http_response.status_code == 200:
                self.left -= 1
                self.hits += 1
                # an operator cancels the handed job between the write and the read-back
                lifecycle.cancel(first)
                raise ClientError({"Error": {"Code": "InternalServerError", "Message": "injected"},
                                   "ResponseMetadata": {"HTTPStatusCode": 500}}, "TransactWriteItems")

    with CancelThenFault(1):
        transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert hand_off.job_id == first
    waiting.wake(tenant, publish=lambda *a, **k: None)
    c = _counters(tenant)
    assert c == {"in_flight": 0, "queued": 1, "waiting": 0, "occupied": 1}, c
    assert audit([tenant]).clean


def _cluster_busy() -> int:
    return int(nodes.slots().busy or 0) if nodes.slots() is not None else 0


def _assert_passed(hand_off: transactions.HandOff, job_id: str, worker: str) -> None:
    """``hand_off`` passed its slot to ``job_id``: running under the returned lease, whose token the
    lease item and the job carry."""
    assert hand_off.job_id == job_id and hand_off.lease is not None, hand_off
    assert (hand_off.lease.job_id, hand_off.lease.worker) == (job_id, worker), hand_off.lease
    assert transactions.still_held(hand_off.lease)
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.attempts, job.lease_token, job.worker) == ("running", 1, hand_off.lease.token, worker)
    assert (job.woken_by, job.waiting_tenant, job.queued_tenant) == ("release", None, None)


def test_a_commit_passes_its_slot_to_the_oldest_waiting_job_in_one_transaction(fresh_aws):
    """cap 2, 2 leases, 2 waiting: a commit with ``lease_to`` leaves the tenant at 2 leases, the
    oldest waiting job running under a lease for that worker, the cluster's busy count unchanged;
    the passed lease then commits like any other and passes on again."""
    tenant = _tenant("pass")
    set_cap(tenant, 2)
    leases = _running(tenant, 2)
    first, second = _parked(tenant, 2)
    busy = _cluster_busy()
    hand_off = _handoff(tenant, lease_to="w2")
    as_read = JobItem.get(first, consistent_read=True)
    transactions.commit_success(leases[0], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    _assert_passed(hand_off, first, "w2")
    # FairTask runs the passed job from its copy as read before the commit, with what the pass wrote
    known = {k: v for k, v in transactions.apply_pass(as_read, hand_off).attribute_values.items() if v is not None}
    assert known == JobItem.get(first, consistent_read=True).attribute_values
    assert _counters(tenant) == {"in_flight": 2, "queued": 0, "waiting": 1, "occupied": 2}
    assert _cluster_busy() == busy
    assert audit([tenant]).clean
    again = _handoff(tenant, lease_to="w2")
    transactions.commit_success(hand_off.lease, output_key="k", sheets=1, sides=2, hand_off=again)
    _assert_passed(again, second, "w2")
    assert _counters(tenant) == {"in_flight": 2, "queued": 0, "waiting": 0, "occupied": 2}
    assert audit([tenant]).clean


def test_a_borrowed_lease_passes_its_place_but_not_its_slot(fresh_aws):
    """Tier cap 1 burst 3 holding 3 leases (2 borrowed): the tenant's leases are over its cap, so a
    commit with ``lease_to`` passes only its place (the successor queued, no lease), as without."""
    tenant = _tenant("passburst")
    leases = _borrowing_three(tenant)
    [parked] = _parked(tenant, 1)
    busy = _cluster_busy()
    hand_off = _handoff(tenant, lease_to="w")
    transactions.commit_success(leases[2], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert (hand_off.job_id, hand_off.lease, hand_off.slot_refused) == (parked, None, True)
    assert JobItem.get(parked, consistent_read=True).status == "queued"
    assert transactions.read_lease(parked) is None
    assert _counters(tenant) == {"in_flight": 2, "queued": 1, "waiting": 0, "occupied": 3}
    assert _cluster_busy() == busy - 1
    assert audit([tenant]).clean


@pytest.mark.parametrize("change, lent, handed", [
    ("none", True, True), ("pool at its reserve", False, True), ("burst cap lowered", False, False)])
def test_a_slot_above_the_cap_is_lent_on_while_the_pool_lends(fresh_aws, change, lent, handed):
    """Tier cap 1 burst 3 holding 3 leases (2 borrowed), the cluster's 3 lendable slots all busy
    with them: a commit with ``lend`` passes its slot as a lent one (the leases stay at 3, the busy
    count unchanged), as a release followed by a borrowing acquire would have it. With the pool down
    to its reserve (another tenant took the reserve slot) it passes only its place; with the burst
    cap lowered below the leases, nothing passes and the place is freed."""
    tenant, other = _tenant("lend"), _tenant("lendother")
    leases = _borrowing_three(tenant)
    [parked] = _parked(tenant, 1)
    if change == "pool at its reserve":
        _running(other, 1)
    elif change == "burst cap lowered":
        set_cap(tenant, 1, burst_cap=2)
    busy = _cluster_busy()
    hand_off = _handoff(tenant, lease_to="w")
    hand_off.lend = True
    transactions.commit_success(leases[2], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    if lent:
        _assert_passed(hand_off, parked, "w")
        assert _counters(tenant) == {"in_flight": 3, "queued": 0, "waiting": 0, "occupied": 3}
        assert _cluster_busy() == busy
    else:
        assert hand_off.lease is None and transactions.read_lease(parked) is None
        assert hand_off.job_id == (parked if handed else None)
        assert JobItem.get(parked, consistent_read=True).status == ("queued" if handed else "waiting")
        assert _cluster_busy() == busy - 1
    assert hand_off.slot_refused is (not lent)
    assert audit([tenant, other]).clean


def test_others_want_slot_reads_the_other_tenants_that_could_use_a_freed_slot(fresh_aws):
    """Queued work of another tenant wants a slot; waiting work wants one only if a wake could
    bring it (room under its cap, or a tier that borrows); the releasing tenant itself never counts."""
    tenant, capped, borrower, queued = (_tenant(n) for n in ("self", "capped", "borrower", "queued"))
    _borrowing_three(tenant)
    _parked(tenant, 1)
    assert waiting.others_want_slot(tenant) is False
    set_cap(capped, 1)
    _running(capped, 1)
    _parked(capped, 1)  # at its cap, no burst: no freed slot of another tenant brings it
    assert waiting.others_want_slot(tenant) is False
    set_cap(borrower, 1, burst_cap=2)
    _running(borrower, 1)
    _parked(borrower, 1)
    assert waiting.others_want_slot(tenant) is True
    set_cap(borrower, 1)  # no longer borrows
    assert waiting.others_want_slot(tenant) is False
    set_cap(queued, 2)
    waiting.admit(_new_job(queued), door=False)
    assert waiting.others_want_slot(tenant) is True


@pytest.mark.parametrize("change, passed, handed", [
    ("cap 2", True, True), ("cap 1", False, False), ("frozen", False, True)])
def test_a_change_between_successor_read_and_commit_decides_what_passes(fresh_aws, change, passed, handed):
    """cap 2, 2 leases, 1 waiting, then: the cap unchanged (the slot passes); lowered to 1 (nothing
    passes: the place is freed); a counter repair freezes the tenant (its place passes, not the slot:
    a frozen tenant takes no lease)."""
    tenant = _tenant("passchg")
    set_cap(tenant, 2)
    leases = _running(tenant, 2)
    [parked] = _parked(tenant, 1)
    hand_off = _handoff(tenant, lease_to="w")
    if change == "cap 1":
        set_cap(tenant, 1)
    elif change == "frozen":
        TenantItem(tenant).update(actions=[TenantItem.repair_until.set(time.time() + 60)])
    transactions.commit_success(leases[0], output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert (hand_off.lease is not None, hand_off.job_id is not None) == (passed, handed), hand_off
    status = JobItem.get(parked, consistent_read=True).status
    assert status == ("running" if passed else "queued" if handed else "waiting"), status
    c = _counters(tenant)
    assert c["in_flight"] + c["queued"] == c["occupied"], c
    assert c["in_flight"] == (2 if passed else 1), c


def test_a_successor_with_a_stray_lease_item_is_skipped_for_the_next(fresh_aws):
    """The first candidate has a lease item already (an orphan the audit removes): passing it a
    lease would overwrite that; the next candidate gets the slot instead."""
    tenant = _tenant("passorphan")
    set_cap(tenant, 1)
    [lease] = _running(tenant, 1)
    first, second = _parked(tenant, 2)
    transactions.new_lease_item(first, tenant, "ghost", "stray-token", time.time()).save()
    hand_off = _handoff(tenant, lease_to="w")
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
    _assert_passed(hand_off, second, "w")
    assert JobItem.get(first, consistent_read=True).status == "waiting"
    stray = transactions.read_lease(first)
    assert stray.token == "stray-token"
    stray.delete()  # the orphan the audit would report (this test's own)
    assert audit([tenant]).clean


def test_a_successor_re_parked_since_it_was_read_is_skipped_for_the_next(fresh_aws):
    """The successor read saw the first candidate's earlier park (a stale index entry on real
    DynamoDB): its copy may be older than the job, so its slot goes to the next candidate."""
    tenant = _tenant("passstale")
    set_cap(tenant, 1)
    [lease] = _running(tenant, 1)
    first, second = _parked(tenant, 2)
    hand_off = _handoff(tenant, lease_to="w")
    hand_off.parked_at[first] -= 5  # as read from an earlier park
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
    _assert_passed(hand_off, second, "w")
    assert JobItem.get(first, consistent_read=True).status == "waiting"
    assert audit([tenant]).clean


def test_a_release_that_found_none_waiting_is_conditional_on_it(fresh_aws):
    """The successor read finds none waiting: the commit applies on condition none waits, so no
    wake has to follow it. A job that parks between the read and the commit makes the commit apply
    without the condition, and ``none_waited`` False tells the caller to wake it."""
    tenant = _tenant("nonewait")
    set_cap(tenant, 1)
    [first] = _running(tenant, 1)
    hand_off = _handoff(tenant)
    assert hand_off.candidates == []
    transactions.commit_success(first, output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert (hand_off.none_waited, hand_off.job_id) == (True, None)
    assert _counters(tenant) == {"in_flight": 0, "queued": 0, "waiting": 0, "occupied": 0}

    [lease] = _running(tenant, 1)
    hand_off = _handoff(tenant)
    [second] = _parked(tenant, 1)  # parks after the read, before the commit
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert (hand_off.none_waited, hand_off.job_id) == (False, None)
    assert _counters(tenant) == {"in_flight": 0, "queued": 0, "waiting": 1, "occupied": 0}
    assert waiting.wake(tenant, publish=lambda *a, **k: None) == [second]
    assert audit([tenant]).clean


@pytest.mark.parametrize("faults", [1, 2, 3])
def test_ambiguous_commit_that_passed_its_slot_after_apply(fresh_aws, faults):
    """The slot-passing commit applies but its answer is a 5xx (and the resends' too): the caller
    learns the lease it took, with the token the lease item carries, exactly once."""
    tenant = _tenant("passamb")
    set_cap(tenant, 1)
    [lease] = _running(tenant, 1)
    first, second = _parked(tenant, 2)
    hand_off = _handoff(tenant, lease_to="w")
    with _AfterApplyFault(faults) as fault:
        transactions.commit_success(lease, output_key="k", sheets=1, sides=2, hand_off=hand_off)
    assert fault.hits >= 1
    _assert_passed(hand_off, first, "w")
    assert JobItem.get(second, consistent_read=True).status == "waiting"
    assert _counters(tenant) == {"in_flight": 1, "queued": 0, "waiting": 1, "occupied": 1}
    assert audit([tenant]).clean


class RoutedSim(HandOffSim):
    """A HandOffSim whose publish routes a message to the sim of the job's tenant (``wake_borrowers``
    wakes other tenants' jobs)."""

    routes: dict = {}

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        RoutedSim.routes[self.tenant_id] = self

    def publish(self, tenant_id, job_id, *, after_attempt=0, delay_s=0):
        RoutedSim.routes[tenant_id].q.put((job_id, after_attempt))


def _borrowing_storm_round() -> int:
    """One round: a borrowing tier (cap 1, burst 4) and a plain tier (cap 3) share 5 borrowable
    slots above the reserve, both handing their places on; the plain tier's jobs come once the
    borrowing tier has borrowed. Asserts the invariants and returns the most leases the borrowing
    tier held at once (its ``in_flight`` counter, as sampled)."""
    borrower, plain = _tenant("borrower"), _tenant("plain")
    set_cap(borrower, 0)  # paused while its jobs are submitted: a backlog, not a trickle it keeps up with
    set_cap(plain, 3)
    sims = [RoutedSim(borrower, workers=5, sweepers=1), RoutedSim(plain, workers=4)]
    for sim in sims:
        sim.start()
    # The borrowing tier first, until it borrows (or 15 s pass), then the plain tier into the storm.
    # Its leases are read from its counter: the sims' own count covers only the jobs' short runs.
    ids = {borrower: _submit(sims[0], 30)}
    set_cap(borrower, 1, burst_cap=4)
    waiting.wake(borrower, publish=sims[0].publish, reason="cap_change")
    most_leases = 0
    deadline = time.monotonic() + 15
    while most_leases <= 1 and time.monotonic() < deadline:
        most_leases = max(most_leases, _counters(borrower)["in_flight"])
        time.sleep(0.05)
    ids[plain] = _submit(sims[1], 30)
    overs = []
    every = ids[borrower] + ids[plain]
    deadline = time.monotonic() + 20
    # Sampled for as long as the storm lasts (up to 20 s): once every job is final, no lease is left to
    # be over a cap, so sampling on would only wait.
    while time.monotonic() < deadline and not all(
            JobStatus(j.status).is_final for j in JobItem.batch_get(every, consistent_read=True)):
        overs += [d.detail for d in audit([borrower, plain]).drifts if d.kind == "over_cap"]
        most_leases = max(most_leases, _counters(borrower)["in_flight"])
        time.sleep(0.5)
    statuses = {t: _wait_final(i, 150) for t, i in ids.items()}
    for sim in sims:
        sim.join()
    assert not any(sim.errors for sim in sims), [sim.errors[:3] for sim in sims]
    assert not overs, overs[:3]
    for sim in sims:
        _assert_ran_once(sim, statuses[sim.tenant_id])
        _assert_clean(sim.tenant_id, statuses[sim.tenant_id])
    assert most_leases <= 4, f"the borrowing tier held {most_leases} leases, above its burst cap 4"
    return most_leases


def test_handoff_storm_borrowing_tier_against_a_plain_tier_at_the_reserve(fresh_aws):
    """No lease over a cap or burst, counters exact, every job ends; repeated (up to three rounds)
    until the borrowing tier did borrow in a round, since whether it gets the chance depends on the
    threads' timing."""
    nodes.register(f"node-{uuid.uuid4().hex[:6]}", 5 + get_settings().reserve_slots)
    most = [_borrowing_storm_round()]
    while most[-1] <= 1 and len(most) < 3:
        most.append(_borrowing_storm_round())
    print(f"\nthe borrowing tier's most leases, per round: {most}")
    assert most[-1] > 1, f"the borrowing tier never borrowed in {len(most)} rounds: the attack did not exercise borrowing"


class _RandomAmbiguity:
    """botocore hooks on the process's transaction client: a share of TransactWriteItems calls is
    answered 500 *after* it applied (``after-call``), another share refused 500 before it is sent
    (``before-call``: nothing applied). Every thread of the test shares the client."""

    def __init__(self, after: float, before: float) -> None:
        self.after, self.before = after, before
        self.hits = collections.Counter()
        self.on = True

    @staticmethod
    def _error(where: str) -> ClientError:
        return ClientError({"Error": {"Code": "InternalServerError", "Message": f"injected {where}"},
                            "ResponseMetadata": {"HTTPStatusCode": 500}}, "TransactWriteItems")

    def after_call(self, http_response, parsed, model, **kwargs):
        if self.on and http_response.status_code == 200 and random.random() < self.after:
            self.hits["after"] += 1
            raise self._error("after apply")

    def before_call(self, model, params, **kwargs):
        if self.on and random.random() < self.before:
            self.hits["before"] += 1
            raise self._error("before apply")

    def __enter__(self):
        self.events = transactions.tx_connection().client.meta.events
        self.events.register("after-call.dynamodb.TransactWriteItems", self.after_call)
        self.events.register("before-call.dynamodb.TransactWriteItems", self.before_call)
        return self

    def __exit__(self, *exc):
        self.events.unregister("after-call.dynamodb.TransactWriteItems", self.after_call)
        self.events.unregister("before-call.dynamodb.TransactWriteItems", self.before_call)


@pytest.mark.parametrize("in_place", [False, True], ids=["published", "in_place"])
def test_handoff_storm_under_ambiguous_5xx_before_and_after_apply(fresh_aws, in_place):
    """The hand-off storm while 30 % of the transactions are answered 500 after they applied and 15 %
    before: every lease transaction must read itself back, nothing double-counted or lost
    (``in_place``: commits pass their slots, and a passed lease must be known once, by its token)."""
    tenant = _tenant("amb-storm")
    set_cap(tenant, 2)
    sim = HandOffSim(tenant, workers=8, sweepers=1, in_place=in_place)
    ids = _submit(sim, 80)
    with _RandomAmbiguity(after=0.3, before=0.15) as fault:
        sim.start()
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and not all(
                JobStatus(j.status).is_final for j in JobItem.batch_get(ids, consistent_read=True)):
            time.sleep(0.5)
        fault.on = False
    statuses = _wait_final(ids, 150)
    sim.join()
    assert fault.hits["after"] > 5 and fault.hits["before"] > 5, fault.hits
    assert not sim.errors, [f"{type(e).__name__}: {e} ({getattr(e, 'cause', None)})" for e in sim.errors[:5]]
    assert sim.passed or not in_place, "no commit passed its slot: the attack did not exercise it"
    _assert_ran_once(sim, statuses)
    _assert_clean(tenant, statuses)
