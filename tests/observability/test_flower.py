"""Flower over the Redis events side channel while the jobs themselves run on SQS.

A real worker consumes SQS; Flower is started as operators start it (``imposition process run
flower``, :func:`devstack.stack.flower_command`: on 127.0.0.1, behind a login sealed with the local
KMS key, which it refuses every page and API call without); jobs are submitted from this process (a publisher: its ``task-sent`` goes through the side channel too). Flower's HTTP
API must show each job under its job id, with its tenant in the kwargs (a column of the task list)
and its final state; a delivery that parks its job is a retry there, a spare delivery nothing, so
the worker's "Processed" and "Succeeded" count runs of jobs.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from email.message import Message

import psutil
import pytest

from leases.models import JobItem
from leases.tenants import set_cap
from devstack.stack import ManagedProcess, flower_command, flower_login
from tests.conftest import reset_aws
from tests.leases.helpers import claim_of
from tests.observability.support import CASES, N_UP, free_port
from tests.support.inputs import submit_uploaded
from tests.support.processes import start_worker, wait_for



#: This module's imposer node name, unique to the run.
WORKER = f"imposer-flower-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Flower:
    """A running Flower: its base URL, its login, and its process."""

    url: str
    user: str
    password: str
    process: ManagedProcess

    def get(self, path: str, *, login: tuple[str, str] | None = None) -> tuple[int, Message, bytes]:
        """GET ``path`` with ``login`` (user, password) as HTTP basic authentication, or none:
        (status, headers, body)."""
        request = urllib.request.Request(f"{self.url}{path}")
        if login is not None:
            request.add_header("Authorization", "Basic " + base64.b64encode(":".join(login).encode()).decode())
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    def read(self, path: str) -> bytes:
        """The body of ``path``, fetched with the login (fails the test on any status but 200)."""
        status, _, body = self.get(path, login=(self.user, self.password))
        assert status == 200, (path, status, body[:300])
        return body


@pytest.fixture(scope="module")
def flower(tmp_path_factory):
    """A worker on SQS and Flower on the events channel; yields (:class:`Flower`, the worker)."""
    reset_aws()
    tmp = tmp_path_factory.mktemp("flower")
    port = free_port()
    env, password = flower_login(port, "operator")
    ui = ManagedProcess(flower_command(), tmp / "flower.log", env=env, ready_marker="Visit me at")
    # A node name of its own: every session's workers send their events to the same Redis channel,
    # so an "imposer@" of a test in another xdist process would be counted here too.
    worker = start_worker(tmp, concurrency=2, name=WORKER)
    yield Flower(f"http://127.0.0.1:{port}", "operator", password, ui), worker
    worker.stop()
    ui.stop()


def flower_tasks(flower: Flower, **query: str) -> dict:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    return json.loads(flower.read(f"/api/tasks?{qs}"))


def test_flower_refuses_every_page_and_api_call_without_its_login(flower):
    flower, _ = flower
    for path in ("/", "/tasks", "/workers?json=1", "/api/tasks"):
        status, headers, _ = flower.get(path)
        assert status == 401, (path, status)
        if not path.startswith("/api/"):  # a browser asks for the login (Flower's API answers 401 bare)
            assert headers.get("WWW-Authenticate", "").startswith("Basic"), (path, dict(headers))
        status, _, _ = flower.get(path, login=(flower.user, flower.password + "x"))
        assert status == 401, (path, status)
        status, _, _ = flower.get(path, login=("someone", flower.password))
        assert status == 401, (path, status)
        status, _, _ = flower.get(path, login=(flower.user, flower.password))
        assert status == 200, (path, status)
    # the platform's health check needs no login (Flower's own /healthcheck)
    assert flower.get("/healthcheck")[::2] == (200, b"OK")
    # and it listens on loopback only (Settings.flower_address)
    listening = {c.laddr.ip for c in psutil.Process(flower.process.pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN}
    assert listening == {"127.0.0.1"}, listening


def final_state(base: Flower, job_id: str) -> dict | None:
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


def worker_counts(flower: Flower) -> dict:
    """Flower's per-worker event counts (its workers page: "Processed" is ``task-received``) of the imposer."""
    rows = json.loads(flower.read("/workers?json=1"))["data"]
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
    page = flower.read("/tasks").decode()
    assert 'data-column="kwargs"' in page  # the task list shows each task's tenant
