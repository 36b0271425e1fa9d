"""Attempts count what the job caused (issue 15, item 5): real workers whose S3 or DynamoDB answers
``HTTP 503`` for a few seconds while jobs run, each job with an attempt budget of 1 (none to spare).

* **S3 503 during the run**: every process reaches S3 (only S3) through a
  :class:`devstack.fault_proxy.FaultProxy`; the jobs' downloads and uploads meet the 503 past
  their in-place retries. The attempts they lose are retried without being charged, recorded
  ``infra_error`` in ``lost_attempts``; every job succeeds.
* **The bucket gone at the plate upload** (``NoSuchBucket``): a worker stopped right before its
  plate's PutObject while its bucket is deleted; the upload fails on a real moto S3 past its
  in-place retries. The platform failed, not the job: the attempt is retried uncharged, like a 503.
* **DynamoDB 503 blip** (the issue's 7 s blip that cost 6 of 12 healthy jobs an attempt): acquires,
  heartbeats, commits and the sweeper meet it. Every job succeeds, none with a charged attempt
  beyond the one that succeeded (``charged_attempts == 1``); an acquire whose outcome DynamoDB
  could not tell is resolved, not charged.
"""

from __future__ import annotations

import signal
import time
import uuid

import psutil
import pytest

from devstack.fault_proxy import FaultProxy
from imposition.cli.provision import provision
from imposition.common import aws
from imposition.common.settings import get_settings
from leases.models import JobItem
from tasks import storage
from tests.conftest import reset_aws
from tests.faults.test_sqs_outage import committed, finish_all
from tests.support.cluster import Cluster
from tests.support.processes import wait_for

pytestmark = pytest.mark.file_duration_s(80)  # the long files run first (tests/conftest.py)

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


def _delete_bucket(bucket: str) -> dict[str, bytes]:
    """Empty and delete ``bucket``; returns its objects (key → bytes) to put back."""
    s3 = aws.s3()
    saved = {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
             for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    for key in saved:
        s3.delete_object(Bucket=bucket, Key=key)
    s3.delete_bucket(Bucket=bucket)
    return saved


@pytest.fixture
def own_bucket(monkeypatch):
    """A bucket of this test's own (``IMPOSITION_BUCKET`` here and in the cluster's processes), so
    deleting it touches nothing of the session's."""
    bucket = f"gone-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("IMPOSITION_BUCKET", bucket)
    get_settings.cache_clear()
    provision()
    yield bucket
    monkeypatch.undo()
    get_settings.cache_clear()


def test_a_bucket_gone_at_the_plate_upload_charges_no_attempt(local_aws, tmp_path, own_bucket):
    reset_aws()
    provision()
    cluster = Cluster(tmp_path, nodes=1, concurrency=1, env={"IMPOSITION_BUCKET": own_bucket})
    try:
        tenant = f"nob-{uuid.uuid4().hex[:8]}"
        job_id = cluster.submit(tenant, faults={"sigstop-before-upload": ""}, max_attempts=1)
        first = wait_for(lambda: cluster.events_of(job_id, "acquired"), 60, what="the job to start")
        worker = psutil.Process(first[0]["pid"])
        wait_for(lambda: worker.status() == psutil.STATUS_STOPPED, 60, what="the worker to stop at its plate upload")
        hold = cluster.mark(f"tenant-{tenant}.hold")  # the next attempt waits until the bucket is back
        saved = _delete_bucket(own_bucket)
        worker.send_signal(signal.SIGCONT)  # its PutObject meets NoSuchBucket
        wait_for(lambda: len(cluster.events_of(job_id, "acquired")) == 2
                 or JobItem.get(job_id, consistent_read=True).status == "failed", 90, what="the failed attempt's end")
        charged = JobItem.get(job_id, consistent_read=True)
        assert charged.status != "failed", f"the missing bucket cost the job its one attempt: {charged.error}"
        provision()
        for key, body in saved.items():
            aws.s3().put_object(Bucket=own_bucket, Key=key, Body=body)
        hold.unlink()
        job = cluster.final(job_id, timeout_s=90)

        assert job.status == "succeeded", (job.error_code, job.error, job.lost_attempts)
        assert job.charged_attempts == 1, (job.attempts, job.infra_lost_attempts, job.lost_attempts)
        (lost,) = job.lost_attempts
        assert lost["cause"] == "infra_error" and "NoSuchBucket" in str(lost["detail"]), lost
        assert len(committed(cluster, job_id)) == 1
        cluster.settle()
    finally:
        cluster.stop()


def test_a_missing_bucket_is_the_platforms_failure_and_a_missing_key_the_jobs(own_bucket, tmp_path):
    """The classification the worker charges by, against a real moto S3: an upload into the deleted
    bucket is the infrastructure's; a download of a key that does not exist is the job's."""
    plate = tmp_path / "plate.pdf"
    plate.write_bytes(b"%PDF-1.7\n")
    with pytest.raises(storage.InputMissing):
        storage.download("tenants/t/jobs/j/input.pdf", tmp_path / "in.pdf")
    _delete_bucket(own_bucket)
    try:
        with pytest.raises(storage.StorageError) as failed:
            storage.upload(plate, "tenants/t/jobs/j/plate.pdf")
        assert "NoSuchBucket" in str(failed.value)
        assert failed.value.infrastructure is True
    finally:
        provision()


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
