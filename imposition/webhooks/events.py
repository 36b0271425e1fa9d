"""The JSON event a tenant receives when one of its jobs finishes.

Shape (times are epoch seconds, float; absent values are ``null``)::

    {"id": "evt_<job id>", "type": "job.succeeded" | "job.failed", "job_id", "tenant_id",
     "status": "succeeded" | "failed", "output_key", "error", "error_code", "attempts",
     "sheets", "sides", "warnings", "preview_keys", "jdf_key", "submitted_at", "started_at", "finished_at"}

``warnings`` lists the engine's typed warnings of a succeeded job, ``[{"code", "message"}, …]``
(empty when the plate is what the layout asked; ``[]`` for a failed job); ``preview_keys`` the S3
keys of its PNG previews, one per side (``[]`` for a failed job or when there are none); ``jdf_key``
the S3 key of its plate's JDF Layout (``null`` for a failed job or an engine that writes none).

A job run finishes once, so its event id is derived from the job id (and the operator retry it
ends, if any): every delivery round of the same event carries the same id (the tenant deduplicates
on it), and a retried job's new end is a new event. The event holds no secret; it is built
from the job item only.
"""

from __future__ import annotations

import json
from typing import Any

from leases.models import JobItem, JobStatus


def event_id(job_id: str, retries: int = 0) -> str:
    """The id of the event that reports ``job_id``'s end: ``evt_<job id>``, and ``evt_<job id>_r<n>``
    for the end of its ``n``-th operator retry (``JobItem.retries``), which is a new event."""
    return f"evt_{job_id}" if not retries else f"evt_{job_id}_r{int(retries)}"


def _number(value: Any) -> float | int | None:
    if value is None:
        return None
    number = float(value)
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def job_event(job: JobItem) -> dict[str, Any]:
    """The event of a finished job item.

    Raises:
        ValueError: the job is not ``succeeded`` or ``failed``.
    """
    if not job.job_status.is_final:
        raise ValueError(f"job {job.job_id}: status={job.status!r} is not final; no event to send")
    return {
        "id": event_id(job.job_id, int(job.retries or 0)),
        "type": f"job.{job.status}",
        "job_id": job.job_id,
        "tenant_id": job.tenant_id,
        "status": job.status,
        "output_key": job.output_key if job.status == JobStatus.SUCCEEDED.value else None,
        "error": job.error if job.status == JobStatus.FAILED.value else None,
        "error_code": job.error_code if job.status == JobStatus.FAILED.value else None,
        "attempts": _number(job.attempts),
        "sheets": _number(job.sheets),
        "sides": _number(job.sides),
        "warnings": list(job.warnings or []) if job.status == JobStatus.SUCCEEDED.value else [],
        "preview_keys": list(job.preview_keys or []) if job.status == JobStatus.SUCCEEDED.value else [],
        "jdf_key": job.jdf_key if job.status == JobStatus.SUCCEEDED.value else None,
        "submitted_at": _number(job.submitted_at),
        "started_at": _number(job.started_at),
        "finished_at": _number(job.finished_at),
    }


def encode(event: dict[str, Any]) -> bytes:
    """The request body of ``event``: compact JSON, keys sorted (the bytes that get signed)."""
    return json.dumps(event, sort_keys=True, separators=(",", ":")).encode()
