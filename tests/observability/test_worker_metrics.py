"""Metrics end to end: real workers (prefork children in multiprocess mode), their HTTP endpoints, beat.

One stack for the module: an imposition worker (``-c 2``) and a maintenance worker, each with its
own metrics port, and beat (sweeper every 2 s, queue sampler every 1 s). Every assertion reads a
scrape of a node's endpoint, exactly what Prometheus (or ``curl``) sees.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from imposition.engine import parse_layout
from leases import transactions, waiting, tenants
from leases.models import JobItem
from leases.tenants import set_cap
from imposition.observability import recent
from imposition.common import aws
from imposition.common.settings import get_settings
from imposition.common.tenancy import MAINTENANCE_GROUP, input_key
from tasks import storage
from tasks.messages import publish_job
from tasks.submission import submit
from tests.conftest import reset_aws
from tests.leases.helpers import claim_of
from tests.observability.support import CASES, N_UP, final_job, free_port
from tests.support.inputs import submit_uploaded
from tests.support.processes import start_beat, start_worker, wait_for

TENANT_METRICS = ("imposition_cap_defers_total", "imposition_lease_contention_defers_total", "imposition_leases_recovered_total", "imposition_leases_lost_total",
                  "imposition_jobs_total", "imposition_job_attempts_total", "imposition_job_retries_total", "imposition_queue_wait_seconds_count",
                  "imposition_first_receive_wait_seconds_count", "imposition_job_duration_seconds_count", "imposition_leases_held")


class Node:
    """A worker node's metrics endpoint."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    def text(self) -> str:
        return urllib.request.urlopen(self.url, timeout=10).read().decode()

    def samples(self) -> dict[tuple[str, frozenset], float]:
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(self.text()) for s in family.samples}

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples().get((name, frozenset(labels.items())))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    reset_aws()
    tmp = tmp_path_factory.mktemp("metrics")
    imposer_port, maintenance_port = free_port(), free_port()
    common = {"IMPOSITION_METRICS_DIR": str(tmp / "multiproc"), "IMPOSITION_SAMPLE_INTERVAL_S": "1"}
    imposer = start_worker(tmp, concurrency=2, env={**common, "IMPOSITION_METRICS_PORT": str(imposer_port)})
    maintenance = start_worker(tmp, queue=get_settings().maintenance_queue, concurrency=1, name="maintenance",
                               env={**common, "IMPOSITION_METRICS_PORT": str(maintenance_port)})
    beat = start_beat(tmp, env=common)
    yield Node(imposer_port), Node(maintenance_port)
    for proc in (beat, maintenance, imposer):
        proc.stop()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_a_job_moves_the_job_metrics_and_the_slot_comes_back(stack, tenant):
    imposer, _ = stack
    job = final_job(submit(CASES / "a5_8p.pdf", tenant_id=tenant, token="ok", layout=N_UP))
    assert job.status == "succeeded", job.error
    wait_for(lambda: imposer.value("imposition_jobs_total", tenant=tenant, outcome="succeeded") == 1, 10,
             what="the success on the endpoint")
    assert imposer.value("imposition_job_attempts_total", tenant=tenant) == job.attempts
    assert imposer.value("imposition_queue_wait_seconds_count", tenant=tenant) == 1
    assert imposer.value("imposition_job_duration_seconds_count", tenant=tenant) == job.attempts
    assert imposer.value("imposition_leases_held", tenant=tenant) == 0
    assert imposer.value("imposition_slots_busy") == 0
    assert imposer.value("imposition_node_slots") == 2
    listed = {name for (name, labels) in imposer.samples() if ("tenant", tenant) in labels}
    assert set(TENANT_METRICS) <= listed, set(TENANT_METRICS) - listed


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package 'prometheus'; `make test` installs it): NOT checked")
def test_promtool_check_metrics_accepts_a_real_scrape_of_each_node(stack, tenant):
    """Prometheus' naming rules on what the endpoints serve (``imposition_`` prefix, units, ``_total``
    on counters only): ``promtool check metrics`` prints nothing and exits 0 on a clean scrape."""
    imposer, maintenance = stack
    job = final_job(submit(CASES / "a5_8p.pdf", tenant_id=tenant, token="lint", layout=N_UP))
    assert job.status == "succeeded", job.error
    wait_for(lambda: imposer.value("imposition_jobs_total", tenant=tenant, outcome="succeeded") == 1, 10,
             what="the success on the endpoint")
    wait_for(lambda: maintenance.value("imposition_sqs_messages", queue=get_settings().imposition_queue,
                                       state="visible") is not None, 30, what="a queue sample")
    for node in (imposer, maintenance):
        text = node.text()
        names = {family.name for family in text_string_to_metric_families(text)}
        assert names and all(name.startswith("imposition_") for name in names), names
        done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                              timeout=60)
        assert (done.returncode, done.stdout + done.stderr) == (0, ""), text


