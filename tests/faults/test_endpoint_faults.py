"""Nothing lost when the SQS endpoint restarts empty or DynamoDB stalls (issue 15, "Must hold"):
real workers and beat (:class:`tests.support.cluster.Cluster`) behind a loopback
:class:`devstack.fault_proxy.FaultProxy`, short clocks (lease TTL 9 s, heartbeat 1 s).

* **SQS restarted empty.** The embedded endpoint keeps its queues in memory; a restart loses every
  message. Here the proxy refuses connections (the endpoint is down) while every queue is deleted
  (what the restart loses), then ``imposition provision`` recreates them and the proxy forwards
  again. Jobs that were queued then have no message anywhere: the reconciler re-publishes them
  (``Clocks.lost_message_after_s`` once the queue shows no visible message). Every job submitted
  before the outage, and after it, finishes exactly once; every process is still alive; the audit,
  which looks at the queue too, is clean. (S3 is left alone: locally it shares the server with
  SQS, so a real restart would lose the inputs as well, and those jobs would fail for it.)
* **DynamoDB stalled** past the SDK's read timeout and past the lease TTL: requests reach the
  endpoint and apply, their answers come late or never; botocore resends, a resent commit is
  refused (its lease is gone), and the writer reads back its ``release_id``. Leases of running
  jobs are lost for want of DynamoDB: the holders report ``infra_lost``, so with an attempt budget
  of 1 no job fails for it. Every commit that applied is reported succeeded (never ``lost``), and no
  attempt is charged to the infrastructure. The stall is 12 s with a read timeout of 4 s, the scale
  of the issue's 35 s stall against botocore's 30 s timeout and a 600 s TTL, made short.
"""

from __future__ import annotations

import time
import uuid

import pytest
from click.testing import CliRunner

from leases.audit import audit
from imposition.common import aws
from imposition.cli.main import main as cli
from imposition.common.settings import get_settings
from tasks.sweeper import visible_messages
from tests.conftest import reset_aws
from tests.faults.test_sqs_outage import committed, finish_all
from tests.support.cluster import Cluster
from devstack.fault_proxy import FaultProxy
from tests.support.processes import wait_for

pytestmark = pytest.mark.file_duration_s(73)  # the long files run first (tests/conftest.py)

#: How long the SQS endpoint is down, seconds (the issue's restart took 26 s).
SQS_DOWN_S = 8.0
#: DynamoDB stall and the SDK's read timeout of the cluster's processes, seconds.
DYNAMO_STALL_S = 12.0
DYNAMO_READ_TIMEOUT_S = 4


def _delete_every_queue() -> None:
    settings = get_settings()
    for queue in settings.work_queues:
        for name in (queue, settings.dead_letter_queue(queue)):
            aws.sqs().delete_queue(QueueUrl=aws.queue_url(name))


def test_an_sqs_endpoint_restarted_empty_loses_no_job(local_aws, tmp_path):
    reset_aws()
    with FaultProxy(local_aws.main.url) as proxy:
        cluster = Cluster(tmp_path, nodes=1, concurrency=4, env={"AWS_ENDPOINT_URL_SQS": proxy.url},
                          notifications=True)
        try:
            tenant = f"restart-{uuid.uuid4().hex[:8]}"
            cluster.mark(f"tenant-{tenant}.sleep", "2")
            before = [cluster.submit(tenant) for _ in range(10)]  # cap 4: running, queued and waiting
            wait_for(lambda: len(cluster.events_of_tenant(tenant, "acquired")) >= 2, 60, what="jobs to start")
            proxy.set_mode("refuse")  # the endpoint is down …
            _delete_every_queue()     # … and comes back with nothing it had
            time.sleep(SQS_DOWN_S)
            provisioned = CliRunner().invoke(cli, ["provision"])
            assert provisioned.exit_code == 0, provisioned.output
            proxy.set_mode("forward")
            after = [cluster.submit(tenant) for _ in range(2)]
            jobs = before + after
            finished = finish_all(cluster, jobs, timeout_s=180)

            assert [job.status for job in finished] == ["succeeded"] * len(jobs), [job.error for job in finished]
            assert [len(committed(cluster, job_id)) for job_id in jobs] == [1] * len(jobs)  # exactly once
            assert cluster.exited() == {}, "a process exited"
            wait_for(cluster.no_leases_left, 30, what="every lease to be released")
            report = audit(backlog=visible_messages)
            assert report.clean, report.describe()
        finally:
            cluster.stop()


@pytest.fixture
def pynamodb_config(tmp_path):
    path = tmp_path / "pynamodb_settings.py"
    path.write_text(f"read_timeout_seconds = {DYNAMO_READ_TIMEOUT_S}\nconnect_timeout_seconds = 2\n"
                    "max_retry_attempts = 2\n")
    return path


def test_a_dynamodb_stall_misreports_no_commit_and_charges_no_attempt(local_aws, tmp_path, pynamodb_config):
    reset_aws()
    with FaultProxy(local_aws.dynamodb.url) as proxy:
        cluster = Cluster(tmp_path, nodes=1, concurrency=4,
                          env={"AWS_ENDPOINT_URL_DYNAMODB": proxy.url, "PYNAMODB_CONFIG": str(pynamodb_config)})
        try:
            tenant = f"stall-{uuid.uuid4().hex[:8]}"
            cluster.mark(f"tenant-{tenant}.sleep", "2")
            jobs = [cluster.submit(tenant, max_attempts=1) for _ in range(6)]  # one attempt: none to spare
            wait_for(lambda: len(cluster.events_of_tenant(tenant, "acquired")) >= 4, 60, what="jobs to start")
            time.sleep(1.5)  # the first jobs are about to commit
            with proxy.failing("stall"):
                time.sleep(DYNAMO_STALL_S)
            finished = finish_all(cluster, jobs, timeout_s=180)

            assert [job.status for job in finished] == ["succeeded"] * len(jobs), \
                [(job.error_code, job.error) for job in finished]
            for job in finished:
                # Exactly one commit applied per job; the attempt that made it was reported succeeded.
                [commit] = committed(cluster, job.job_id)
                lost_tokens = {e["token"] for e in cluster.events_of(job.job_id, "lost")}
                assert commit["token"] not in lost_tokens, (job.job_id, cluster.events_of(job.job_id))
                # Attempts consumed by the infrastructure: 0 (the successful one is the only charge).
                assert job.charged_attempts == 1, (job.job_id, job.attempts, job.infra_lost_attempts,
                                                   job.lost_attempts)
            infra_lost = sum(len(job.infra_lost_attempts or ()) for job in finished)
            vanished = [e for job in finished for e in (job.lost_attempts or []) if e["cause"] == "holder_vanished"]
            assert vanished == [], vanished
            print(f"leases lost to the stall and not charged: {infra_lost}")
            assert cluster.exited() == {}
            wait_for(cluster.no_leases_left, 30, what="every lease to be released")
            cluster.check_invariants()
        finally:
            cluster.stop()
