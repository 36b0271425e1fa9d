"""The webhook outbox through a DynamoDB 503 blip (issue 15): every job that ends has its webhook
delivered and its admission confirmed, though commits, webhook records and delivery rounds met
``HTTP 503`` on the way.

Every process of the cluster (imposer, maintenance worker and outbox drain, beat, notifications
worker) reaches DynamoDB through a :class:`devstack.fault_proxy.FaultProxy`; the test itself
and the tenant's receiver talk to the endpoint directly. From the moment the first job ends, the
proxy answers every new DynamoDB connection ``503 ServiceUnavailable`` for a few seconds (and
resets the ones in flight): the first jobs' delivery rounds and records, the other jobs' commits,
heartbeats and acquires, the sweeper and the drain all meet it. Before the outbox, a job that committed during such a blip could end with no webhook
status at all and no path that ever sent it.
"""

from __future__ import annotations

import secrets
import time
import uuid

import pytest

from imposition import admission
from leases.models import JobItem
from tests.conftest import reset_aws
from tests.faults.test_fault_outbox import OUTBOX_ENV, receiver  # noqa: F401 (the receiver fixture)
from tests.support.cluster import Cluster
from devstack.fault_proxy import FaultProxy
from tests.support.processes import wait_for
from imposition.webhooks.endpoints import set_webhook

#: How long DynamoDB answers 503, seconds (shorter than the session's 9 s lease TTL).
BLIP_S = 4.0


@pytest.fixture(scope="module")
def proxy(local_aws):
    with FaultProxy(local_aws.dynamodb.url) as p:
        yield p


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, proxy):
    reset_aws()
    c = Cluster(tmp_path_factory.mktemp("outbox-dynamo"), nodes=1, concurrency=4,
                env={**OUTBOX_ENV, "AWS_ENDPOINT_URL_DYNAMODB": proxy.url}, notifications=True)
    yield c
    c.stop()


def test_every_job_that_ends_through_a_dynamodb_blip_gets_its_webhook(cluster, receiver, proxy):  # noqa: F811 - the fixture imported above
    tenant = f"blip-{uuid.uuid4().hex[:8]}"
    set_webhook(tenant, receiver.url(tenant), secrets.token_hex(32))
    cluster.mark(f"tenant-{tenant}.sleep", "1.5")
    jobs = [cluster.submit(tenant) for _ in range(8)]
    # the blip begins as the first jobs end: their rounds, the next commits and acquires meet it
    wait_for(lambda: any(JobItem.get(j, consistent_read=True).status == "succeeded" for j in jobs), 60,
             interval_s=0.1, what="a first job to end")

    with proxy.failing("http_503"):
        time.sleep(BLIP_S)
    assert proxy.faults["http_503"] > 0, "no process met the blip"

    finished = [cluster.final(job_id, timeout_s=120) for job_id in jobs]
    settled = wait_for(lambda: _all_settled(jobs), 90, what="every final job's webhook to be delivered")

    assert all(job.status in ("succeeded", "failed") for job in finished)
    assert [job.webhook_status for job in settled] == ["delivered"] * len(jobs), [j.error for j in settled]
    assert all(job.outbox_partition is None for job in settled)  # out of the outbox
    counts = receiver.tenant_counts(tenant)
    assert set(counts["jobs"]) == set(jobs) and counts["confirmed"] == len(jobs)
    assert admission.in_flight(tenant) == 0
    wait_for(cluster.no_leases_left, 30, what="every lease to be released")
    cluster.check_invariants()


def _all_settled(job_ids: list[str]) -> list[JobItem] | None:
    items = [JobItem.get(j, consistent_read=True) for j in job_ids]
    return items if all(i.webhook_status == "delivered" for i in items) else None
