"""Celery results read from the jobs table: ``impose.delay(...)`` returns an :class:`ImpositionResult`.

The job item is the result. Workers write it in their lease transactions; Celery stores nothing
(``task_ignore_result``). :class:`JobTableBackend` (``result_backend = "tasks.results:JobTableBackend"``
in ``celeryconfig``) maps a job to Celery's states:

=============================  ===========  ==================================================
job status                      state        ``.info`` / ``.get()``
=============================  ===========  ==================================================
no such job                     ``PENDING``  ``None``
``queued``, ``waiting``         ``PENDING``  ``{"job_id", "tenant_id", "status", "attempts"}``
``running``                     ``STARTED``  the same
``succeeded``                   ``SUCCESS``  ``{"job_id", "plate_key", "sheets", "sides",
                                             "warnings": [{"code", "message"}], "preview_keys",
                                             "jdf_key"}`` (None: the engine wrote no JDF)
``failed``                      ``FAILURE``  the job's typed error, raised by ``.get()``
``failed``, code ``cancelled``  ``REVOKED``  :class:`celery.exceptions.TaskRevokedError`
``failed``, code                ``FAILURE``  :class:`SubmissionRequired`: the message was sent
``submission_required``                      by name (``send_task``), never submitted
=============================  ===========  ==================================================

A failed job's error is rebuilt from its ``error_code``: the engine's class
(:data:`imposition.engine.errors.ERRORS_BY_CODE`, e.g. :class:`~imposition.engine.errors.DamagedPdf`)
or, for the service's own codes (``input_missing``, ``attempts_exhausted``, …), :class:`JobFailed`.
Both carry ``code`` and the message recorded on the job.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from celery import states
from celery.backends.base import BaseBackend
from celery.exceptions import TaskRevokedError
from celery.result import AsyncResult

from imposition.engine.errors import ERRORS_BY_CODE
from leases.lifecycle import CANCELLED_CODE, SUBMISSION_REQUIRED_CODE
from leases.models import JobItem, JobStatus

_STATES = {JobStatus.QUEUED: states.PENDING, JobStatus.WAITING: states.PENDING,
           JobStatus.RUNNING: states.STARTED, JobStatus.SUCCEEDED: states.SUCCESS,
           JobStatus.FAILED: states.FAILURE}


class SubmissionRequired(TypeError):
    """``imposition.impose`` was called, or its message published, without submission (no job item,
    no admission, no ``MessageGroupId``). Raised at once by a call of our app that would publish
    such a message (``impose.delay()`` without a token, positional arguments, a canvas callback),
    and by ``AsyncResult.get()`` of a message that reached a worker anyway
    (``app.send_task("imposition.impose", kwargs=...)``): the message says how to submit.

    Attributes:
        code: ``submission_required`` (as ``imposition job show`` prints it).
    """

    code = SUBMISSION_REQUIRED_CODE


class JobFailed(Exception):
    """A job that failed for a reason of the service's, not of the engine's.

    Attributes:
        code: the job's ``error_code`` (stable, as ``imposition job show`` prints it).
        message: the job's ``error``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def job_error(job: JobItem) -> BaseException:
    """The typed error of a failed job (see the module docstring)."""
    code, message = job.error_code or "failed", job.error or "the job failed"
    if code == CANCELLED_CODE:
        return TaskRevokedError(f"job {job.job_id} was cancelled: {message}")
    if code == SUBMISSION_REQUIRED_CODE:
        return SubmissionRequired(message)
    cls = ERRORS_BY_CODE.get(code)
    return cls(message) if cls is not None else JobFailed(code, message)


def job_meta(job: JobItem | None, task_id: str) -> dict[str, Any]:
    """Celery's task meta of a job item (``None``: no such job)."""
    if job is None:
        return {"task_id": task_id, "status": states.PENDING, "result": None}
    status = JobStatus(job.status)
    if status is JobStatus.SUCCEEDED:
        result: Any = {"job_id": job.job_id, "plate_key": job.output_key, "sheets": job.sheets,
                       "sides": job.sides, "warnings": list(job.warnings or []),
                       "preview_keys": list(job.preview_keys or []), "jdf_key": job.jdf_key}
    elif status is JobStatus.FAILED:
        result = job_error(job)
    else:
        result = {"job_id": job.job_id, "tenant_id": job.tenant_id, "status": job.status,
                  "attempts": int(job.attempts)}
    state = _STATES[status]
    if isinstance(result, TaskRevokedError):
        state = states.REVOKED
    done = None if job.finished_at is None else datetime.fromtimestamp(float(job.finished_at), tz=timezone.utc)
    return {"task_id": task_id, "status": state, "result": result, "traceback": None, "children": [],
            "date_done": done.isoformat() if done else None}


class JobTableBackend(BaseBackend):
    """A read-only result backend: one strongly consistent ``GetItem`` on the jobs table per poll.

    ``AsyncResult.get(timeout=..., interval=...)`` polls every ``interval`` seconds (Celery's default
    0.5 s). Storing is a no-op: the job item is written by the lease transactions.
    """

    persistent = True

    def __init__(self, app: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, url=url, **kwargs)

    def _get_task_meta_for(self, task_id: str) -> dict[str, Any]:
        try:
            job = JobItem.get(task_id, consistent_read=True)
        except JobItem.DoesNotExist:
            job = None
        return job_meta(job, task_id)

    def meta_from_decoded(self, meta: dict[str, Any]) -> dict[str, Any]:
        return meta  # errors are already exceptions (job_error)

    def _store_result(self, task_id: str, result: Any, state: str, traceback: Any = None,
                      request: Any = None, **kwargs: Any) -> Any:
        return result

    def _forget(self, task_id: str) -> None:
        """Nothing to forget: the job item stays until its retention ends."""

    def as_uri(self, include_password: bool = False) -> str:
        return "jobs-table://"


class ImpositionResult(AsyncResult):
    """The :class:`~celery.result.AsyncResult` of a submitted job; ``revoke()`` cancels it."""

    def revoke(self, connection: Any = None, terminate: bool = False, signal: Any = None,
               wait: bool = False, timeout: float | None = None) -> None:
        """Cancel the job: :func:`tasks.jobs.cancel` (it ends ``failed``, code ``cancelled``).

        Raises:
            leases.errors.WrongJobStatus: the job is running or final; nothing changed. A running
                job is never interrupted (``terminate`` is refused the same way).
            pynamodb.exceptions.DoesNotExist: no such job.
        """
        from .jobs import cancel  # noqa: PLC0415 - tasks.jobs imports the app's task modules

        cancel(self.id)