def test_cap_defers_count_exactly_the_parks_recorded_on_the_jobs(stack, tenant):
    """A park at the door counts where the submission runs (here, this process: the recent counts
    in Redis); a park at the acquire counts on the imposer. Both are recorded on the job."""
    imposer, _ = stack
    set_cap(tenant, 1)
    holder = uuid.uuid4().hex
    job = JobItem(holder, tenant_id=tenant, token="holder", max_attempts=3, layout=parse_layout(N_UP)
                  .model_dump(mode="json"), input_key=input_key(tenant, holder), submitted_at=time.time())
    waiting.admit(job, claim_of(job), door=False)
    lease = transactions.acquire(holder, tenant, "test/holder")  # the tenant's one slot, held here
    at_door = submit(CASES / "a5_8p.pdf", tenant_id=tenant, token="door", layout=N_UP)  # parked at the door
    at_acquire = uuid.uuid4().hex  # queued past the door: its worker finds the cap full and parks it
    storage.upload(CASES / "a5_8p.pdf", input_key(tenant, at_acquire))
    job = JobItem(at_acquire, tenant_id=tenant, token="acquire", max_attempts=3,
                  layout=parse_layout(N_UP).model_dump(mode="json"), input_key=input_key(tenant, at_acquire),
                  submitted_at=time.time())
    waiting.admit(job, claim_of(job), door=False)
    publish_job(tenant, at_acquire)
    wait_for(lambda: imposer.value("imposition_cap_defers_total", tenant=tenant), 30, what="a cap deferral on the imposer")
    transactions.fail_job(lease, error="released by the test", error_code="test")
    waiting.wake(tenant, publish=publish_job)  # the releaser's hand-off
    jobs = [final_job(i, timeout_s=60) for i in (at_door, at_acquire)]
    assert [j.status for j in jobs] == ["succeeded", "succeeded"]
    assert [int(j.defer_count) for j in jobs] == [1, 1]
    assert imposer.value("imposition_cap_defers_total", tenant=tenant) == 1  # the park at the acquire
    assert recent.window_count("cap_defer", tenant, window_s=3600) == 2  # both, from every process


def test_bad_input_counts_a_failed_job_and_no_retry(stack, tenant):
    imposer, _ = stack
    job = final_job(submit_uploaded(CASES / "not_a_pdf.pdf", tenant_id=tenant, token="bad", layout=N_UP))
    assert job.status == "failed"
    wait_for(lambda: imposer.value("imposition_jobs_total", tenant=tenant, outcome="failed") == 1, 10, what="the failure")
    assert imposer.value("imposition_job_retries_total", tenant=tenant) == 0
    assert imposer.value("imposition_leases_held", tenant=tenant) == 0


def test_a_duplicate_delivery_counts_as_dropped(stack, tenant):
    imposer, _ = stack
    job = final_job(submit(CASES / "a5_8p.pdf", tenant_id=tenant, token="once", layout=N_UP))
    publish_job(tenant, job.job_id)  # a second copy of a finished job's message
    wait_for(lambda: imposer.value("imposition_jobs_total", tenant=tenant, outcome="duplicate_dropped") == 1, 30,
             what="the duplicate to be dropped")
    assert imposer.value("imposition_jobs_total", tenant=tenant, outcome="succeeded") == 1


