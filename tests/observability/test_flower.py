"""Flower over the Redis events side channel while the jobs themselves run on SQS.

A real worker consumes SQS; Flower is started as operators start it (``celery -A tasks
--broker=<events URL> flower``, :func:`observability.events.flower_command`); jobs are submitted
from this process (a publisher: its ``task-sent`` goes through the side channel too). Flower's HTTP
API must show each job under its job id, with its tenant in the kwargs and its final state.
"""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest

from leases.models import JobItem
from observability.events import flower_command
from service.stack import ManagedProcess
from tasks.submission import submit
from tests.conftest import reset_aws
from tests.observability.support import CASES, N_UP, free_port
from tests.support.processes import start_worker, wait_for



@pytest.fixture(scope="module")
def flower(tmp_path_factory):
    """A worker on SQS and Flower on the events channel; yields Flower's base URL."""
    reset_aws()
    tmp = tmp_path_factory.mktemp("flower")
    port = free_port()
    ui = ManagedProcess(flower_command(port), tmp / "flower.log", env={"FLOWER_UNAUTHENTICATED_API": "true"},
                        ready_marker="Visit me at")
    worker = start_worker(tmp, concurrency=2)
    yield f"http://127.0.0.1:{port}"
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
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    job_id = submit(CASES / sample, tenant_id=tenant, token="flower", layout=N_UP)
    task = wait_for(lambda: final_state(flower, job_id), 90, what=f"Flower to show job {job_id} finished")
    job = JobItem.get(job_id, consistent_read=True)
    assert task["state"] == state, (task, job.status, job.error)
    assert task["name"] == "imposition.impose"
    assert f"'tenant_id': '{tenant}'" in task["kwargs"] and f"'job_id': '{job_id}'" in task["kwargs"]
    assert task["sent"] is not None, "the publisher's task-sent must reach Flower through the side channel"
    assert task["received"] is not None and task["started"] is not None
    assert task["worker"].startswith("imposer@")
    # an operator can filter the task list by tenant (the job, and its webhook delivery tasks)
    found = flower_tasks(flower, search=f"kwargs:tenant_id={tenant}")
    assert job_id in found
    assert all(f"'tenant_id': '{tenant}'" in t["kwargs"] for t in found.values())
