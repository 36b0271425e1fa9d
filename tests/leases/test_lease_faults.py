"""The lease layer under DynamoDB faults: throttling, transaction conflicts, lost responses.

Faults are injected at the botocore level (:mod:`tests.support.dynamo_faults`), below PynamoDB and
our code; everything above runs for real against moto.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from leases import dynamo, sweeper, transactions, renewal
from leases.errors import CapReached, JobNotQueued, LeaseContention, LeaseLost
from leases.eventlog import EventLog, cap_violations, read_events
from leases.models import JobItem, LeaseItem, TenantItem
from leases.transactions import Lease
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings
from tasks.heartbeat import Heartbeat
from tests.leases.helpers import make_job
from tests.support.dynamo_faults import DynamoFaults, LostResponses
from tests.support.processes import wait_for

CAP = 4

#: What each acquire outcome means for the delivery (docs/design.md §2): the three outcomes, or a lease.
OUTCOME = {Lease: "run", CapReached: "defer", LeaseContention: "defer", JobNotQueued: "drop"}


def test_thirty_percent_throttling_and_conflicts_end_in_the_three_outcomes(tenant_id, tmp_path):
    jobs = [make_job(tenant_id) for _ in range(10)]
    log = EventLog(tmp_path / "events")
    held: dict[str, Lease] = {}
    outcomes: Counter = Counter()
    escaped: list[BaseException] = []
    def turn(job_id: str, barrier: threading.Barrier, keep: bool) -> tuple[str, object]:
        lease = held.get(job_id)
        barrier.wait()
        try:
            if lease is not None and keep:
                return job_id, lease
            if lease is not None:
                log.write("releasing", time.time(), tenant=tenant_id, job=job_id, token=lease.token)
                transactions.release_for_retry(lease, error="test", error_code="test")
                return job_id, None
            lease = transactions.acquire(job_id, tenant_id, "faulty")
            log.write("acquired", time.time(), tenant=tenant_id, job=job_id, token=lease.token)
            return job_id, lease
        except (CapReached, LeaseContention, JobNotQueued) as exc:
            return job_id, exc
        except BaseException as exc:  # noqa: BLE001 - the test's point: nothing else may come out
            escaped.append(exc)
            return job_id, exc

    def duplicate(job_id: str, barrier: threading.Barrier) -> tuple[str, object]:
        barrier.wait()
        try:
            return job_id, transactions.acquire(job_id, tenant_id, "duplicate")
        except (CapReached, LeaseContention, JobNotQueued) as exc:
            return job_id, exc

    dynamo.tx_connection().client  # noqa: B018 - create the botocore client before the threads share it
    faults = DynamoFaults(rate=0.3, seed=20240611)
    with faults, ThreadPoolExecutor(len(jobs) + 2) as pool:
        for _ in range(12):
            busy = sorted(held)[:2]  # duplicate deliveries of two running jobs, kept running this round
            barrier = threading.Barrier(len(jobs) + len(busy))
            futures = [pool.submit(turn, j, barrier, j in busy) for j in jobs]
            duplicates = [pool.submit(duplicate, j, barrier) for j in busy]
            for future in futures + duplicates:
                job_id, result = future.result()
                kind = type(result)
                if kind is Lease and future in duplicates:
                    pytest.fail(f"a duplicate delivery of {job_id} got a second lease")
                if kind is Lease and held.get(job_id) is result:
                    continue  # kept
                if kind is Lease:
                    held[job_id] = result
                elif result is None:
                    held.pop(job_id)
                outcomes[OUTCOME.get(kind, kind.__name__) if result is not None else "released"] += 1
            assert len(held) <= CAP
    assert not escaped, escaped
    for lease in held.values():
        transactions.release_for_retry(lease, error="test", error_code="test")

    assert set(outcomes) <= {"run", "defer", "drop", "released"}, outcomes
    assert outcomes["run"] >= CAP and outcomes["defer"] > 0 and outcomes["drop"] > 0
    assert faults.injected["throttle"] > 0 and faults.injected["conflict"] > 0, faults.injected
    assert int(TenantItem.get(tenant_id, consistent_read=True).in_flight) == 0
    assert cap_violations(read_events(tmp_path / "events"), {}, CAP) == []


def test_conflicts_are_retried_a_bounded_number_of_times_then_contention(tenant_id):
    job_id = make_job(tenant_id)
    faults = DynamoFaults(rate=1.0, seed=1, kinds=("conflict",), operations={"TransactWriteItems"})
    with faults, pytest.raises(LeaseContention) as caught:
        transactions.acquire(job_id, tenant_id, "w")
    assert faults.calls["TransactWriteItems"] == get_settings().lease_conflict_attempts
    assert "TransactionConflict" in caught.value.reason_codes
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.attempts, TenantItem.get(tenant_id).in_flight) == ("queued", 0, 0)


def test_an_acquire_whose_response_is_lost_is_read_back_not_repeated(tenant_id):
    job_id = make_job(tenant_id)
    with LostResponses("TransactWriteItems") as lost:
        lease = transactions.acquire(job_id, tenant_id, "w")
    assert lost.lost == 1
    assert renewal.still_held(lease)
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.attempts, job.lease_token) == ("running", 1, lease.token)
    transactions.fail_job(lease, error="done", error_code="test")


def test_a_commit_whose_response_is_lost_reports_success_not_a_lost_lease(tenant_id):
    job_id = make_job(tenant_id)
    lease = transactions.acquire(job_id, tenant_id, "w")
    with LostResponses("TransactWriteItems") as lost:
        transactions.commit_success(lease, output_key="k", sheets=1, sides=2)  # must not raise LeaseLost
    assert lost.lost == 1
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.output_key) == ("succeeded", "k")
    assert int(TenantItem.get(tenant_id, consistent_read=True).in_flight) == 0


def test_an_ambiguous_renewal_is_read_back(tenant_id):
    job_id = make_job(tenant_id)
    lease = transactions.acquire(job_id, tenant_id, "w", now=time.time() - 5)
    with LostResponses("UpdateItem") as lost:
        renewed = renewal.renew(lease)
    assert lost.lost == 1
    assert renewed.expires_at > lease.expires_at  # the write applied, and the read-back says so
    assert float(LeaseItem.get(job_id, consistent_read=True).expires_at) == pytest.approx(renewed.expires_at)
    transactions.fail_job(renewed, error="done", error_code="test")


def test_heartbeat_learns_of_a_reclaim_and_the_commit_is_refused(tenant_id):
    job_id = make_job(tenant_id)
    lease = transactions.acquire(job_id, tenant_id, "w")
    with Heartbeat(lease, get_clocks()) as heartbeat:
        wait_for(lambda: heartbeat.beats >= 1, 10, what="a first renewal")
        report = sweeper.sweep(time.time() + 3600, publish=lambda *_, **__: None)  # as if it had expired
        assert report.reclaimed[tenant_id] == 1
        assert heartbeat.lost.wait(10), "the heartbeat did not notice the reclaim"
    assert "renewal refused" in heartbeat.lost_detail
    with pytest.raises(LeaseLost):
        transactions.commit_success(heartbeat.lease, output_key="k", sheets=1, sides=2)
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.attempts, job.output_key) == ("queued", 1, None)


def test_heartbeat_watchdog_stops_the_job_when_renewals_keep_failing(tenant_id):
    clocks = get_clocks()
    job_id = make_job(tenant_id)
    lease = transactions.acquire(job_id, tenant_id, "w")
    faults = DynamoFaults(rate=1.0, seed=2, kinds=("throttle",), operations={"UpdateItem"})
    heartbeat = Heartbeat(lease, clocks)
    with faults:
        heartbeat.start()
        assert heartbeat.lost.wait(clocks.lease_ttl_s), "the watchdog never fired"
        declared_at = time.time()
    heartbeat.stop()
    assert "half the lease TTL" in heartbeat.lost_detail
    assert heartbeat.beats == 0
    # Declared before the lease could expire: nobody else could have taken the slot yet.
    held = LeaseItem.get(job_id, consistent_read=True)
    assert held.token == lease.token and declared_at < float(held.expires_at)
    transactions.release_for_retry(lease, error="test", error_code="test")


def test_a_commit_waits_out_an_outage_while_its_lease_lasts_and_not_after(tenant_id):
    """Every DynamoDB request of this process answered 503 for OUTAGE_S, longer than a release's
    bounded retries: the holder's commit starts over until its lease's expiry, and applies. The
    same outage meets a lease past its expiry: given up after the bounded retries, nothing written
    (the lease is the sweeper's then)."""
    outage_s = 4.0
    live = transactions.acquire(make_job(tenant_id), tenant_id, "w")  # expires in lease_ttl_s
    faults = DynamoFaults(rate=1.0, seed=1, kinds=("unavailable",))
    with faults:
        threading.Timer(outage_s, faults.uninstall).start()
        started = time.monotonic()
        transactions.commit_success(live, output_key="k", sheets=1, sides=2)
    assert time.monotonic() - started >= outage_s and faults.injected["unavailable"] > 0
    job = JobItem.get(live.job_id, consistent_read=True)
    assert (job.status, job.output_key, job.attempts) == ("succeeded", "k", 1)

    expired = transactions.acquire(make_job(tenant_id), tenant_id, "w", now=time.time() - get_settings().lease_ttl_s)
    started = time.monotonic()
    with DynamoFaults(rate=1.0, seed=1, kinds=("unavailable",)), pytest.raises(LeaseContention):
        transactions.commit_success(expired, output_key="k", sheets=1, sides=2)
    assert time.monotonic() - started < outage_s
    assert JobItem.get(expired.job_id, consistent_read=True).status == "running"
    transactions.fail_job(expired, error="done", error_code="test")
    assert int(TenantItem.get(tenant_id, consistent_read=True).in_flight) == 0
