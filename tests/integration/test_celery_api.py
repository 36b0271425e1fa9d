"""Celery's own doors to ``imposition.impose``, used the way a Celery user would, on a real worker:
a job is submitted properly or refused with a clear error, never published bare and dropped."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from leases.models import JobItem
from imposition.common import aws
from imposition.common.settings import get_settings
from imposition.common.tenancy import input_key, message_group_id
from tasks.imposition_task import SubmissionRequired, impose
from tests.admission.helpers import queue_messages
from tests.support.processes import wait_for

CASES = Path(__file__).resolve().parents[1] / "data" / "cases"
LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


def _final(job_id: str) -> JobItem:
    def done():
        job = JobItem.get(job_id, consistent_read=True)
        return job if job.status in ("succeeded", "failed") else None
    return wait_for(done, 60, what=f"job {job_id} to finish")


def _uploaded(tenant_id: str) -> str:
    key = input_key(tenant_id, uuid.uuid4().hex)
    aws.s3().upload_file(str(CASES / "a5_8p.pdf"), get_settings().bucket, key)
    return key


def test_apply_async_with_submission_kwargs_submits_the_job(imposition_worker, tenant_id):
    result = impose.apply_async(kwargs={"tenant_id": tenant_id, "token": "celery-way",
                                        "input_key": _uploaded(tenant_id), "layout": LAYOUT})
    job = _final(result.id)
    assert (job.status, job.tenant_id, job.attempts) == ("succeeded", tenant_id, 1)


def test_a_signature_delay_submits_the_job(imposition_worker, tenant_id):
    result = impose.s(tenant_id=tenant_id, token="sig", input_key=_uploaded(tenant_id), layout=LAYOUT).delay()
    assert _final(result.id).status == "succeeded"


@pytest.mark.parametrize("call", [
    lambda t: impose.apply_async(kwargs={"tenant_id": t, "job_id": "j-bare"}),
    lambda t: impose.s(tenant_id=t, job_id="j-sig").apply_async(),
    lambda t: impose.apply_async((t, "j-args")),
    lambda t: impose.delay(tenant_id=t, input_key="k", layout=LAYOUT),  # no token
    lambda t: impose.delay(t, "tok", "k", LAYOUT),
    lambda t: impose.apply_async(kwargs={"tenant_id": t, "token": "x", "input_key": "k", "layout": LAYOUT},
                                 link=impose.s(tenant_id=t, job_id="next")),
])
def test_a_bare_message_is_refused_clearly_and_nothing_is_published(imposition_worker, tenant_id, call):
    queue = get_settings().imposition_queue
    # an earlier test's message still being received or deleted would move the count meanwhile
    wait_for(lambda: queue_messages(queue) == 0, 60, what="the queue to be empty before the call")
    with pytest.raises(SubmissionRequired, match="runs only submitted jobs: pass kwargs tenant_id, token"):
        call(tenant_id)
    assert queue_messages(queue) == 0


def test_a_message_naming_a_missing_job_ends_in_the_dead_letter_queue_as_no_such_job(imposition_worker, tenant_id):
    settings = get_settings()
    dlq = settings.dead_letter_queue(settings.imposition_queue)
    expected = queue_messages(dlq) + 1
    job_id = f"ghost-{uuid.uuid4().hex[:8]}"
    # what a bare Celery publish used to send: a job message with no job item behind it
    super(type(impose), impose).apply_async(kwargs={"tenant_id": tenant_id, "job_id": job_id}, task_id=job_id,
                                            queue=settings.imposition_queue,
                                            MessageGroupId=message_group_id(tenant_id))
    wait_for(lambda: queue_messages(dlq) == expected, 90, what="the message to reach the dead-letter queue")
    assert queue_messages(settings.imposition_queue) == 0
    log = imposition_worker.log()
    assert f"job {job_id} does not exist" in log and "(no_such_job)" in log
    assert f"dropping duplicate delivery of job {job_id}" not in log
