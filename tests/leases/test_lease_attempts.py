"""Attempts count what the job caused (issue 15, item 5): real moto DynamoDB, DynamoDB faults at the
botocore level (:mod:`tests.support.dynamo_faults`), the real heartbeat and sweeper."""

from __future__ import annotations


from leases import attempts, sweeper, transactions
from leases.models import JobItem, LeaseItem
from imposition.common.clocks import get_clocks
from tasks.heartbeat import Heartbeat
from tests.leases.helpers import make_job
from tests.support.dynamo_faults import DynamoFaults


def _sweep_at(t: float) -> sweeper.SweepReport:
    return sweeper.sweep(t, publish=lambda *_, **__: None)


def _causes(job_id: str) -> list[tuple[int, str]]:
    job = JobItem.get(job_id, consistent_read=True)
    return [(int(e["attempt"]), e["cause"]) for e in (job.lost_attempts or [])]


def test_a_holder_cut_off_from_dynamodb_reports_infra_lost_and_the_attempt_is_not_charged(tenant_id):
    clocks = get_clocks()
    job_id = make_job(tenant_id, max_attempts=1)  # one attempt: charging it would fail a good job
    lease = transactions.acquire(job_id, tenant_id, "w")
    heartbeat = Heartbeat(lease, clocks)
    with DynamoFaults(rate=1.0, seed=3, kinds=("throttle",), operations={"UpdateItem"}):
        heartbeat.start()
        assert heartbeat.lost.wait(clocks.lease_ttl_s), "the watchdog never fired"
    heartbeat.stop()
    assert heartbeat.lost_cause == "infra_lost", heartbeat.lost_detail
    assert "failed to reach DynamoDB" in heartbeat.lost_detail
    # DynamoDB answers again: the holder's report lands before the sweeper reclaims.
    assert attempts.record_infra_lost(job_id, 1, detail=heartbeat.lost_detail)
    assert attempts.record_infra_lost(job_id, 1, detail="sent twice")  # idempotent: a set
    job = JobItem.get(job_id, consistent_read=True)
    assert (int(job.attempts), job.charged_attempts, job.attempts_left) == (1, 0, True)

    report = _sweep_at(heartbeat.lease.expires_at + 1)
    assert (report.requeued[tenant_id], report.failed[tenant_id]) == (1, 0)
    assert _causes(job_id) == [(1, "infra_lost"), (1, "infra_lost")]  # no holder_vanished: it reported
    lease = transactions.acquire(job_id, tenant_id, "w2")  # the attempt it is owed
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2)
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, int(job.attempts), job.charged_attempts) == ("succeeded", 2, 1)


def test_a_vanished_holder_is_charged_and_a_job_that_kills_its_worker_ends_failed(tenant_id):
    grace_s = get_clocks().infra_report_grace_s
    job_id = make_job(tenant_id, max_attempts=2)
    first = transactions.acquire(job_id, tenant_id, "w1")  # then the holder vanishes: no beat, no report
    report = _sweep_at(first.expires_at + 1)  # an attempt left: re-queued at once
    assert report.requeued[tenant_id] == 1
    second = transactions.acquire(job_id, tenant_id, "w2")
    # Out of attempts: the sweeper waits for a report until the grace has passed.
    report = _sweep_at(second.expires_at + grace_s / 2)
    assert (report.held_for_report, report.failed[tenant_id]) == (1, 0)
    assert LeaseItem.get(job_id, consistent_read=True).token == second.token
    report = _sweep_at(second.expires_at + grace_s + 1)
    assert report.failed[tenant_id] == 1
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.error_code, job.charged_attempts) == ("failed", "lease_expired", 2)
    assert _causes(job_id) == [(1, "holder_vanished"), (2, "holder_vanished")]
    assert not attempts.record_infra_lost(job_id, 2, detail="too late")  # final: stays failed


def test_job_show_lists_how_each_lost_attempt_ended(tenant_id):
    import json

    from click.testing import CliRunner

    from imposition.cli.main import main as cli

    job_id = make_job(tenant_id, max_attempts=3)
    first = transactions.acquire(job_id, tenant_id, "w1")
    _sweep_at(first.expires_at + 1)
    assert attempts.record_infra_lost(job_id, 1, detail="renewals failed")
    result = CliRunner().invoke(cli, ["job", "show", job_id, "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["infra_lost_attempts"] == [1]
    assert [(e["attempt"], e["cause"]) for e in shown["lost_attempts"]] == [(1, "holder_vanished"), (1, "infra_lost")]
    lease = transactions.acquire(job_id, tenant_id, "w2")
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2)


def test_uncharged_infra_lost_attempts_stop_at_the_infra_retry_limit(tenant_id):
    """A release that fails the same way every time must end in the budget, not loop uncharged."""
    from imposition.common.settings import get_settings

    limit = get_settings().infra_retry_limit
    job_id = make_job(tenant_id)
    for attempt in range(1, limit + 1):
        assert attempts.record_infra_lost(job_id, attempt, detail="release could not reach DynamoDB")
    assert attempts.record_infra_lost(job_id, limit, detail="the same report again")  # idempotent
    assert not attempts.record_infra_lost(job_id, limit + 1, detail="one too many")
    job = JobItem.get(job_id, consistent_read=True)
    assert len(job.infra_lost_attempts) == limit
