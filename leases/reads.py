"""Strongly consistent reads of the lease layer's items: a job, a lease, a tenant."""

from __future__ import annotations

from pynamodb.exceptions import DoesNotExist, PynamoDBException

from leases.dynamo import Retryable, error_code, with_conflict_retries
from leases.models import JobItem, LeaseItem, TenantItem


def read_lease(job_id: str) -> LeaseItem | None:
    """The lease item of ``job_id`` (strongly consistent read), or None."""
    try:
        return LeaseItem.get(job_id, consistent_read=True)
    except DoesNotExist:
        return None


def read_job(job_id: str) -> JobItem:
    """The job item (strongly consistent), with bounded in-place retries of any failure but absence.

    A read changes nothing, so throttling and ambiguous failures alike are simply tried again.

    Raises:
        pynamodb.exceptions.DoesNotExist: no such job.
        leases.errors.LeaseContention: every try failed (the last error is its cause).
    """

    def attempt() -> JobItem:
        try:
            return JobItem.get(job_id, consistent_read=True)
        except DoesNotExist:
            raise
        except PynamoDBException as exc:
            raise Retryable((error_code(exc) or type(exc.cause).__name__,)) from exc

    return with_conflict_retries(attempt, what=f"read job {job_id}")


def read_tenant(tenant_id: str) -> TenantItem | None:
    """The tenant item (strongly consistent), or None."""
    try:
        return TenantItem.get(tenant_id, consistent_read=True)
    except DoesNotExist:
        return None


def job_or_none(job_id: str) -> JobItem | None:
    """The job item (strongly consistent, one try), or None."""
    try:
        return JobItem.get(job_id, consistent_read=True)
    except DoesNotExist:
        return None
