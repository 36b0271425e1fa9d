"""Flower over the Redis events side channel while the jobs themselves run on SQS.

A real worker consumes SQS; Flower is started as operators start it (``celery -A tasks
--broker=<events URL> flower``, :func:`devstack.stack.flower_command`); jobs are submitted
from this process (a publisher: its ``task-sent`` goes through the side channel too). Flower's HTTP
API must show each job under its job id, with its tenant in the kwargs (a column of the task list)
and its final state; a delivery that parks its job is a retry there, a spare delivery nothing, so
the worker's "Processed" and "Succeeded" count runs of jobs.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest

from leases.models import JobItem
from leases.tenants import set_cap
from devstack.stack import ManagedProcess, flower_command
from tests.conftest import reset_aws
from tests.leases.helpers import claim_of
from tests.observability.support import CASES, N_UP, free_port
from tests.support.inputs import submit_uploaded
from tests.support.processes import start_worker, wait_for



#: This module's imposer node name, unique to the run.
WORKER = f"imposer-flower-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def flower(tmp_path_factory):
    """A worker on SQS and Flower on the events channel; yields Flower's base URL."""
    reset_aws()
    tmp = tmp_path_factory.mktemp("flower")
    port = free_port()
    ui = ManagedProcess(flower_command(port), tmp / "flower.log", env={"FLOWER_UNAUTHENTICATED_API": "true"},
                        ready_marker="Visit me at")
    # A node name of its own: every session's workers send their events to the same Redis channel,
    # so an "imposer@" of a test in another xdist process would be counted here too.
    worker = start_worker(tmp, concurrency=2, name=WORKER)
    yield f"http://127.0.0.1:{port}", worker
    worker.stop()
    ui.stop()


def flower_tasks(base: str, **query: str) -> dict:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    with urllib.request.urlopen(f"{base}/api/tasks?{qs}", timeout=10) as response:
        return json.loads(response.read())


def final_state(base: str, job_id: str) -> dict | None:
    task = flower_tasks(base).get(job_id)
    return task if task and task["state"] in ("SUCCESS", "FAILURE") else None


@pytest.mark.parametrize("sample, state", [("a5_8p.pdf", "SUCCESS"), ("not_a_pdf.pdf", "FAILURE")])
def test_a_job_run_from_sqs_shows_in_flower_with_its_tenant_and_final_state(flower, sample, state):
    flower, _ = flower
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    job_id = submit_uploaded(CASES / sample, tenant_id=tenant, token="flower", layout=N_UP)  # past the door
    task = wait_for(lambda: final_state(flower, job_id), 90, what=f"Flower to show job {job_id} finished")
    job = JobItem.get(job_id, consistent_read=True)
    assert task["state"] == state, (task, job.status, job.error)
    assert task["name"] == "imposition.impose"
    assert f"'tenant_id': '{tenant}'" in task["kwargs"] and f"'job_id': '{job_id}'" in task["kwargs"]
    assert task["sent"] is not None, "the publisher's task-sent must reach Flower through the side channel"
    assert task["received"] is not None and task["started"] is not None
    assert task["worker"].startswith(f"{WORKER}@")
    # an operator can filter the task list by tenant (the job, and its webhook delivery tasks)
    found = flower_tasks(flower, search=f"kwargs:tenant_id={tenant}")
    assert job_id in found
    assert all(f"'tenant_id': '{tenant}'" in t["kwargs"] for t in found.values())


def worker_counts(base: str) -> dict:
    """Flower's per-worker event counts (its workers page: "Processed" is ``task-received``) of the imposer."""
    with urllib.request.urlopen(f"{base}/workers?json=1", timeout=10) as response:
        rows = json.loads(response.read())["data"]
    row = next(r for r in rows if r.get("hostname", "").startswith(f"{WORKER}@"))
    return {k: int(row.get(k) or 0) for k in ("task-received", "task-started", "task-succeeded", "task-retried")}


def test_a_park_is_a_retry_in_flower_and_only_runs_count_as_processed(flower):
    from leases import waiting
    from imposition.common.tenancy import input_key
    from tasks import storage
    from tasks.messages import publish_job

    flower, worker = flower
    tenant = f"p-{uuid.uuid4().hex[:10]}"
    set_cap(tenant, 0)  # paused: its delivery will find the cap full at the acquire
    job_id = uuid.uuid4().hex
    storage.upload(CASES / "a5_8p.pdf", input_key(tenant, job_id))
    job = JobItem(job_id, tenant_id=tenant, token=job_id, max_attempts=3, layout=N_UP,
                  input_key=input_key(tenant, job_id), submitted_at=time.time())
    waiting.admit(job, claim_of(job), door=False)
    before = wait_for(lambda: worker_counts(flower), 30, what="the imposer in Flower")
    publish_job(tenant, job_id)
    wait_for(lambda: JobItem.get(job_id, consistent_read=True).status == "waiting", 60, what="the park")
    parked = wait_for(lambda: (flower_tasks(flower).get(job_id) or {}).get("state") == "RETRY"
                      and flower_tasks(flower)[job_id], 30, what="Flower to show the park")
    assert f"'tenant_id': '{tenant}'" in parked["kwargs"]
    set_cap(tenant, 4)
    assert waiting.wake(tenant, publish=publish_job, reason="cap_change")
    wait_for(lambda: final_state(flower, job_id), 90, what="the woken job to finish in Flower")
    publish_job(tenant, job_id)  # a spare delivery of the finished job
    wait_for(lambda: f"dropping duplicate delivery of job {job_id}" in worker.log(), 60, what="the duplicate drop")
    after = wait_for(lambda: (c := worker_counts(flower))["task-succeeded"] > before["task-succeeded"] and c, 30,
                     what="the counts")
    time.sleep(2)  # any event of the duplicate would have arrived by now
    after = worker_counts(flower)
    delta = {k: after[k] - before[k] for k in after}
    assert delta == {"task-received": 1, "task-started": 1, "task-succeeded": 1, "task-retried": 1}, delta
    task = flower_tasks(flower)[job_id]
    assert task["state"] == "SUCCESS" and task["received"] is not None and task["started"] is not None
    with urllib.request.urlopen(f"{flower}/tasks", timeout=10) as response:
        page = response.read().decode()
    assert 'data-column="kwargs"' in page  # the task list shows each task's tenant
