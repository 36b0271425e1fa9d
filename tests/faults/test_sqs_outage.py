"""The cluster rides out an SQS outage: real workers and beat behind a loopback fault proxy.

One cluster for the module (an imposer node × 4 slots, the maintenance worker, beat, a
notifications worker), every process with ``AWS_ENDPOINT_URL_SQS`` pointing at a
:class:`devstack.fault_proxy.FaultProxy` in front of moto's SQS (S3 and DynamoDB direct).
This test process submits straight to moto, so submissions never meet the fault. Each test
switches the proxy to one failing mode for :data:`OUTAGE_S` seconds while jobs run, then submits
more jobs: every process must still be alive, every job must finish exactly once, every
consumer must have logged the outage once when it began and once when it ended, the
notifications worker must still deliver (record) webhooks and beat's sweeps must still arrive.

On kombu 5.7.0's own SQS transport (``broker_url = "sqs://"``) every worker exits within a second
of the outage, in every mode, with ``Unrecoverable error: AttributeError("'list' object has no
attribute 'get'")`` (or, on the 400, ``Exception('Request HTTP Error  HTTP 400 …')``); see
``docs/design.md`` ("kombu's SQS transport and an erroring endpoint").
"""

from __future__ import annotations

import random
import time
import uuid

import pytest
from pydantic import ValidationError

from imposition import admission
from leases.models import JobItem
from imposition.common.settings import Settings, get_settings
from tasks.sqs_transport import ReceiveBackoff
from tests.conftest import reset_aws
from tests.support.cluster import Cluster
from devstack.fault_proxy import FaultProxy
from tests.support.processes import wait_for

pytestmark = pytest.mark.file_duration_s(59)  # the long files run first (tests/conftest.py)

#: How long each outage lasts, seconds (the issue's blip was 2.5 s).
OUTAGE_S = 3.0
#: The log lines of :mod:`tasks.sqs_transport`, one per state change of a queue's receives.
OUTAGE_BEGAN = "SQS receive from queue {queue} failing"
OUTAGE_ENDED = "SQS receive from queue {queue} answering again"


@pytest.fixture(scope="module")
def proxy(local_aws):
    with FaultProxy(local_aws.main.url) as p:
        yield p


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, proxy):
    reset_aws()
    c = Cluster(tmp_path_factory.mktemp("sqs-outage"), nodes=1, concurrency=4,
                env={"AWS_ENDPOINT_URL_SQS": proxy.url, "IMPOSITION_WEBHOOK_OUTBOX_GRACE_S": "3",
                     "IMPOSITION_WEBHOOK_OUTBOX_DRAIN_INTERVAL_S": "1"}, notifications=True)
    yield c
    c.stop()


def committed(cluster: Cluster, job_id: str) -> list[dict]:
    return [e for e in cluster.events_of(job_id, "releasing") if e["outcome"] == "succeeded"]


def consumers(cluster: Cluster) -> dict[str, str]:
    """Log file name → the queue that worker consumes."""
    settings = get_settings()
    queues = {"maintenance.log": settings.maintenance_queue, "notifier.log": settings.notifications_queue}
    return {p.log_path.name: queues.get(p.log_path.name, settings.imposition_queue)
            for p in cluster.processes() if p.log_path.name != "beat.log"}


def logs_since(cluster: Cluster, offsets: dict[str, int]) -> dict[str, str]:
    """Log file name → what the process wrote after ``offsets`` (characters)."""
    return {p.log_path.name: p.log()[offsets.get(p.log_path.name, 0):] for p in cluster.processes()}


def finish_all(cluster: Cluster, jobs: list[str], timeout_s: float = 90) -> list[JobItem]:
    """Wait until every job is final; fail at once if a process of the cluster exited."""
    def done():
        assert cluster.exited() == {}, "a process exited:\n" + "\n".join(
            f"{p.log_path.name}: {p.log()[-2000:]}" for p in cluster.processes() if p.proc.poll() is not None)
        items = [JobItem.get(job_id, consistent_read=True) for job_id in jobs]
        return items if all(item.status in ("succeeded", "failed") for item in items) else None
    return wait_for(done, timeout_s, interval_s=0.5, what="every job to finish")


def sweeps_received(cluster: Cluster) -> int:
    maintenance = next(p for p in cluster.others if p.log_path.name == "maintenance.log")
    return sum(1 for line in maintenance.log().splitlines() if "imposition.sweep[" in line and "received" in line)


