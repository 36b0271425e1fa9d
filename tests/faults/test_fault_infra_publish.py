"""SQS refusing what a worker sends (issue 15, items 1 and 5): a real worker reaching SQS (only
SQS) through a :class:`devstack.fault_proxy.FaultProxy` answering ``HTTP 503``.

**A retry whose copy cannot be published still releases its lease.**

The job's first attempt fails by itself (``fail-input``: retryable, charged) while SQS answers
``HTTP 503``, so the retry copy cannot be published. The worker releases the lease anyway
(``release_for_retry``: the job is ``queued`` again, its slot free) and leaves the message to SQS,
which redelivers it. Before, the publish error escaped with the lease held: the sweeper reclaimed
it a TTL later and charged the attempt a second time as ``holder_vanished``.

**A pool child killed while SQS refuses everything does not end its worker.** The killed child's
message is given back (``reject_on_worker_lost``): its visibility set to 0, or a copy published;
both fail. kombu lets that ``ClientError`` escape, and the worker's main process exited
("Unrecoverable error"), found by the fault soak. Now the message is left to its visibility
timeout, the worker keeps running, and the job (reclaimed by the sweeper) finishes.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from devstack.fault_proxy import FaultProxy
from imposition.common.tenancy import input_key
from tasks import storage
from tasks.submission import submit_job
from tests.conftest import reset_aws
from tests.faults.test_sqs_outage import committed
from tests.support.cluster import CASES, SADDLE_A4, Cluster
from tests.support.processes import start_beat, wait_for

pytestmark = pytest.mark.file_duration_s(50)  # the long files run first (tests/conftest.py)


def test_a_retry_whose_copy_cannot_be_published_still_releases_its_lease(local_aws, tmp_path):
    reset_aws()
    with FaultProxy(local_aws.main.url) as proxy:
        cluster = Cluster(tmp_path, nodes=1, concurrency=2, env={"AWS_ENDPOINT_URL_SQS": proxy.url})
        try:
            tenant = f"publish-{uuid.uuid4().hex[:8]}"
            job_id = uuid.uuid4().hex
            hold = cluster.mark(f"{job_id}.hold")
            fail = cluster.mark(f"{job_id}.fail-input")
            # Cluster.submit picks its own id; the markers need it first, so submit the same way here.
            key = input_key(tenant, job_id)
            storage.upload(CASES / "a5_8p.pdf", key)
            submit_job(tenant_id=tenant, token=f"tok-{job_id}", input_key=key, layout=SADDLE_A4, max_attempts=2,
                       job_id=job_id)
            wait_for(lambda: cluster.events_of(job_id, "acquired"), 60, what="the job to start")
            with proxy.failing("http_503"):
                hold.unlink()  # the attempt fails now; its retry copy meets the 503
                wait_for(lambda: cluster.events_of(job_id, "released"), 60, what="the failed attempt's release")
                time.sleep(1)
            fail.unlink()  # the next attempt succeeds
            job = cluster.final(job_id, timeout_s=120)

            [released] = [e for e in cluster.events_of(job_id, "released") if e["outcome"] == "retrying"]
            assert cluster.events_of(job_id, "reclaimed") == [], "the sweeper had to reclaim the lease"
            assert job.status == "succeeded", (job.error_code, job.error)
            assert len(committed(cluster, job_id)) == 1
            assert int(job.attempts) == 2 and job.charged_attempts == 2  # the job's own failure, charged once
            assert [e["cause"] for e in job.lost_attempts or []] == []  # no attempt lost to a vanished holder
            log = cluster.nodes["imposer1"].log()
            assert "the retry copy could not be published" in log, log[-3000:]
            assert cluster.exited() == {}
            wait_for(cluster.no_leases_left, 30, what="every lease to be released")
            cluster.check_invariants()
        finally:
            cluster.stop()


def test_a_child_killed_while_sqs_refuses_everything_leaves_its_worker_running(local_aws, tmp_path):
    reset_aws()
    with FaultProxy(local_aws.main.url) as proxy:
        cluster = Cluster(tmp_path, nodes=1, concurrency=2, env={"AWS_ENDPOINT_URL_SQS": proxy.url})
        try:
            tenant = f"restore-{uuid.uuid4().hex[:8]}"
            hold = cluster.mark(f"tenant-{tenant}.hold")
            job_id = cluster.submit(tenant)
            [acquired] = wait_for(lambda: cluster.events_of(job_id, "acquired"), 60, what="the job to start")
            with proxy.failing("http_503"):
                os.kill(acquired["pid"], signal.SIGKILL)  # the child holding the job's lease
                time.sleep(6)  # the node gives the message back (both ways fail) meanwhile
                assert cluster.exited() == {}, cluster.nodes["imposer1"].log()[-3000:]
            hold.unlink()
            job = cluster.final(job_id, timeout_s=120)

            assert job.status == "succeeded", (job.error_code, job.error)
            assert len(committed(cluster, job_id)) == 1
            log = cluster.nodes["imposer1"].log()
            assert "Unrecoverable error" not in log, log[-3000:]
            assert cluster.exited() == {}
            wait_for(cluster.no_leases_left, 30, what="every lease to be released")
            cluster.check_invariants()
        finally:
            cluster.stop()


def test_beat_started_while_sqs_fails_waits_for_it(local_aws, tmp_path):
    """Beat's first connection makes its channel, which looks the queues' URLs up: a 503 there was a
    ``ClientError`` that kombu does not retry, and beat exited. Now it is a connection error: beat
    retries with backoff and sends its first tasks once SQS answers."""
    reset_aws()
    with FaultProxy(local_aws.main.url) as proxy:
        proxy.set_mode("http_503")
        beat = start_beat(tmp_path, env={"AWS_ENDPOINT_URL_SQS": proxy.url})
        try:
            time.sleep(8)
            assert beat.proc.poll() is None, beat.log()[-3000:]
            assert proxy.faults["http_503"] > 0, "beat never reached SQS"
            proxy.set_mode("forward")
            wait_for(lambda: "Sending due task" in beat.log(), 60, what="beat to send a task")
            assert beat.proc.poll() is None and "beat raised exception" not in beat.log(), beat.log()[-3000:]
        finally:
            beat.stop()
