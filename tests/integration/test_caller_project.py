"""A calling service with its own ``tasks.py`` and ``celeryconfig.py`` submits and waits through
``imposition.client`` (issue 42, §3), against a real worker.

The caller is a project directory of its own, run as a script there (so it is first on
``sys.path``, as a Celery project is): its ``tasks`` has a Celery app on an in-memory broker and a
task of its own. Before the client, ``from tasks.imposition_task import impose`` failed beside it
(``tasks`` is not a package), and our app read the caller's ``celeryconfig``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from leases.models import JobItem

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "cases" / "a5_8p.pdf"

CALLER_TASKS = '''
from celery import Celery

app = Celery("caller")
app.config_from_object("celeryconfig")


@app.task
def add(x, y):
    return x + y
'''

CALLER_CONFIG = '''
broker_url = "memory://"
result_backend = "cache+memory://"
'''

#: The caller's script: argv = order ("caller-first" or "client-first"), tenant, token, PDF.
CALLER_MAIN = '''
import json, sys

order, tenant, token, pdf = sys.argv[1:]
if order == "caller-first":
    import tasks, celeryconfig
from imposition import client
layout = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}
result = client.submit_file(pdf, tenant_id=tenant, token=token, layout=layout)
plate = result.get(timeout=90)
try:
    client.submit_file(pdf, tenant_id=tenant, token=token, layout=layout)
except Exception as exc:  # the same token again: refused by admission, typed
    refused = type(exc).__name__
import tasks, celeryconfig  # still the caller's own, whichever came first
print(json.dumps({"job_id": result.id, "state": result.state, "plate": plate, "refused": refused,
                  "tasks": tasks.__file__, "broker": tasks.app.conf.broker_url,
                  "add": tasks.add.apply(args=(2, 3)).get(), "config": celeryconfig.broker_url}))
'''


@pytest.fixture
def caller_project(tmp_path) -> Path:
    project = tmp_path / "caller"
    project.mkdir()
    (project / "tasks.py").write_text(CALLER_TASKS)
    (project / "celeryconfig.py").write_text(CALLER_CONFIG)
    (project / "main.py").write_text(CALLER_MAIN)
    return project


@pytest.mark.parametrize("order", ["caller-first", "client-first"])
def test_a_caller_with_its_own_tasks_and_celeryconfig_submits_and_waits(imposition_worker, tenant_id,
                                                                       caller_project, order):
    token = f"caller-{uuid.uuid4().hex[:6]}"
    # the caller's own directory first on sys.path: `python main.py` there, the environment ours (stack, settings)
    done = subprocess.run([sys.executable, "main.py", order, tenant_id, token, str(SAMPLE)], cwd=caller_project,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["state"] == "SUCCESS" and out["refused"] == "DuplicateSubmission"
    assert (out["plate"]["sheets"], out["plate"]["sides"]) == (2, 4)
    assert out["plate"]["plate_key"] == f"tenants/{tenant_id}/jobs/{out['job_id']}/plate.pdf"
    assert out["tasks"] == str(caller_project / "tasks.py") and out["add"] == 5
    assert out["broker"] == out["config"] == "memory://"  # the caller's app kept the caller's configuration
    job = JobItem.get(out["job_id"], consistent_read=True)
    assert (job.status, job.tenant_id, job.token) == ("succeeded", tenant_id, token)
