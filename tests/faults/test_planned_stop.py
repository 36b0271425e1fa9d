"""A planned stop (SIGTERM: Celery's warm shutdown) of a worker holding leases, and its /healthz.

Real cluster of the fault app (:mod:`tests.support.fault_app`): imposer nodes with their own metrics
ports, a maintenance worker and beat (the sweeper runs, so a lease left behind would be reclaimed
and charged ``holder_vanished``), the session's short clocks (lease TTL 9 s, heartbeat 1 s).
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
import uuid

import pytest

from imposition.common.clocks import get_clocks
from imposition.common.retention import job_expires_at
from leases.models import JobItem
from tests.conftest import reset_aws
from tests.observability.support import free_port
from tests.support.cluster import FAULT_APP, Cluster
from tests.support.processes import CeleryProcess, start_worker, wait_for

pytestmark = pytest.mark.file_duration_s(60)

#: Seconds each job of the draining node runs (the fault app sleeps at lease_acquired).
JOB_S = 5


def health(port: int) -> tuple[int, dict]:
    """``GET /healthz`` of a node: (status code, JSON body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reset_aws()
    c = Cluster(tmp_path_factory.mktemp("planned-stop"), nodes=0, concurrency=2)
    yield c
    c.stop()


def start_node(cluster: Cluster, name: str) -> tuple[CeleryProcess, int]:
    """An imposer node of the cluster with its own metrics port; returns (process, port)."""
    port = free_port()
    cluster.nodes[name] = start_worker(cluster.tmp, concurrency=2, name=name, app=FAULT_APP,
                                       env={**cluster.env, "IMPOSITION_METRICS_PORT": str(port)})
    return cluster.nodes[name], port


def test_a_planned_stop_drains_its_leases_charges_nothing_and_answers_503_meanwhile(cluster):
    tenant = f"drain-{uuid.uuid4().hex[:8]}"
    node, port = start_node(cluster, "drainer")
    code, body = health(port)
    assert (code, body["status"], body["renewals"]) == (200, "ok", 0), body

    cluster.mark(f"tenant-{tenant}.sleep", str(JOB_S))
    running = [cluster.submit(tenant) for _ in range(2)]
    wait_for(lambda: all(JobItem.get(j).status == "running" for j in running), 30, what="both jobs running")
    # Both leases renew on this node, and it says so.
    code, body = health(port)
    assert (code, body["status"], body["renewals"]) == (200, "ok", 2), body

    began = time.monotonic()
    node.terminate()  # SIGTERM: Celery's warm shutdown, with two leases held
    wait_for(lambda: health(port)[0] == 503, 5, interval_s=0.1, what="/healthz to answer 503 while draining")
    assert health(port)[1]["status"] == "draining"
    assert all(JobItem.get(j).status == "running" for j in running)  # still draining, not killed

    # Jobs sent while it drains go to another node (the draining one starts nothing new).
    other, _ = start_node(cluster, "successor")
    later = [cluster.submit(tenant) for _ in range(2)]
    assert node.proc.wait(timeout=get_clocks().stop_timeout_s) == 0, node.log()[-3000:]
    stopped_s = time.monotonic() - began
    assert stopped_s < get_clocks().stop_timeout_s, stopped_s

    for job_id in running + later:
        job = cluster.final(job_id, timeout_s=60)
        # Finished where it ran, or elsewhere: one attempt, none lost, none charged.
        assert (job.status, job.attempts, job.lost_attempts) == ("succeeded", 1, None), (job_id, job.lost_attempts)
        assert job.expires_at == job_expires_at(job.finished_at)  # the commit starts its retention
    drainer_pids = {e["pid"] for j in running for e in cluster.events_of(j, "acquired")}
    later_pids = {e["pid"] for j in later for e in cluster.events_of(j, "acquired")}
    assert drainer_pids.isdisjoint(later_pids)  # the later jobs ran on the successor
    assert not any(cluster.events_of(j, "reclaimed") for j in running + later)
    other.stop()
    cluster.nodes.pop("successor")


def test_a_frozen_job_process_turns_the_node_unhealthy_until_its_run_ends(cluster):
    """SIGSTOP of the pool child running a job: its lease stops renewing, and after
    ``renewal_stale_after_s`` /healthz names the job; continued, the run ends (its own watchdog
    declares the lease lost) and the node is healthy again."""
    tenant = f"frozen-{uuid.uuid4().hex[:8]}"
    node, port = start_node(cluster, "freezer")
    try:
        cluster.mark(f"tenant-{tenant}.sleep", "10")
        job_id = cluster.submit(tenant)
        wait_for(lambda: cluster.events_of(job_id, "acquired"), 30, what="the job to start")
        pid = cluster.events_of(job_id, "acquired")[0]["pid"]
        wait_for(lambda: health(port)[1]["renewals"] == 1, 10, what="its renewal on /healthz")
        os.kill(pid, signal.SIGSTOP)
        try:
            stale_s = get_clocks().renewal_stale_after_s
            time.sleep(stale_s - 2)
            assert health(port)[0] == 200, health(port)  # not before the limit
            wait_for(lambda: health(port)[0] == 503, 10, interval_s=0.2, what="/healthz to report the frozen run")
            code, body = health(port)
            assert body["status"] == "stalled" and f"job {job_id} last renewed" in body["problems"][0], body
        finally:
            os.kill(pid, signal.SIGCONT)
        cluster.mark(f"tenant-{tenant}.sleep", "0")
        wait_for(lambda: health(port)[0] == 200, 30, interval_s=0.2, what="/healthz healthy once the run ended")
        assert cluster.final(job_id, timeout_s=60).status == "succeeded"
    finally:
        node.stop()
        cluster.nodes.pop("freezer")


def test_a_poll_loop_that_stops_turning_makes_the_node_unhealthy_until_sqs_answers_again(cluster, local_aws):
    """SQS stalled behind a fault proxy (answers held back): the node's long poll never returns, so
    its poll loop stops; past ``poll_stale_after_s`` /healthz says so, and once SQS answers, the
    loop turns and the node is healthy again."""
    from devstack.fault_proxy import FaultProxy

    with FaultProxy(local_aws.main.url) as proxy:
        env = {"AWS_ENDPOINT_URL_SQS": proxy.url, "IMPOSITION_SQS_RECEIVE_BACKOFF_MAX_S": "1",
               "IMPOSITION_SQS_RECEIVE_BACKOFF_INITIAL_S": "0.5"}
        port = free_port()
        node = start_worker(cluster.tmp, concurrency=1, name="poller", app=FAULT_APP,
                            env={**cluster.env, **env, "IMPOSITION_METRICS_PORT": str(port)})
        try:
            stale_s = 2 * (get_clocks().sqs_wait_time_s + 1)  # Clocks.poll_stale_after_s under env
            wait_for(lambda: health(port)[0] == 200, 10, what="a healthy node first")
            proxy.set_mode("stall")
            began = time.monotonic()
            wait_for(lambda: health(port)[0] == 503, stale_s + 15, interval_s=0.2, what="/healthz to see the stall")
            assert time.monotonic() - began >= stale_s - 1.5  # not before its bound
            code, body = health(port)
            assert body["status"] == "stalled" and body["problems"][0].startswith("poll loop stalled"), body
            proxy.set_mode("forward")
            wait_for(lambda: health(port)[0] == 200, 30, interval_s=0.2, what="/healthz healthy once SQS answers")
        finally:
            proxy.set_mode("forward")
            node.stop()
