"""Every message the service publishes carries its tenant's ``MessageGroupId`` (SQS fair queues):
the first publish, a hand-off's wake, and the sweeper's re-publish."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from leases import transactions, waiting, tenants
from leases.models import JobItem
from leases.tenants import set_cap
from imposition.common import aws
from imposition.common.settings import get_settings
from tasks.sweeper import sweep
from tasks.messages import publish_job
from tasks.submission import submit
from tests.conftest import reset_aws
from tests.leases.helpers import claim_of
from tests.support.processes import wait_for

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "cases" / "a5_8p.pdf"
LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


def receive_all(queue: str, expect: int, timeout_s: float = 20) -> list[dict]:
    """Receive (and delete) ``expect`` messages from ``queue``: group id, task id and kwargs of each."""
    url = aws.queue_url(queue)
    got: list[dict] = []

    def more():
        resp = aws.sqs().receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                         MessageSystemAttributeNames=["MessageGroupId"])
        for m in resp.get("Messages", []):
            envelope = json.loads(base64.b64decode(m["Body"]))
            _, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
            got.append({"group": m["Attributes"].get("MessageGroupId"), "task_id": envelope["headers"]["id"],
                        "task": envelope["headers"]["task"], "kwargs": kwargs})
            aws.sqs().delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        return len(got) >= expect
    wait_for(more, timeout_s, interval_s=0, what=f"{expect} message(s) on {queue}")
    return got


@pytest.fixture(autouse=True)
def clean_stack():
    reset_aws()


def test_first_publish_carries_the_group():
    job_id = submit(SAMPLE, tenant_id="acme", token="first", layout=LAYOUT)
    [msg] = receive_all(get_settings().imposition_queue, 1)
    assert msg == {"group": "tenant-acme", "task_id": job_id, "task": "imposition.impose",
                   "kwargs": {"tenant_id": "acme", "job_id": job_id}}


def test_a_parked_job_has_no_message_and_its_wake_keeps_the_group():
    set_cap("globex", 0)
    job_id = submit(SAMPLE, tenant_id="globex", token="parked", layout=LAYOUT)
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.attempts, job.defer_count) == ("waiting", 0, 1)  # parked at the door
    assert receive_all(get_settings().imposition_queue, 0, timeout_s=2) == []  # nothing published
    set_cap("globex", 1)
    assert waiting.wake("globex", publish=publish_job) == [job_id]
    [msg] = receive_all(get_settings().imposition_queue, 1)
    assert msg == {"group": "tenant-globex", "task_id": job_id, "task": "imposition.impose",
                   "kwargs": {"tenant_id": "globex", "job_id": job_id}}
    assert JobItem.get(job_id, consistent_read=True).status == "queued"


def test_sweeper_republish_carries_the_group():
    tenants.ensure_tenant("initech")
    job = JobItem("job-swept", tenant_id="initech", token="t", max_attempts=3, layout=LAYOUT,
                  input_key="tenants/initech/jobs/job-swept/input.pdf", submitted_at=time.time())
    waiting.admit(job, claim_of(job), door=False)
    # A lease taken long ago by a worker that died: expired now.
    transactions.acquire("job-swept", "initech", "dead-worker/1", now=time.time() - 3600)
    result = sweep.run()
    assert result["reclaimed"] == {"initech": 1}
    [msg] = receive_all(get_settings().imposition_queue, 1)
    assert msg["group"] == "tenant-initech"
    # The copy follows attempt 1 (the reclaimed one): arriving before the reclaim commits, it waits.
    assert msg["kwargs"] == {"tenant_id": "initech", "job_id": "job-swept", "after_attempt": 1}
    assert JobItem.get("job-swept", consistent_read=True).status == "queued"
