"""Each metric moves at its domain event: the real signals of :mod:`leases.signals` sent in this process.

The worker-level test (``test_worker_metrics``) checks the same increments end to end through a real
worker's endpoint; here every event, including the ones a healthy worker rarely produces (lease lost,
contention, a run that raises past every signal), is sent once and its metric read back.
"""

from __future__ import annotations

import time
import uuid

import pytest
from celery.signals import task_postrun

import tasks  # noqa: F401 (connects the receivers as every process of the service does)
from leases.models import JobItem, LeaseItem
from leases.transactions import Lease
from imposition.observability import recent
from imposition.observability.metrics import get_metrics
from leases import signals


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def value(name: str, **labels: str) -> float:
    """Current value of one sample of this process's metrics (0 when the series does not exist)."""
    return get_metrics().registry.get_sample_value(name, labels) or 0.0


def make_job(tenant: str, *, attempts: int = 1, submitted_at: float, started_at: float | None = None,
             first_received_at: float | None = None, finished_at: float | None = None) -> JobItem:
    return JobItem(uuid.uuid4().hex, tenant_id=tenant, token="tok", max_attempts=3, layout={}, input_key="k",
                   status="running", attempts=attempts, submitted_at=submitted_at, started_at=started_at,
                   first_received_at=first_received_at, finished_at=finished_at)


def lease_for(job: JobItem) -> Lease:
    return Lease(job.job_id, job.tenant_id, "imposer@test/1", "token", time.time(), time.time() + 9)


def acquire(job: JobItem) -> Lease:
    lease = lease_for(job)
    signals.lease_acquired.send(sender=None, lease=lease, job=job, heartbeat=None)
    return lease


def test_lease_acquired_counts_an_attempt_holds_a_slot_and_observes_the_first_waits(tenant):
    now = time.time()
    busy_before = value("imposition_slots_busy")
    job = make_job(tenant, submitted_at=now - 200, first_received_at=now - 150, started_at=now - 10)
    acquire(job)
    assert value("imposition_job_attempts_total", tenant=tenant) == 1
    assert value("imposition_leases_held", tenant=tenant) == 1
    assert value("imposition_slots_busy") == busy_before + 1
    assert value("imposition_queue_wait_seconds_count", tenant=tenant) == 1
    assert value("imposition_queue_wait_seconds_sum", tenant=tenant) == pytest.approx(190)
    assert value("imposition_queue_wait_seconds_bucket", tenant=tenant, le="180.0") == 0  # 190 s is a long wait
    assert value("imposition_queue_wait_seconds_bucket", tenant=tenant, le="300.0") == 1
    assert value("imposition_first_receive_wait_seconds_sum", tenant=tenant) == pytest.approx(50)
    signals.job_finished.send(sender=None, job=job, outcome="succeeded", error=None)
    assert value("imposition_slots_busy") == busy_before


def test_a_later_attempt_counts_but_does_not_observe_a_queue_wait(tenant):
    now = time.time()
    job = make_job(tenant, attempts=2, submitted_at=now - 500, first_received_at=now - 450, started_at=now - 1)
    acquire(job)
    assert value("imposition_job_attempts_total", tenant=tenant) == 1
    assert value("imposition_queue_wait_seconds_count", tenant=tenant) == 0
    signals.job_finished.send(sender=None, job=job, outcome="failed", error="x")


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_job_finished_counts_the_outcome_releases_the_slot_and_observes_the_run(tenant, outcome):
    now = time.time()
    job = make_job(tenant, submitted_at=now - 20, started_at=now - 12, finished_at=now - 2)
    acquire(job)
    signals.job_finished.send(sender=None, job=job, outcome=outcome, error=None)
    assert value("imposition_jobs_total", tenant=tenant, outcome=outcome) == 1
    assert value("imposition_leases_held", tenant=tenant) == 0
    assert value("imposition_job_duration_seconds_count", tenant=tenant) == 1
    assert value("imposition_job_duration_seconds_sum", tenant=tenant) == pytest.approx(10)


def test_a_retrying_attempt_counts_a_retry_not_a_job_outcome(tenant):
    now = time.time()
    job = make_job(tenant, submitted_at=now - 20, started_at=now - 3)
    acquire(job)
    signals.job_finished.send(sender=None, job=job, outcome="retrying", error="S3 throttled")
    assert value("imposition_job_retries_total", tenant=tenant) == 1
    assert sum(value("imposition_jobs_total", tenant=tenant, outcome=o) for o in ("succeeded", "failed")) == 0
    assert value("imposition_leases_held", tenant=tenant) == 0
    assert value("imposition_job_duration_seconds_sum", tenant=tenant) == pytest.approx(3, abs=1)


