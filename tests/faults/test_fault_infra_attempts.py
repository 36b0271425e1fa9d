"""Attempts count what the job caused (issue 15, item 5): real workers whose S3 or DynamoDB answers
``HTTP 503`` for a few seconds while jobs run, each job with an attempt budget of 1 (none to spare).

* **S3 503 during the run**: every process reaches S3 (only S3) through a
  :class:`devstack.fault_proxy.FaultProxy`; the jobs' downloads and uploads meet the 503 past
  their in-place retries. The attempts they lose are retried without being charged, recorded
  ``infra_error`` in ``lost_attempts``; every job succeeds.
* **DynamoDB 503 blip** (the issue's 7 s blip that cost 6 of 12 healthy jobs an attempt): acquires,
  heartbeats, commits and the sweeper meet it. Every job succeeds, none with a charged attempt
  beyond the one that succeeded (``charged_attempts == 1``); an acquire whose outcome DynamoDB
  could not tell is resolved, not charged.
"""

from __future__ import annotations

import time
import uuid

import pytest

from devstack.fault_proxy import FaultProxy
from leases.models import JobItem
from tests.conftest import reset_aws
from tests.faults.test_sqs_outage import committed, finish_all
from tests.support.cluster import Cluster
from tests.support.processes import wait_for

pytestmark = pytest.mark.file_duration_s(61)  # the long files run first (tests/conftest.py)

#: Seconds S3 answers 503 (longer than the in-place retries of one transfer) / DynamoDB answers 503.
S3_OUTAGE_S = 12.0
DYNAMO_BLIP_S = 7.0


def _assert_one_charged_attempt_each(cluster: Cluster, finished: list[JobItem]) -> None:
    assert [job.status for job in finished] == ["succeeded"] * len(finished), \
        [(job.error_code, job.error, job.lost_attempts) for job in finished]
    for job in finished:
        assert len(committed(cluster, job.job_id)) == 1  # exactly once
        assert job.charged_attempts == 1, (job.job_id, job.attempts, job.infra_lost_attempts, job.lost_attempts)


def test_s3_failing_during_runs_charges_no_attempt(local_aws, tmp_path):
    reset_aws()
    with FaultProxy(local_aws.main.url) as proxy:
        cluster = Cluster(tmp_path, nodes=1, concurrency=4, env={"AWS_ENDPOINT_URL_S3": proxy.url})
        try:
            tenant = f"s3-{uuid.uuid4().hex[:8]}"
            hold = cluster.mark(f"tenant-{tenant}.hold")
            jobs = [cluster.submit(tenant, max_attempts=1) for _ in range(4)]  # cap 4: all four hold a lease
            wait_for(lambda: len(cluster.events_of_tenant(tenant, "acquired")) == 4, 60, what="four jobs to start")
            with proxy.failing("http_503"):
                hold.unlink()  # the four downloads meet the 503 now
                time.sleep(S3_OUTAGE_S)
            assert proxy.faults["http_503"] > 0, "no transfer met the outage"
            finished = finish_all(cluster, jobs, timeout_s=120)

            _assert_one_charged_attempt_each(cluster, finished)
            causes = [e["cause"] for job in finished for e in (job.lost_attempts or [])]
            assert causes and set(causes) == {"infra_error"}, causes  # the history says: the infrastructure
            assert all("storage" in str(e["detail"]) for job in finished for e in job.lost_attempts)
            assert cluster.exited() == {}
            wait_for(cluster.no_leases_left, 30, what="every lease to be released")
            cluster.check_invariants()
        finally:
            cluster.stop()


def test_a_dynamodb_503_blip_charges_no_attempt(local_aws, tmp_path):
    reset_aws()
    with FaultProxy(local_aws.dynamodb.url) as proxy:
        cluster = Cluster(tmp_path, nodes=1, concurrency=4, env={"AWS_ENDPOINT_URL_DYNAMODB": proxy.url})
        try:
            tenant = f"blip-{uuid.uuid4().hex[:8]}"
            cluster.mark(f"tenant-{tenant}.sleep", "1")
            jobs = [cluster.submit(tenant, max_attempts=1) for _ in range(12)]
            wait_for(lambda: len(cluster.events_of_tenant(tenant, "acquired")) >= 2, 60, what="jobs to start")
            with proxy.failing("http_503"):
                time.sleep(DYNAMO_BLIP_S)
            assert proxy.faults["http_503"] > 0, "no process met the blip"
            finished = finish_all(cluster, jobs, timeout_s=180)

            _assert_one_charged_attempt_each(cluster, finished)
            vanished = [e for job in finished for e in (job.lost_attempts or []) if e["cause"] == "holder_vanished"
                        and int(e["attempt"]) not in {int(a) for a in (job.infra_lost_attempts or ())}]
            assert vanished == [], vanished
            assert cluster.exited() == {}
            wait_for(cluster.no_leases_left, 30, what="every lease to be released")
            cluster.check_invariants()
        finally:
            cluster.stop()