def test_a_dead_workers_lease_is_recovered_and_counted_by_the_maintenance_node(stack, tenant):
    imposer, maintenance = stack
    job_id = uuid.uuid4().hex
    key = input_key(tenant, job_id)
    storage.upload(CASES / "a5_8p.pdf", key)
    tenants.ensure_tenant(tenant)
    JobItem(job_id, tenant_id=tenant, token="crash", max_attempts=3, input_key=key, submitted_at=time.time(),
            layout=parse_layout(N_UP).model_dump(mode="json")).save()
    # A worker took the job and died: its lease expired long ago and nobody renews it.
    transactions.acquire(job_id, tenant, "imposer@gone/1", now=time.time() - 10 * get_settings().lease_ttl_s)
    job = final_job(job_id)  # the sweeper reclaims and re-publishes; the live worker runs it
    assert (job.status, job.attempts) == ("succeeded", 2)
    wait_for(lambda: maintenance.value("imposition_leases_recovered_total", tenant=tenant) == 1, 10, what="the recovery")
    assert imposer.value("imposition_leases_recovered_total", tenant=tenant) == 0  # listed on every node that saw the tenant
    assert recent.window_count("lease_recovered", tenant, window_s=3600) == 1


def test_a_poison_message_is_counted_and_the_sampler_shows_it_in_the_dead_letter_queue(stack):
    imposer, maintenance = stack
    queue = get_settings().imposition_queue
    dlq = get_settings().dead_letter_queue(queue)
    aws.sqs().send_message(QueueUrl=aws.queue_url(queue), MessageBody=json.dumps({"not": "a celery message"}),
                           MessageGroupId=MAINTENANCE_GROUP)

    def poisoned() -> float:
        return sum(v for (name, labels), v in imposer.samples().items()
                   if name == "imposition_poison_messages_total" and ("queue", queue) in labels)

    wait_for(lambda: poisoned() >= 1, 30, what="the poison message to be counted")
    wait_for(lambda: maintenance.value("imposition_sqs_messages", queue=dlq, state="visible") == 1, 60,
             what="the sampler to see the message in the dead-letter queue")


def test_the_sampler_reports_every_queue_and_cloudwatchs_age_where_it_has_one(stack):
    _, maintenance = stack
    s = get_settings()
    # Standing in for AWS, which publishes this metric itself; moto's CloudWatch publishes none.
    aws.client("cloudwatch").put_metric_data(Namespace="AWS/SQS", MetricData=[{
        "MetricName": "ApproximateAgeOfOldestMessage", "Dimensions": [{"Name": "QueueName", "Value": "imposition"}],
        "Value": 42.0, "Unit": "Seconds"}])
    wait_for(lambda: maintenance.value("imposition_sqs_oldest_message_age_seconds", queue="imposition") == 42.0, 30,
             what="the sampler to read CloudWatch's age")
    samples = maintenance.samples()
    queues = [name for q in s.work_queues for name in (q, s.dead_letter_queue(q))]
    for queue in queues:
        for state in ("visible", "in_flight", "delayed"):
            assert ("imposition_sqs_messages", frozenset({("queue", queue), ("state", state)})) in samples
    assert ("imposition_sqs_oldest_message_age_seconds", frozenset({("queue", s.maintenance_queue)})) not in samples


def test_the_maintenance_node_exports_when_its_sweeper_last_completed_a_sweep(stack):
    """``imposition_sweeper_last_sweep_timestamp_seconds``, which ImpositionSweepsStopped reads: set by
    each completed sweep (beat sends one every 2 s here), so it keeps moving; the imposition node,
    which sweeps nothing, shows 0 (never), which the alert reads as long ago."""
    imposer, maintenance = stack
    name = "imposition_sweeper_last_sweep_timestamp_seconds"
    started = time.time()
    first = wait_for(lambda: (maintenance.value(name) or 0) > started and maintenance.value(name), 30,
                     what="a sweep completed after the test began")
    assert first <= time.time()
    wait_for(lambda: maintenance.value(name) > first, 30, what="the next sweep")
    assert imposer.value(name) == 0
