"""Handed case 12 under the timer policy (``waiting_policy = "timer"``, the baseline kept for
``make bench-sched``): a job deferred 50 times in a row (its tenant's cap held by long jobs) never
reaches the dead-letter queue, and its attempt count stays 0 until it starts. The same case under
the default hand-off is in :mod:`tests.faults.test_fault_handoff`.

Its own small cluster (one node, 3 slots) with a deferral delay of 0 s and a short pause between
empty polls, so 50 deferrals take seconds; each deferred copy is still a new message (never a
redelivery of the same one).
"""

from __future__ import annotations

import os

import pytest

from leases.models import JobItem
from leases.tenants import set_cap
from imposition.common import aws
from imposition.common.settings import get_settings
from tests.conftest import reset_aws
from tests.support.cluster import Cluster
from tests.support.processes import wait_for

DEFERRALS = 50


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The cluster, and this process (which submits) on the timer policy too: no door."""
    reset_aws()
    saved = os.environ.get("IMPOSITION_WAITING_POLICY")
    os.environ["IMPOSITION_WAITING_POLICY"] = "timer"
    get_settings.cache_clear()
    env = {"IMPOSITION_DEFER_DELAY_S": "0", "IMPOSITION_SQS_POLLING_INTERVAL_S": "0.05",
           "IMPOSITION_WAITING_POLICY": "timer"}
    c = Cluster(tmp_path_factory.mktemp("deferral"), nodes=1, concurrency=3, env=env)
    yield c
    c.stop()
    if saved is None:
        os.environ.pop("IMPOSITION_WAITING_POLICY")
    else:
        os.environ["IMPOSITION_WAITING_POLICY"] = saved
    get_settings.cache_clear()


def _messages(queue: str) -> int:
    attributes = aws.sqs().get_queue_attributes(
        QueueUrl=aws.queue_url(queue),
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return sum(int(v) for v in attributes.values())


def test_case_12_a_job_deferred_fifty_times_never_reaches_the_dead_letter_queue(cluster):
    tenant = "patient"
    set_cap(tenant, 2)
    holders = [cluster.submit(tenant, faults={"hold": ""}) for _ in range(2)]  # two long jobs take both slots
    wait_for(lambda: all(JobItem.get(j, consistent_read=True).status == "running" for j in holders), 30,
             what="the two long jobs to hold the cap")
    waiting = cluster.submit(tenant)
    wait_for(lambda: JobItem.get(waiting, consistent_read=True).defer_count >= DEFERRALS, 120,
             what=f"{DEFERRALS} deferrals")

    job = JobItem.get(waiting, consistent_read=True)
    assert (job.status, job.attempts) == ("queued", 0)
    dlq = get_settings().dead_letter_queue(get_settings().imposition_queue)
    assert _messages(dlq) == 0

    for job_id in holders:  # the long jobs end; the deferred job starts at last
        (cluster.fault_dir / f"{job_id}.hold").unlink()
    for job_id in [*holders, waiting]:
        assert cluster.final(job_id).status == "succeeded"
    job = JobItem.get(waiting, consistent_read=True)
    assert job.attempts == 1 and job.defer_count >= DEFERRALS
    assert _messages(dlq) == 0
    wait_for(cluster.no_leases_left, 30, what="every lease to be released")
    cluster.check_invariants()
