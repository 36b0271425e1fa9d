"""The sweeper: expired leases found through the index, each reclaimed exactly once, even by two
sweepers at once; jobs re-published, or failed when out of attempts; orphans removed."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from leases import sweeper, transactions, renewal
from leases.models import JobItem, LeaseItem, TenantItem
from tests.leases.helpers import make_job
from tests.support.dynamo_faults import dynamodb_clients


def _expired_leases(tenant_id: str, n: int, *, max_attempts: int = 3) -> list[str]:
    jobs = [make_job(tenant_id, max_attempts=max_attempts) for _ in range(n)]
    for job_id in jobs:  # taken an hour ago by workers that died
        transactions.acquire(job_id, tenant_id, "dead/1", now=time.time() - 3600)
    return jobs


def test_two_sweepers_at_once_reclaim_each_lease_exactly_once(tenant_id):
    """Two sweeps started together (a barrier) over the same expired leases: each lease is reclaimed
    by exactly one of them, whatever the interleaving. Repeated until the two were seen to overlap
    (a lost race, or a job published by both), so the test does exercise the race."""
    overlapped = False
    for _ in range(5):
        jobs = _expired_leases(tenant_id, 4)  # the default cap: 4 leases, all expired
        published: Counter = Counter()
        lock = threading.Lock()

        def publish(tenant: str, job_id: str, *, after_attempt: int) -> None:
            assert after_attempt == 1  # the copy follows the attempt whose lease is reclaimed
            with lock:  # noqa: B023 - called within this iteration (threads joined below)
                published[job_id] += 1  # noqa: B023 - called within this iteration (threads joined below)

        reports, errors = [], []
        barrier = threading.Barrier(2)

        def run() -> None:
            try:
                barrier.wait()  # noqa: B023 - called within this iteration (threads joined below)
                reports.append(sweeper.sweep(time.time(), publish=publish))  # noqa: B023 - called within this iteration (threads joined below)
            except BaseException as exc:  # noqa: BLE001 - a thread's exception never fails the test by itself
                errors.append(exc)  # noqa: B023 - called within this iteration (threads joined below)

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        assert not errors and len(reports) == 2, errors
        assert sum(r.reclaimed[tenant_id] for r in reports) == len(jobs)
        assert set(published) == set(jobs) and all(1 <= n <= 2 for n in published.values())
        assert int(TenantItem.get(tenant_id, consistent_read=True).in_flight) == 0
        for job_id in jobs:
            job = JobItem.get(job_id, consistent_read=True)
            assert (job.status, job.attempts, job.error_code) == ("queued", 1, "lease_expired")
        again = sweeper.sweep(time.time(), publish=publish)  # idempotent: nothing left to do
        assert (again.total, again.lost_races) == (0, 0)
        overlapped = sum(r.lost_races for r in reports) > 0 or sum(published.values()) > len(jobs)
        if overlapped:
            break
    assert overlapped, "the two sweeps never overlapped in 5 rounds: the race was not exercised"


def test_expired_leases_are_found_through_the_index_not_a_scan(tenant_id):
    _expired_leases(tenant_id, 2)
    live = make_job(tenant_id)
    lease = transactions.acquire(live, tenant_id, "alive/1")
    operations: list[str] = []

    def count(event_name: str, **_: object) -> None:
        operations.append(event_name.rsplit(".", 1)[-1])

    clients = dynamodb_clients()
    for client in clients:
        client.meta.events.register("before-call.dynamodb", count, unique_id="count-ops")
    try:
        report = sweeper.sweep(time.time(), publish=lambda *_, **__: None)
    finally:
        for client in clients:
            client.meta.events.unregister("before-call.dynamodb", unique_id="count-ops")
    assert report.reclaimed[tenant_id] == 2
    assert "Query" in operations and "Scan" not in operations, operations
    assert renewal.still_held(lease)  # the live lease is untouched
    transactions.fail_job(lease, error="done", error_code="test")


def test_a_lease_renewed_after_the_query_is_not_reclaimed(tenant_id):
    [job_id] = _expired_leases(tenant_id, 1)
    [stale] = list(sweeper.expired_leases(time.time()))
    holder = transactions.Lease(job_id, tenant_id, stale.worker, stale.token, float(stale.acquired_at),
                                float(stale.expires_at))
    renewed = renewal.renew(holder)  # the holder was only slow, not dead
    assert not sweeper.reclaim(stale, now=time.time(), requeue=True, reason="test")
    assert renewal.still_held(renewed)
    transactions.fail_job(renewed, error="done", error_code="test")


def test_a_job_out_of_attempts_is_failed_not_republished(tenant_id):
    [job_id] = _expired_leases(tenant_id, 1, max_attempts=1)
    published = []
    report = sweeper.sweep(time.time(), publish=lambda t, j, **_: published.append(j))
    assert (report.failed[tenant_id], published) == (1, [])
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.error_code) == ("failed", "lease_expired")
    assert "out of attempts (1/1)" in job.error


def test_an_orphan_lease_is_removed_and_its_slot_given_back(tenant_id):
    [job_id] = _expired_leases(tenant_id, 1)
    JobItem.get(job_id).delete()  # a hand edit: the job is gone, its lease fences nothing
    report = sweeper.sweep(time.time(), publish=lambda *_, **__: None)
    assert report.orphans[tenant_id] == 1
    assert list(LeaseItem.scan(consistent_read=True)) == []
    assert int(TenantItem.get(tenant_id, consistent_read=True).in_flight) == 0


def test_a_copy_that_arrives_before_the_reclaim_commits_is_deferred_not_dropped(tenant_id):
    from leases.errors import JobNotQueued
    from tasks.outcomes import is_duplicate

    [job_id] = _expired_leases(tenant_id, 1)
    with pytest.raises(JobNotQueued) as early:  # the re-published copy, before the reclaim commits
        transactions.acquire(job_id, tenant_id, "w")
    assert (early.value.status, early.value.attempts) == ("running", 1)
    assert not is_duplicate(early.value, after_attempt=1)  # deferred: the job comes back to queued
    assert is_duplicate(early.value, after_attempt=0)  # the first message's redelivery: a duplicate
    sweeper.sweep(time.time(), publish=lambda *_, **__: None)
    lease = transactions.acquire(job_id, tenant_id, "w")  # the deferred copy, later: attempt 2
    with pytest.raises(JobNotQueued) as spare:
        transactions.acquire(job_id, tenant_id, "w")
    assert is_duplicate(spare.value, after_attempt=1)  # a second copy after attempt 1: a spare
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2)
    with pytest.raises(JobNotQueued) as late:
        transactions.acquire(job_id, tenant_id, "w")
    assert late.value.status == "succeeded" and is_duplicate(late.value, after_attempt=5)
