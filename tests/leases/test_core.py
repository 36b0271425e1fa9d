"""The scheduling core through its public verbs only (``leases`` package docstring): admit, acquire,
park, release (commit, failure, retry), sweep; on the session's moto DynamoDB over HTTP, nothing of
ours replaced. Races start behind a barrier (:func:`tests.support.together`); faults are injected
below botocore (:mod:`tests.support.dynamo_faults`); the property test drives random interleavings
and checks the cap, the counters and that no place is lost after every step."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devstack.localaws import set_gsi_lag
from leases import nodes, sweeper, transactions, waiting, reads, renewal
from leases.errors import CapReached, JobNotQueued, LeaseLost
from leases.models import JobItem
from leases.tenants import set_cap
from imposition.common.clocks import get_clocks
from tests.leases.helpers import claim_of, counters, make_job, new_job, parked, running, statuses
from tests.support.together import together
from tests.support.dynamo_faults import DynamoFaults, LostResponses
from tests.support.recording import DynamoRecording

pytestmark = pytest.mark.file_duration_s(40)  # the long files run first (tests/conftest.py)


def _tenant(name: str) -> str:
    return f"{name}-{os.urandom(4).hex()}"


def _commit(lease: transactions.Lease) -> str | None:
    """Commit ``lease``; the job its place was handed to (None: freed)."""
    _, released = transactions.commit_success(lease, output_key="k", sheets=1, sides=2)
    return released.handed


# -- release: hand the place on, or free it ----------------------------------------------------


def test_a_commit_hands_its_place_to_the_oldest_waiting_job_in_its_own_transaction(fresh_aws):
    tenant = _tenant("hand")
    set_cap(tenant, 1)
    [lease] = running(tenant, 1)
    line = parked(tenant, 3)
    with DynamoRecording(fresh_aws) as recording:
        handed = _commit(lease)
    assert handed == line[0]
    assert len(recording.calls("TransactWriteItems")) == 1
    assert statuses([lease.job_id, *line]) == ["succeeded", "queued", "waiting", "waiting"]
    assert counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 2, "occupied": 1}


def test_a_release_with_none_waiting_frees_the_place(fresh_aws):
    tenant = _tenant("free")
    [lease] = running(tenant, 1)
    assert _commit(lease) is None
    assert counters(tenant) == {"in_flight": 0, "queued": 0, "waiting": 0, "occupied": 0}


def test_a_failure_hands_on_and_a_retry_keeps_its_place(fresh_aws):
    tenant = _tenant("fail")
    set_cap(tenant, 2)
    first, second = running(tenant, 2)
    line = parked(tenant, 2)
    released = transactions.fail_job(first, error="bad", error_code="bad_input")
    assert released.handed == line[0]
    transactions.release_for_retry(second, error="x", error_code="flaky")
    assert statuses([first.job_id, second.job_id, *line]) == ["failed", "queued", "queued", "waiting"]
    assert counters(tenant) == {"in_flight": 0, "queued": 2, "waiting": 1, "occupied": 2}


def test_a_cap_lowered_below_the_tenants_places_frees_the_place_instead(fresh_aws):
    tenant = _tenant("lowered")
    set_cap(tenant, 2)
    leases = running(tenant, 2)
    line = parked(tenant, 1)
    set_cap(tenant, 1)  # occupied 2 > cap 1: the place may not pass on
    assert _commit(leases[0]) is None
    assert statuses(line) == ["waiting"]
    assert counters(tenant) == {"in_flight": 1, "queued": 0, "waiting": 1, "occupied": 1}
    assert _commit(leases[1]) == line[0]  # occupied 1 <= cap 1: now it passes


def test_a_candidate_taken_meanwhile_passes_the_place_to_the_next(fresh_aws):
    """The sweep wakes the oldest waiting job between the release's read of the line and its
    transaction (a cap raised): the release hands the place to the next one."""
    tenant = _tenant("taken")
    set_cap(tenant, 1)
    [lease] = running(tenant, 1)
    line = parked(tenant, 2)
    set_cap(tenant, 2)
    assert waiting.wake(tenant, publish=lambda *a, **k: None) == [line[0]]
    assert _commit(lease) == line[1]
    assert counters(tenant) == {"in_flight": 0, "queued": 2, "waiting": 0, "occupied": 2}


def test_a_release_of_a_lease_no_longer_held_writes_nothing(fresh_aws):
    tenant = _tenant("refused")
    set_cap(tenant, 1)
    [lease] = running(tenant, 1)
    line = parked(tenant, 1)
    report = sweeper.sweep(lease.expires_at + 1, publish=lambda *a, **k: None)  # the holder stalled
    assert report.reclaimed[tenant] == 1
    with pytest.raises(LeaseLost):
        _commit(lease)
    assert statuses([lease.job_id, *line]) == ["queued", "waiting"]
    assert counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 1, "occupied": 1}


# -- refused and ambiguous transactions ------------------------------------------------------------


@pytest.mark.parametrize("lost", [1, 2])
def test_a_release_answered_with_a_lost_response_learns_it_applied_and_what_it_handed(fresh_aws, lost):
    tenant = _tenant("ambiguous")
    set_cap(tenant, 1)
    [lease] = running(tenant, 1)
    line = parked(tenant, 2)
    with LostResponses("TransactWriteItems", times=lost) as faults:
        assert _commit(lease) == line[0]
    assert faults.lost == 1  # the first try applied; the read-back of release_id said so
    assert statuses(line) == ["queued", "waiting"]
    assert counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 1, "occupied": 1}


def test_releases_refused_by_conflicts_and_throttling_apply_once_each(fresh_aws):
    tenant = _tenant("conflict")
    set_cap(tenant, 3)
    leases = running(tenant, 3)
    line = parked(tenant, 4)
    with DynamoFaults(rate=0.4, seed=7, operations={"TransactWriteItems", "Query"}) as faults:
        handed = [_commit(lease) for lease in leases]
    assert sum(faults.injected.values()) >= 2, faults.injected
    assert handed == line[:3]
    assert counters(tenant) == {"in_flight": 0, "queued": 3, "waiting": 1, "occupied": 3}


# -- races behind a barrier ------------------------------------------------------------------------


def test_racing_releasers_hand_distinct_jobs_in_submission_order(fresh_aws):
    tenant = _tenant("race-release")
    set_cap(tenant, 4)
    leases = running(tenant, 4)
    line = parked(tenant, 6)
    handed = together([lambda lease=lease: _commit(lease) for lease in leases])
    assert sorted(handed) == sorted(line[:4])  # each once; the two youngest wait on
    assert statuses(line[4:]) == ["waiting", "waiting"]
    assert counters(tenant) == {"in_flight": 0, "queued": 4, "waiting": 2, "occupied": 4}


def test_a_job_gives_its_slot_to_a_tenant_holding_fewer_leases_only_while_slots_are_short(fresh_aws):
    nodes.register("node-a", 4)
    heavy, light = _tenant("heavy"), _tenant("light")
    running(heavy, 3)
    make_job(heavy)  # heavy: 3 leases, 1 job queued; one slot is free
    assert not waiting.gives_way(heavy)  # nobody poorer waits
    make_job(light)  # light: no lease, 1 job queued, and one free slot for two queued jobs
    assert waiting.gives_way(heavy)
    assert not waiting.gives_way(light)  # the poorer tenant keeps the slot
    nodes.register("node-b", 4)  # five free slots: light's job gets one whatever heavy does
    assert not waiting.gives_way(heavy)


def test_a_job_gives_no_slot_to_a_tenant_whose_only_queued_job_waits_out_its_backoff(fresh_aws):
    nodes.register("node-a", 4)
    heavy, light = _tenant("heavy"), _tenant("light")
    running(heavy, 3)
    make_job(heavy)
    [lease] = running(light, 1)
    transactions.release_for_retry(lease, error="engine crashed", error_code="engine_crashed", delay_s=600)
    assert counters(light) == {"in_flight": 0, "queued": 1, "waiting": 0, "occupied": 1}
    assert not waiting.gives_way(heavy)  # light's job is not due for 10 minutes
    assert waiting.gives_way(heavy, now=time.time() + 601)


def test_racing_acquires_for_the_last_slot_one_wins_the_other_parks(fresh_aws):
    tenant = _tenant("race-acquire")
    set_cap(tenant, 1)
    jobs = [new_job(tenant) for _ in range(2)]
    for job in jobs:
        waiting.admit(job, claim_of(job), door=False)

    def deliver(job_id: str) -> str:
        try:
            transactions.acquire(job_id, tenant, "w")
        except CapReached:
            return "parked" if waiting.park(job_id, tenant) else "room"
        return "leased"

    outcomes = together([lambda j=job.job_id: deliver(j) for job in jobs])
    assert sorted(outcomes) == ["leased", "parked"]
    assert counters(tenant) == {"in_flight": 1, "queued": 0, "waiting": 1, "occupied": 1}


def test_racing_duplicate_deliveries_run_a_job_once(fresh_aws):
    tenant = _tenant("race-dup")
    job = new_job(tenant)
    waiting.admit(job, claim_of(job), door=False)

    def deliver() -> str:
        try:
            transactions.acquire(job.job_id, tenant, "w")
        except JobNotQueued:
            return "dropped"
        return "leased"

    assert sorted(together([deliver, deliver, deliver])) == ["dropped", "dropped", "leased"]
    assert counters(tenant)["in_flight"] == 1


# -- killed holders and releasers; the sweep -------------------------------------------------------

_HOLDER = """
import sys, time
from leases import transactions
lease = transactions.acquire(sys.argv[1], sys.argv[2], "doomed")
print(lease.expires_at, flush=True)
time.sleep(120)
"""


def test_a_killed_holders_place_is_recovered_by_one_sweep(fresh_aws):
    tenant = _tenant("killed")
    set_cap(tenant, 1)
    job = new_job(tenant)
    waiting.admit(job, claim_of(job), door=False)
    line = parked(tenant, 1)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, job.job_id, tenant], stdout=subprocess.PIPE,
                              env=os.environ.copy())
    try:
        assert holder.stdout is not None
        expires_at = float(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()
    published: list[str] = []
    report = sweeper.sweep(expires_at + 1, publish=lambda t, j, **_: published.append(j))
    assert report.requeued[tenant] == 1 and published == [job.job_id]
    assert statuses([job.job_id, *line]) == ["queued", "waiting"]  # the place stays with the job
    assert counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 1, "occupied": 1}


def test_a_releaser_killed_before_publishing_the_handed_job_is_covered_by_one_sweep(fresh_aws):
    tenant = _tenant("killed-releaser")
    set_cap(tenant, 1)
    [lease] = running(tenant, 1)
    line = parked(tenant, 1)
    assert _commit(lease) == line[0]  # ... and the process dies before its publish
    published: list[str] = []
    later = time.time() + get_clocks().lost_message_after_s + 1
    sweeper.sweep(later, publish=lambda t, j, **_: published.append(j), backlog=lambda: 0)
    assert published == line


# -- the index lags (real DynamoDB's global indexes are eventually consistent) -------------------


@pytest.fixture
def lagging_index(fresh_aws):
    """The session's DynamoDB endpoint with its global indexes 1 s behind its tables."""
    set_gsi_lag(fresh_aws.dynamodb.url, 1.0)
    yield 1.0
    set_gsi_lag(fresh_aws.dynamodb.url, 0.0)