@pytest.mark.parametrize("mode", ["http_503", "http_400", "reset", "refuse"])
def test_every_process_rides_out_an_sqs_outage_and_every_job_finishes_once(cluster, proxy, mode):
    assert cluster.exited() == {}, "a process had exited before this outage"
    tenant = f"outage-{mode.replace('_', '')}-{uuid.uuid4().hex[:8]}"
    cluster.mark(f"tenant-{tenant}.sleep", "1")  # jobs are running when the outage begins, with a
    # slot still free, so the imposer node is receiving too (a node with every slot busy does not poll)
    offsets = {p.log_path.name: len(p.log()) for p in cluster.processes()}
    before = [cluster.submit(tenant) for _ in range(3)]
    wait_for(lambda: cluster.events_of_tenant(tenant, "acquired"), 30, what="a job to start")
    faults_before = proxy.faults[mode]

    with proxy.failing(mode):
        time.sleep(OUTAGE_S)
        # On a loaded machine a consumer may not poll within OUTAGE_S: the outage lasts until each
        # one has met it, so the lines asserted below are about the transport, not the scheduler.
        wait_for(lambda: all(OUTAGE_BEGAN.format(queue=queue) in logs_since(cluster, offsets)[name]
                             for name, queue in consumers(cluster).items()),
                 30, what="every consumer to meet the outage")

    # The proxy counts the faults it answers; a refused connection never reaches it (only the
    # connections open at the switch are counted), so for ``refuse`` the consumers' own outage lines,
    # asserted below for every consumer, are the evidence that they met it.
    assert mode == "refuse" or proxy.faults[mode] > faults_before, "no client met the outage"
    sweeps_at_end = sweeps_received(cluster)
    after = [cluster.submit(tenant) for _ in range(3)]
    jobs = before + after
    finished = finish_all(cluster, jobs)

    assert cluster.exited() == {}, "a process exited during or after the outage"
    assert [job.status for job in finished] == ["succeeded"] * len(jobs), [job.error for job in finished]
    assert [len(committed(cluster, job_id)) for job_id in jobs] == [1] * len(jobs)  # exactly once
    # The notifications worker still consumes, and every job's webhook round ran (no endpoint:
    # confirmed and recorded), also of the jobs that ended during the outage, whose first round's
    # publish may have been refused: the outbox drain sent those (issue 15).
    wait_for(lambda: all(JobItem.get(j, consistent_read=True).webhook_status == "no_endpoint" for j in jobs),
             60, what="the webhook round of every job to run")
    assert admission.in_flight(tenant) == 0
    # Beat kept scheduling and its sweeps reach the maintenance worker again.
    wait_for(lambda: sweeps_received(cluster) >= sweeps_at_end + 2, 30, what="two sweeps after the outage")
    assert cluster.exited() == {}

    logs = logs_since(cluster, offsets)
    for name, queue in consumers(cluster).items():
        log = logs[name]
        assert "Unrecoverable error" not in log, f"{name}:\n{log[-3000:]}"
        began, ended = OUTAGE_BEGAN.format(queue=queue), OUTAGE_ENDED.format(queue=queue)
        assert (log.count(began), log.count(ended)) == (1, 1), f"{name}: one line per state change\n{log[-3000:]}"
        assert log.index(began) < log.index(ended)


def test_the_receive_backoff_doubles_from_its_start_up_to_its_bound_and_is_jittered():
    backoff = ReceiveBackoff(0.5, 10.0, rng=random.Random(7))
    assert [backoff.cap_s(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 10, 10]
    assert backoff.cap_s(10_000) == 10  # no overflow after a long outage
    for failures in (1, 3, 6, 50):
        cap = backoff.cap_s(failures)
        pauses = [backoff.pause_s(failures) for _ in range(200)]
        assert all(cap / 2 <= pause <= cap for pause in pauses)
        assert len(set(pauses)) > 1  # jittered: a fleet does not poll in step after an outage
    with pytest.raises(ValueError, match="initial_s <= max_s"):
        ReceiveBackoff(2.0, 1.0)
    with pytest.raises(ValidationError, match="sqs_receive_backoff_initial_s=20 must be <= sqs_receive_backoff_max_s=10"):
        Settings(sqs_receive_backoff_initial_s=20, sqs_receive_backoff_max_s=10)


def test_a_running_job_keeps_its_lease_through_an_sqs_stall_longer_than_half_its_ttl(cluster, proxy):
    """The heartbeat extended the message's visibility on the renewal's own thread: an SQS call that
    hung for longer than ``lease_lost_after_s`` held back every renewal, the watchdog declared the
    lease lost (``stalled``: charged) and a job that was running well lost its attempt."""
    from imposition.common.clocks import get_clocks

    assert cluster.exited() == {}, "a process had exited before this stall"
    clocks = get_clocks()
    stall_s = clocks.lease_lost_after_s + 3.5  # longer than the watchdog allows without a renewal
    tenant = f"stall-{uuid.uuid4().hex[:8]}"
    cluster.mark(f"tenant-{tenant}.sleep", str(stall_s + 2 * clocks.heartbeat_interval_s + 2))
    job_id = cluster.submit(tenant)
    wait_for(lambda: cluster.events_of(job_id, "acquired"), 30, what="the job to start")
    time.sleep(1.5 * clocks.heartbeat_interval_s)  # a first renewal, and its extension, before the stall

    with proxy.failing("stall"):
        time.sleep(stall_s)

    [job] = finish_all(cluster, [job_id])
    assert job.status == "succeeded", job.error
    assert cluster.events_of(job_id, "lost") == []
    assert (len(cluster.events_of(job_id, "acquired")), int(job.attempts)) == (1, 1)  # one run, not a second
    assert len(committed(cluster, job_id)) == 1
    assert cluster.exited() == {}
