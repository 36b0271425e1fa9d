"""Helpers of the lease-layer tests (imported by test modules, never by a conftest: a conftest is
imported before the session's environment is set, and project modules read settings at import)."""

from __future__ import annotations

import time
import uuid

from leases import transactions, waiting
from leases.models import JobItem

LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


def make_job(tenant_id: str, job_id: str | None = None, *, max_attempts: int = 3) -> str:
    """A ``queued`` job item of ``tenant_id``, counted in its tenants ``queued`` (no message, no input:
    the lease layer needs neither)."""
    job_id = job_id or uuid.uuid4().hex
    transactions.ensure_tenant(tenant_id)
    waiting.admit(JobItem(job_id, tenant_id=tenant_id, token=f"tok-{job_id}", max_attempts=max_attempts,
                          layout=LAYOUT, input_key=f"tenants/{tenant_id}/jobs/{job_id}/input.pdf",
                          submitted_at=time.time()), door=False)
    return job_id