def test_a_release_hands_on_to_a_job_the_lagging_index_does_not_show_yet(lagging_index):
    """A job parks a moment before its tenant's release: the index does not show it for a second,
    but the tenant's waiting counter (strongly consistent) does, so the release reads the line again
    until it does, and hands the place on itself (not the sweep), within 2 s."""
    tenant = _tenant("lag")
    set_cap(tenant, 1)
    [lease] = running(tenant, 1)
    job = new_job(tenant)
    waiting.admit(job, claim_of(job), door=False)
    with pytest.raises(CapReached):
        transactions.acquire(job.job_id, tenant, "w")
    assert waiting.park(job.job_id, tenant)
    assert [j.job_id for j in JobItem.by_waiting.query(tenant)] == []  # the index lags
    began = time.monotonic()
    assert _commit(lease) == job.job_id
    assert time.monotonic() - began < 2.0
    assert counters(tenant) == {"in_flight": 0, "queued": 1, "waiting": 0, "occupied": 1}


# -- the property: random interleavings keep the cap, the counters, every place --------------------

_OPS = st.lists(st.sampled_from(["submit", "submit", "deliver", "deliver", "commit", "fail", "retry", "kill",
                                 "race"]), min_size=5, max_size=22)


class _Model:
    """A tenant's messages and leases as its workers see them, driven by the public verbs only."""

    def __init__(self, tenant: str, cap: int) -> None:
        self.tenant, self.cap = tenant, cap
        self.messages: list[str] = []
        self.held: list[transactions.Lease] = []
        self.killed: list[transactions.Lease] = []
        self.jobs: list[str] = []

    def publish(self, tenant_id: str, job_id: str, **_: object) -> None:
        self.messages.append(job_id)

    def submit(self) -> None:
        job = new_job(self.tenant, max_attempts=2)
        self.jobs.append(job.job_id)
        if waiting.admit(job, claim_of(job)):
            self.publish(self.tenant, job.job_id)
        else:
            waiting.wake(self.tenant, publish=self.publish, reason="door")

    def deliver(self) -> None:
        if not self.messages:
            return
        job_id = self.messages.pop(0)
        try:
            self.held.append(transactions.acquire(job_id, self.tenant, "w"))
        except JobNotQueued:
            return  # a duplicate, or parked/finished meanwhile
        except CapReached:
            if not waiting.park(job_id, self.tenant):
                self.messages.append(job_id)  # a slot freed meanwhile: delivered again

    def end(self, how: str) -> None:
        if not self.held:
            return
        lease = self.held.pop(0)
        try:
            if how == "retry" and reads.read_job(lease.job_id).attempts_left:
                self.publish(self.tenant, lease.job_id)  # the copy first, then the release
                transactions.release_for_retry(lease, error="x", error_code="flaky")
                return
            released = (transactions.fail_job(lease, error="x", error_code="bad") if how == "fail"
                        else transactions.commit_success(lease, output_key="k", sheets=1, sides=1)[1])
        except LeaseLost:
            return  # reclaimed by a sweep: its job was re-published
        if released.handed is not None:
            self.publish(self.tenant, released.handed)

    def kill(self) -> None:
        """A holder dies; one sweep, as if at its lease's expiry, reclaims what expired by then."""
        if self.held:
            self.killed.append(self.held.pop(0))
            self.sweep(self.killed[-1].expires_at + 0.001)

    def sweep(self, now: float) -> None:
        sweeper.sweep(now, publish=self.publish)
        self.held = [lease for lease in self.held if renewal.still_held(lease)]

    def check(self) -> None:
        found = dict(zip(self.jobs, statuses(self.jobs)))
        by_status = {s: sum(1 for v in found.values() if v == s) for s in ("running", "queued", "waiting")}
        c = counters(self.tenant)
        assert (c["in_flight"], c["queued"], c["waiting"]) == (by_status["running"], by_status["queued"],
                                                               by_status["waiting"]), (c, by_status)
        assert c["occupied"] == c["in_flight"] + c["queued"], c
        assert c["in_flight"] <= self.cap, c
        assert len({lease.job_id for lease in self.held}) == len(self.held)

    def drain(self) -> None:
        """Run every message and lease to its end by the verbs alone, then the last killed holders'
        sweep: every job must end final (no place lost, no job stuck waiting)."""
        for _ in range(20 * len(self.jobs) + 20):
            if self.held:
                self.end("commit")
            elif self.messages:
                self.deliver()
            elif self.killed:
                self.sweep(max(lease.expires_at for lease in self.killed) + get_clocks().infra_report_grace_s + 1)
                self.killed = []
            else:
                break
            self.check()
        assert statuses(self.jobs) == [s for s in statuses(self.jobs) if s in ("succeeded", "failed")]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, cap=st.integers(min_value=1, max_value=3))
def test_random_interleavings_keep_the_cap_the_counters_and_every_place(fresh_aws, ops, cap):
    model = _Model(_tenant("prop"), cap)
    set_cap(model.tenant, cap)
    for op in ops:
        if op == "submit":
            model.submit()
        elif op == "deliver":
            model.deliver()
        elif op in ("commit", "fail", "retry"):
            model.end(op)
        elif op == "kill":
            model.kill()
        elif op == "race":  # two workers at once: a delivery and an end
            together([model.deliver, lambda: model.end("commit")])
        model.check()
    model.drain()
