"""``imposition status`` reads DynamoDB, SQS and the recent counts directly: no worker runs here."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from click.testing import CliRunner

from leases import transactions, waiting, tenants
from leases.models import JobItem
from leases.tenants import set_cap
from imposition.observability import recent
from imposition.observability.status import collect, render
from imposition.common import aws
from imposition.cli.main import main
from imposition.common.settings import get_settings
from tests.leases.helpers import claim_of


def save_job(tenant: str, *, submitted_at: float, status: str = "queued", started_at: float | None = None,
             finished_at: float | None = None, attempts: int = 0) -> str:
    """A job item; a ``queued`` one is counted as published, a ``waiting`` one goes through the door
    (its tenant must be full), a final one is just written."""
    job_id = uuid.uuid4().hex
    job = JobItem(job_id, tenant_id=tenant, token=job_id, max_attempts=3, layout={}, input_key="k", status=status,
                  attempts=attempts, submitted_at=submitted_at, first_received_at=started_at, started_at=started_at,
                  finished_at=finished_at)
    if status == "queued":
        waiting.admit(job, claim_of(job), door=False)
    elif status == "waiting":
        assert waiting.admit(job, claim_of(job)) is False, "the tenant had room: the job was not parked"
    else:
        job.save()
    return job_id


@pytest.fixture
def scene(fresh_aws):
    """Two tenants: ``busy`` (cap 2, both leases held, three jobs waiting, a failure) and ``quiet``."""
    now = time.time()
    busy, quiet = f"busy-{uuid.uuid4().hex[:6]}", f"quiet-{uuid.uuid4().hex[:6]}"
    set_cap(busy, 2)
    tenants.ensure_tenant(quiet)
    for submitted, started in ((now - 300, now - 240), (now - 300, now - 60)):  # running: waits 60 s, 240 s
        job_id = save_job(busy, submitted_at=submitted)
        transactions.acquire(job_id, busy, "imposer@test/1", now=started)
    for age_s in (100, 50, 10):  # waiting so far
        save_job(busy, submitted_at=now - age_s, status="waiting")
    save_job(busy, submitted_at=now - 1000, status="failed", started_at=now - 990, finished_at=now - 980, attempts=1)
    save_job(busy, submitted_at=now - 7200, status="failed", started_at=now - 7100, finished_at=now - 7000,
             attempts=1)  # outside the hour
    recent.record("cap_defer", busy, now=now - 30, count=5)
    recent.record("lease_recovered", busy, now=now - 600)
    recent.record("cap_defer", busy, now=now - 2 * 3600, count=100)  # outside the hour
    s = get_settings()
    sqs = aws.sqs()
    sqs.send_message(QueueUrl=aws.queue_url(s.imposition_queue), MessageBody="{}")
    sqs.send_message(QueueUrl=aws.queue_url(s.imposition_queue), MessageBody="{}", DelaySeconds=600)
    for _ in range(2):
        sqs.send_message(QueueUrl=aws.queue_url(s.dead_letter_queue(s.imposition_queue)), MessageBody="{}")
    return now, busy, quiet


def test_status_shows_each_tenant_queue_and_the_cluster(scene):
    now, busy, quiet = scene
    status = collect(now=now)
    by_id = {t.tenant_id: t for t in status.tenants}
    b = by_id[busy]
    assert (b.cap, b.in_flight, b.waiting, b.cap_defers, b.lease_recoveries, b.failed, b.submitted) == \
        (2, 2, 3, 5, 1, 1, 6)
    # waits in the hour: running 60, 240; waiting 100, 50, 10 so far; the failed one 10
    assert b.wait_p50_s == pytest.approx(55)
    assert b.wait_p95_s == pytest.approx(205)
    assert b.oldest_waiting_s == pytest.approx(100)
    q = by_id[quiet]
    assert (q.cap, q.in_flight, q.waiting, q.cap_defers, q.wait_p50_s) == (get_settings().default_cap, 0, 0, 0, None)
    queue = {q.queue: q for q in status.queues}[get_settings().imposition_queue]
    assert (queue.visible, queue.in_flight, queue.delayed, queue.dead_letters) == (1, 0, 1, 2)
    assert queue.oldest_age_s is None  # no CloudWatch datapoint: unknown, not zero
    assert (status.cluster.slots_busy, status.cluster.slots_total) == (2, get_settings().slots_per_node)
    screen = render(status)
    assert busy in screen and quiet in screen and "n/a" in screen and "2 of 8 slots busy (25%)" in screen


def test_status_command_prints_the_screen_and_json(scene):
    _, busy, _ = scene
    runner = CliRunner()
    text = runner.invoke(main, ["status"], catch_exceptions=False)
    assert text.exit_code == 0 and busy in text.output and "DLQ depth" in text.output
    as_json = runner.invoke(main, ["status", "--json"], catch_exceptions=False)
    doc = json.loads(as_json.output)
    assert {t["tenant_id"]: t["in_flight"] for t in doc["tenants"]}[busy] == 2
    assert doc["cluster"]["utilisation"] == pytest.approx(2 / get_settings().slots_per_node)


def test_tenants_and_busy_slots_come_from_one_transactional_read_and_a_disagreement_is_said(scene):
    from leases.models import TenantItem
    from tests.support.dynamo_faults import dynamodb_clients

    now, busy, quiet = scene
    calls: list[tuple[str, int]] = []

    def count(event_name: str, params=None, **_: object) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        calls.append((operation, len((params or {}).get("TransactItems", [])) if operation == "TransactGetItems"
                      else 0))

    clients = dynamodb_clients()
    for client in clients:
        client.meta.events.register("provide-client-params.dynamodb", count, unique_id="count-status")
    try:
        status = collect(now=now)
    finally:
        for client in clients:
            client.meta.events.unregister("provide-client-params.dynamodb", unique_id="count-status")
    gets = [n for op, n in calls if op == "TransactGetItems"]
    assert gets == [3], calls  # both tenants and the slot counter, in one TransactGetItems
    assert "GetItem" not in [op for op, _ in calls] and ("Scan", 0) in calls  # the scan reads only ids
    assert status.consistency.agree and status.consistency.note() is None
    assert sum(t.in_flight for t in status.tenants) == status.cluster.slots_busy == 2
    assert "read at one moment: they agree" in render(status)

    TenantItem(quiet).update(actions=[TenantItem.in_flight.add(1)])  # a drifted counter: no lease behind it
    drifted = collect(now=now)
    assert not drifted.consistency.agree
    assert "sources disagree in one read: tenants in flight add up to 3, the slot counter says 2 busy" in render(drifted)
    doc = drifted.as_dict()["consistency"]
    assert (doc["agree"], doc["tenants_in_flight"], doc["slots_busy"]) == (False, 3, 2)
    TenantItem(quiet).update(actions=[TenantItem.in_flight.add(-1)])
