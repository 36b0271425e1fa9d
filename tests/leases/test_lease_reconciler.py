"""The reconciler (issue 15, item 2): a queued job that no message could still bring is found by
``imposition audit`` and re-published by the sweeper once; its duplicate is dropped by the
conditional acquire. Real moto SQS and DynamoDB, no workers."""

from __future__ import annotations

import base64
import json
import time

import pytest
from click.testing import CliRunner

from leases import sweeper, transactions
from leases.audit import audit, repair
from leases.errors import JobNotQueued
from leases.models import JobItem, JobStatus
from imposition.common import aws
from imposition.cli.main import main as cli
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings
from tasks.messages import publish_job
from tasks.sweeper import visible_messages
from tests.leases.helpers import make_job


def _queue_url() -> str:
    return aws.queue_url(get_settings().imposition_queue)


def _lose_every_message() -> None:
    """What a purge or an endpoint restarted empty does: no message of any job is left."""
    while True:
        got = aws.sqs().receive_message(QueueUrl=_queue_url(), MaxNumberOfMessages=10, WaitTimeSeconds=0)
        if not got.get("Messages"):
            return
        for msg in got["Messages"]:
            aws.sqs().delete_message(QueueUrl=_queue_url(), ReceiptHandle=msg["ReceiptHandle"])


def _received_job_ids() -> list[str]:
    """Receive every visible message (hiding it, as a worker that then vanishes would); the job ids."""
    got = aws.sqs().receive_message(QueueUrl=_queue_url(), MaxNumberOfMessages=10, WaitTimeSeconds=1)
    ids = []
    for m in got.get("Messages", []):
        envelope = json.loads(base64.b64decode(m["Body"]))
        ids.append(json.loads(base64.b64decode(envelope["body"]))[1]["job_id"])
    return ids


def _publish_recorded(published: list):
    def publish(tenant: str, job: str, **kw) -> None:
        published.append((job, kw))
        publish_job(tenant, job, **kw)
    return publish


def test_a_lost_queued_job_is_reported_republished_once_and_its_duplicate_dropped(tenant_id):
    job_id = make_job(tenant_id)  # queued and due now, with no message: a purged queue
    after = time.time() + get_clocks().lost_message_after_s + 1  # past the derived bound

    # Within the bound the job is not lost (its message may still be on its way).
    assert audit([tenant_id], backlog=visible_messages).clean
    report = audit([tenant_id], now=after, backlog=visible_messages)
    assert [(d.kind, d.job_id) for d in report.drifts] == [("lost_job", job_id)], report.describe()
    # Without knowing the queue, the audit cannot tell a lost job from a busy queue: not judged.
    assert audit([tenant_id], now=after).clean

    published: list[tuple[str, dict]] = []
    report = sweeper.SweepReport()
    sweeper.bring_back(after, publish=_publish_recorded(published), report=report, backlog=visible_messages)
    assert published == [(job_id, {"after_attempt": 0})]
    assert report.republished[tenant_id] == 1
    # Its message is visible now: later sweeps send no second copy, and the audit is clean.
    for k in range(2, 4):
        sweeper.bring_back(after + k * get_clocks().lost_message_after_s, publish=_publish_recorded(published),
                           report=sweeper.SweepReport(), backlog=visible_messages)
    assert len(published) == 1
    assert audit([tenant_id], now=after, backlog=visible_messages).clean

    # Two copies (the re-published one, and an old one that turns up after all): one runs, the
    # other finds the job not queued and is a duplicate.
    publish_job(tenant_id, job_id)
    assert _received_job_ids() == [job_id, job_id]
    lease = transactions.acquire(job_id, tenant_id, "w1")
    with pytest.raises(JobNotQueued) as dup:
        transactions.acquire(job_id, tenant_id, "w2")
    assert dup.value.status == JobStatus.RUNNING.value
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2)
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, int(job.attempts)) == ("succeeded", 1)
    _lose_every_message()


def test_a_busy_queue_hides_nothing_and_a_message_hidden_by_a_dead_worker_counts_as_lost(tenant_id):
    lost = make_job(tenant_id)
    other = make_job(tenant_id)
    publish_job(tenant_id, other)  # visible: the queue is busy, no job can be judged lost
    after = time.time() + get_clocks().lost_message_after_s + 1
    assert audit([tenant_id], now=after, backlog=visible_messages).clean
    published: list[tuple[str, dict]] = []
    sweeper.bring_back(after, publish=_publish_recorded(published), report=sweeper.SweepReport(),
                       backlog=visible_messages)
    assert published == []
    # A worker receives the other job's message and vanishes: hidden for the visibility timeout.
    assert _received_job_ids() == [other]
    report = audit([tenant_id], now=after, backlog=visible_messages)
    assert sorted(d.job_id for d in report.drifts if d.kind == "lost_job") == sorted([lost, other])
    for job_id in (lost, other):  # what --repair does at real time, once both are overdue
        JobItem(job_id).update(actions=[JobItem.due_at.set(time.time() - get_clocks().lost_message_after_s - 1)])
    report = repair([tenant_id], publish=publish_job, backlog=visible_messages)
    assert sorted(report.repairs) == sorted(f"{tenant_id}: re-published lost queued job {j}" for j in (lost, other))
    assert report.clean, report.describe()
    assert sorted(_received_job_ids()) == sorted([lost, other])
    _lose_every_message()


def test_audit_cli_reports_a_lost_job_with_exit_1_and_repair_republishes_it(tenant_id):
    job_id = make_job(tenant_id)
    JobItem(job_id).update(actions=[JobItem.due_at.set(time.time() - get_clocks().lost_message_after_s - 5)])
    result = CliRunner().invoke(cli, ["audit", "--tenant", tenant_id])
    assert result.exit_code == 1, result.output
    assert f"lost_job: job {job_id} queued" in result.output
    result = CliRunner().invoke(cli, ["audit", "--tenant", tenant_id, "--repair"])
    assert result.exit_code == 0, result.output
    assert f"re-published lost queued job {job_id}" in result.output
    assert _received_job_ids() == [job_id]
    _lose_every_message()
