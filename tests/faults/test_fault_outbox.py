"""The webhook outbox (issue 15) on real processes: every final job gets its webhook delivered (or
recorded), and a tenant without an endpoint is confirmed, whatever failed between the final write
and the first round.

Its own cluster: one imposer node, the maintenance worker (sweeper and outbox drain), beat, a
notifications worker, all on the fault app; a short outbox grace (2 s) and drain period (1 s), short
delivery clocks; a real receiver process for the tenants with an endpoint.

* A worker child SIGKILLed right after its commit (``<job>.kill-after-release``): ``job_finished``
  is never sent, no round is ever published by the worker; the drain sends it from the outbox.
* The same for a tenant without an endpoint: the drain's round confirms the job on its behalf.
* The sweeper failing a job out of attempts, and an operator's cancel: the intent is in their
  final writes too, and the webhook arrives.
"""

from __future__ import annotations

import secrets
import uuid

import pytest

from imposition import admission
from leases.models import JobItem
from leases.tenants import set_cap
from tasks.jobs import cancel as cancel_job
from tests.conftest import reset_aws
from tests.support.cluster import Cluster
from tests.support.processes import wait_for
from tests.webhooks.conftest import NOTIFIER_ENV
from imposition.webhooks import delivery
from imposition.webhooks.endpoints import set_webhook
from devstack.stack import ReceiverProcess

OUTBOX_ENV = {**NOTIFIER_ENV, "IMPOSITION_WEBHOOK_OUTBOX_GRACE_S": "2",
              "IMPOSITION_WEBHOOK_OUTBOX_DRAIN_INTERVAL_S": "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reset_aws()
    c = Cluster(tmp_path_factory.mktemp("outbox"), nodes=1, concurrency=2, env=OUTBOX_ENV, notifications=True)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def receiver(tmp_path_factory):
    r = ReceiverProcess(tmp_path_factory.mktemp("outbox-receiver") / "receiver.log")
    yield r
    r.stop()


@pytest.fixture(autouse=True)
def invariants(cluster):
    yield
    cluster.settle()


def _tenant(name: str, receiver: ReceiverProcess | None = None) -> str:
    tenant = f"{name}-{uuid.uuid4().hex[:8]}"
    if receiver is not None:
        set_webhook(tenant, receiver.url(tenant), secrets.token_hex(32))
    return tenant


def _settled(job_id: str, status: str) -> JobItem:
    def done():
        job = JobItem.get(job_id, consistent_read=True)
        return job if job.webhook_status == status else None
    return wait_for(done, 60, interval_s=0.25, what=f"webhook of job {job_id} to be {status}")


def _drain_log(cluster: Cluster) -> str:
    return next(p for p in cluster.others if p.log_path.name == "maintenance.log").log()


def _out_of_the_outbox(job: JobItem) -> bool:
    return job.outbox_partition is None and job.webhook_due_at is None


def test_a_worker_killed_between_its_commit_and_the_webhook_still_gets_the_webhook_out(cluster, receiver):
    tenant = _tenant("killed", receiver)
    job_id = cluster.submit(tenant, faults={"kill-after-release": ""})
    assert admission.in_flight(tenant) == 1

    job = _settled(job_id, delivery.DELIVERED)

    assert job.status == "succeeded" and _out_of_the_outbox(job)
    assert not (cluster.fault_dir / f"{job_id}.kill-after-release").exists()  # the child did die there
    assert len(cluster.events_of(job_id, "releasing")) == 1  # one commit, by the child that was killed
    assert f"outbox: webhook of job {job_id}" in _drain_log(cluster)  # sent by the drain, not the worker
    counts = receiver.tenant_counts(tenant)
    assert counts["jobs"] == {job_id: 1} and counts["confirmed"] == 1
    assert admission.in_flight(tenant) == 0


def test_a_tenant_without_an_endpoint_is_confirmed_though_its_worker_died_after_the_commit(cluster):
    tenant = _tenant("noendpoint")
    job_id = cluster.submit(tenant, faults={"kill-after-release": ""})
    assert admission.in_flight(tenant) == 1

    job = _settled(job_id, delivery.NO_ENDPOINT)

    assert job.status == "succeeded" and _out_of_the_outbox(job)
    assert f"outbox: webhook of job {job_id}" in _drain_log(cluster)
    assert admission.in_flight(tenant) == 0


def test_a_job_failed_by_the_sweeper_and_a_cancelled_job_get_their_webhooks(cluster, receiver):
    tenant = _tenant("final", receiver)
    poison = cluster.submit(tenant, faults={"kill-every-attempt": ""}, max_attempts=1)
    wait_for(lambda: cluster.events_of(poison, "acquired"), 60, what="the poison job's one attempt to start")
    set_cap(tenant, 0)  # paused: the next job waits at the door, and is cancelled there
    parked = cluster.submit(tenant)
    assert JobItem.get(parked, consistent_read=True).status == "waiting"
    cancel_job(parked)

    failed = _settled(poison, delivery.DELIVERED)
    cancelled = _settled(parked, delivery.DELIVERED)

    (cluster.fault_dir / f"{poison}.kill-every-attempt").unlink()
    set_cap(tenant, None)
    assert (failed.status, failed.error_code) == ("failed", "lease_expired")
    assert (cancelled.status, cancelled.error_code) == ("failed", "cancelled")
    assert _out_of_the_outbox(failed) and _out_of_the_outbox(cancelled)
    assert receiver.tenant_counts(tenant)["jobs"] == {poison: 1, parked: 1}
    assert admission.in_flight(tenant) == 0
