"""Celery's own doors to ``imposition.impose``, used the way a Celery user would, on a real worker:
a job is submitted properly or refused with a clear error, never published bare and dropped; its
``AsyncResult`` reads the job (state, ``get``, ``revoke``)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from celery import states
from celery.exceptions import TaskRevokedError
from celery.exceptions import TimeoutError as CeleryTimeout

from imposition.engine.errors import DamagedPdf, NotAPdf
from leases.errors import WrongJobStatus
from leases.models import JobItem
from leases.tenants import set_cap
from imposition.common import aws
from imposition.common.settings import get_settings
from imposition.common.tenancy import input_key, message_group_id
from tasks import app
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


def _uploaded(tenant_id: str, name: str = "a5_8p.pdf") -> str:
    key = input_key(tenant_id, uuid.uuid4().hex)
    aws.s3().upload_file(str(CASES / name), get_settings().bucket, key)
    return key


def test_delay_returns_a_result_whose_get_gives_the_plate(imposition_worker, tenant_id):
    r = impose.delay(tenant_id=tenant_id, token="get-plate", input_key=_uploaded(tenant_id), layout=LAYOUT)
    plate = r.get(timeout=60)
    assert plate["plate_key"] == f"tenants/{tenant_id}/jobs/{r.id}/plate.pdf"
    assert (plate["sheets"], plate["sides"], plate["warnings"]) == (2, 4, [])
    assert (r.state, r.ready(), r.successful(), r.info) == (states.SUCCESS, True, True, plate)
    assert r.date_done.tzinfo is not None and abs(r.date_done.timestamp() - JobItem.get(r.id).finished_at) < 1e-3
    body = aws.s3().get_object(Bucket=get_settings().bucket, Key=plate["plate_key"])["Body"].read()
    assert body.startswith(b"%PDF")


def test_get_raises_the_jobs_typed_error(imposition_worker, tenant_id):
    r = impose.delay(tenant_id=tenant_id, token="get-error", input_key=_uploaded(tenant_id, "not_a_pdf.pdf"),
                     layout=LAYOUT)
    with pytest.raises(NotAPdf) as raised:
        r.get(timeout=60)
    assert raised.value.code == "not_a_pdf"
    assert (r.state, r.ready(), r.successful()) == (states.FAILURE, True, False)
    assert isinstance(r.info, NotAPdf)
    assert r.get(propagate=False) is r.info


def test_get_raises_damaged_for_a_pdf_cut_in_half(imposition_worker, tenant_id):
    data = (CASES / "a5_8p.pdf").read_bytes()
    key = input_key(tenant_id, uuid.uuid4().hex)
    aws.s3().put_object(Bucket=get_settings().bucket, Key=key, Body=data[: len(data) // 2])
    r = impose.delay(tenant_id=tenant_id, token="get-damaged", input_key=key, layout=LAYOUT,
                     file_name="brochure.pdf")
    with pytest.raises(DamagedPdf, match=r"^brochure\.pdf: .*cannot be read") as raised:
        r.get(timeout=60)
    assert (raised.value.code, r.state) == ("damaged", states.FAILURE)


def test_revoke_cancels_a_waiting_job_and_refuses_a_finished_one(imposition_worker, tenant_id):
    set_cap(tenant_id, 0)  # paused: the job parks and stays waiting
    r = impose.delay(tenant_id=tenant_id, token="revoke", input_key=_uploaded(tenant_id), layout=LAYOUT)
    wait_for(lambda: JobItem.get(r.id, consistent_read=True).status == "waiting", 30, what="the job to park")
    assert (r.state, r.ready(), r.info["status"]) == (states.PENDING, False, "waiting")
    with pytest.raises(CeleryTimeout):
        r.get(timeout=0.5, interval=0.1)
    r.revoke()
    assert r.state == states.REVOKED
    with pytest.raises(TaskRevokedError, match="cancelled"):
        r.get(timeout=5)
    with pytest.raises(WrongJobStatus):
        app.AsyncResult(r.id).revoke()  # already final: refused, nothing changed
    assert JobItem.get(r.id, consistent_read=True).error_code == "cancelled"


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


@pytest.mark.parametrize("named", ["submission kwargs", "positional args"])
def test_send_task_by_name_ends_in_a_typed_failure_and_nothing_reaches_the_dead_letter_queue(
        imposition_worker, tenant_id, named):
    """Celery's usual call between services skips every task code of ours: the worker records the
    message as a failed job under its task id, so the caller's result ends (issue 42, §3)."""
    from leases.errors import NeverSubmitted
    from leases.lifecycle import NO_TENANT
    from tasks.jobs import retry

    settings = get_settings()
    queue, dlq = settings.imposition_queue, settings.dead_letter_queue(settings.imposition_queue)
    wait_for(lambda: queue_messages(queue) == 0, 60, what="the queue to be empty before the call")
    dead_before = queue_messages(dlq)
    key = _uploaded(tenant_id)
    fields = {"tenant_id": tenant_id, "token": "by-name", "input_key": key, "layout": LAYOUT}
    if named == "submission kwargs":
        result = app.send_task("imposition.impose", kwargs=fields)
    else:
        result = app.send_task("imposition.impose", args=list(fields.values()))
    with pytest.raises(SubmissionRequired, match=r"called by name .* Submit with imposition\.client\.submit") as raised:
        result.get(timeout=60, interval=0.2)
    assert raised.value.code == "submission_required"
    assert (result.state, result.ready(), result.successful()) == (states.FAILURE, True, False)
    record = JobItem.get(result.id, consistent_read=True)
    assert (record.status, record.error_code, record.attempts, record.started_at) == (
        "failed", "submission_required", 0, None)
    if named == "submission kwargs":  # what it named, for the operator's `jobs list --token by-name`
        assert (record.tenant_id, record.token, record.input_key) == (tenant_id, "by-name", key)
    else:
        assert (record.tenant_id, record.token, record.input_key) == (NO_TENANT, result.id, "")
    with pytest.raises(NeverSubmitted, match="never submitted"):
        retry(result.id)  # nothing to retry: it was never a job
    # acked, not dead-lettered: the queue drains and the DLQ stays as it was
    wait_for(lambda: queue_messages(queue) == 0, 60, what="the message to be acked")
    assert queue_messages(dlq) == dead_before
    plate = aws.s3().list_objects_v2(Bucket=settings.bucket, Prefix=f"tenants/{tenant_id}/jobs/{result.id}/")
    assert plate.get("KeyCount", 0) == 0  # nothing ran
    assert "recorded as failed (submission_required)" in imposition_worker.log()
