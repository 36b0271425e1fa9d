"""Helpers of the lease-layer tests (imported by test modules, never by a conftest: a conftest is
imported before the session's environment is set, and project modules read settings at import)."""

from __future__ import annotations

import time
import uuid

from imposition.admission.claims import token_claim
from imposition.common.settings import get_settings
from leases import transactions, waiting, tenants
from leases.models import JobItem, TenantItem

LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


def claim_of(job: JobItem) -> waiting.Claim:
    """The claim of ``job``'s token as a submission makes it (the default idempotency TTL), for
    :func:`leases.waiting.admit` and :func:`leases.waiting.withdraw`."""
    return token_claim(job, ttl_s=get_settings().idempotency_ttl_s)


def make_job(tenant_id: str, job_id: str | None = None, *, max_attempts: int = 3) -> str:
    """A ``queued`` job item of ``tenant_id``, counted in its tenants ``queued`` (no message, no input:
    the lease layer needs neither)."""
    tenants.ensure_tenant(tenant_id)
    job = new_job(tenant_id, max_attempts=max_attempts, job_id=job_id)
    waiting.admit(job, claim_of(job), door=False)
    return job.job_id


def new_job(tenant_id: str, *, max_attempts: int = 3, job_id: str | None = None) -> JobItem:
    """A job item of ``tenant_id``, not yet written (for :func:`leases.waiting.admit`)."""
    job_id = job_id or uuid.uuid4().hex
    return JobItem(job_id, tenant_id=tenant_id, token=f"tok-{job_id}", max_attempts=max_attempts, layout=LAYOUT,
                   input_key=f"tenants/{tenant_id}/jobs/{job_id}/input.pdf", submitted_at=time.time())


def running(tenant_id: str, n: int, worker: str = "w") -> list[transactions.Lease]:
    """``n`` jobs of ``tenant_id`` admitted and acquired (the tenant must have room for them)."""
    leases = []
    for _ in range(n):
        job = new_job(tenant_id)
        waiting.admit(job, claim_of(job), door=False)
        leases.append(transactions.acquire(job.job_id, tenant_id, worker))
    return leases


def parked(tenant_id: str, n: int) -> list[str]:
    """``n`` jobs of ``tenant_id`` parked at the door (the tenant must have no room), oldest first."""
    ids = []
    for _ in range(n):
        job = new_job(tenant_id)
        assert waiting.admit(job, claim_of(job)) is False, "the door queued it: the tenant had room"
        ids.append(job.job_id)
    return ids


def counters(tenant_id: str) -> dict[str, int]:
    """The tenant's counters (strongly consistent), absent ones as 0."""
    item = TenantItem.get(tenant_id, consistent_read=True)
    return {k: int(getattr(item, k) or 0) for k in ("in_flight", "queued", "waiting", "occupied")}


def statuses(job_ids: list[str]) -> list[str]:
    """The jobs' statuses (strongly consistent), in the order given."""
    found = {j.job_id: j.status for j in JobItem.batch_get(job_ids, consistent_read=True)}
    return [found.get(j, "missing") for j in job_ids]