def test_lease_lost_counts_and_releases_the_slot(tenant):
    job = make_job(tenant, submitted_at=time.time() - 5, started_at=time.time() - 1)
    lease = acquire(job)
    signals.lease_lost.send(sender=None, lease=lease, detail="renewal refused")
    assert value("imposition_leases_lost_total", tenant=tenant) == 1
    assert value("imposition_leases_held", tenant=tenant) == 0


def test_a_run_that_raises_past_every_signal_frees_its_slot_at_task_postrun(tenant):
    job = make_job(tenant, submitted_at=time.time() - 5, started_at=time.time() - 1)
    acquire(job)
    assert value("imposition_leases_held", tenant=tenant) == 1
    task_postrun.send(sender=None, task_id=job.job_id, task=None, args=(), kwargs={}, retval=None, state="FAILURE")
    assert value("imposition_leases_held", tenant=tenant) == 0
    # and a second release of the same run (job_finished after postrun) changes nothing
    signals.job_finished.send(sender=None, job=job, outcome="failed", error="x")
    assert value("imposition_leases_held", tenant=tenant) == 0


def test_cap_defer_counts_in_prometheus_and_in_the_recent_counts(tenant):
    signals.job_deferred.send(sender=None, job_id="j", tenant_id=tenant, reason="cap", delay_s=30)
    signals.job_deferred.send(sender=None, job_id="j", tenant_id=tenant, reason="cap", delay_s=30)
    assert value("imposition_cap_defers_total", tenant=tenant) == 2
    assert value("imposition_lease_contention_defers_total", tenant=tenant) == 0
    assert recent.window_count("cap_defer", tenant, window_s=3600) == 2


def test_contention_defer_is_its_own_counter(tenant):
    signals.job_deferred.send(sender=None, job_id="j", tenant_id=tenant, reason="contention", delay_s=30)
    assert value("imposition_lease_contention_defers_total", tenant=tenant) == 1
    assert value("imposition_cap_defers_total", tenant=tenant) == 0


def test_duplicate_drop_is_a_jobs_outcome(tenant):
    signals.job_dropped.send(sender=None, job_id="j", tenant_id=tenant, status="succeeded")
    assert value("imposition_jobs_total", tenant=tenant, outcome="duplicate_dropped") == 1


@pytest.mark.parametrize("requeued", [True, False])
def test_lease_recovered_counts_and_a_job_out_of_attempts_ends_failed(tenant, requeued):
    lease = LeaseItem("job-1", tenant_id=tenant, worker="w", token="t", acquired_at=0, heartbeat_at=0, expires_at=1)
    signals.lease_recovered.send(sender=None, lease=lease, requeued=requeued)
    assert value("imposition_leases_recovered_total", tenant=tenant) == 1
    assert value("imposition_jobs_total", tenant=tenant, outcome="failed") == (0 if requeued else 1)
    assert recent.window_count("lease_recovered", tenant, window_s=3600) == 1


def test_poison_message_counts_by_queue_and_reason():
    before = value("imposition_poison_messages_total", queue="imposition", reason="unknown_task")
    signals.poison_message.send(sender=None, queue="imposition", reason="unknown_task", message_id="m")
    assert value("imposition_poison_messages_total", queue="imposition", reason="unknown_task") == before + 1


def test_a_tenant_seen_once_has_every_tenant_series_at_zero(tenant):
    signals.job_dropped.send(sender=None, job_id="j", tenant_id=tenant, status="running")
    families = {m.name for m in get_metrics().registry.collect()
                for s in m.samples if s.labels.get("tenant") == tenant}
    assert families >= {"imposition_cap_defers", "imposition_lease_contention_defers", "imposition_leases_recovered",
                        "imposition_leases_lost", "imposition_jobs", "imposition_job_attempts", "imposition_job_retries",
                        "imposition_queue_wait_seconds", "imposition_first_receive_wait_seconds",
                        "imposition_job_duration_seconds", "imposition_leases_held"}


def test_webhook_rounds_drained_and_put_back_are_counted_per_tenant(tenant):
    signals.webhook_drained.send(sender=None, tenant_id=tenant, job_id="j1", unsettled_s=301.0)
    signals.webhook_put_back.send(sender=None, tenant_id=tenant, job_id="j2")
    signals.webhook_put_back.send(sender=None, tenant_id=tenant, job_id="j2")
    assert value("imposition_webhook_rounds_drained_total", tenant=tenant) == 1
    assert value("imposition_webhook_rounds_put_back_total", tenant=tenant) == 2


def test_a_completed_sweep_sets_the_time_of_the_last_sweep():
    finished_at = time.time()
    signals.sweep_completed.send(sender=None, finished_at=finished_at, report=None)
    assert value("imposition_sweeper_last_sweep_timestamp_seconds") == finished_at
    signals.sweep_completed.send(sender=None, finished_at=finished_at + 60, report=None)
    assert value("imposition_sweeper_last_sweep_timestamp_seconds") == finished_at + 60
