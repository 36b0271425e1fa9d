"""Strongly consistent reads of the lease layer's items: a job, a lease, a tenant."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pynamodb.exceptions import DoesNotExist, PynamoDBException

from leases.dynamo import Retryable, error_code, with_conflict_retries
from leases.models import JobItem, LeaseItem, TenantItem

T = TypeVar("T")


def _with_read_retries(get: Callable[[], T], *, what: str) -> T:
    """``get()`` with bounded in-place retries of any failure but absence (:class:`DoesNotExist`,
    raised at once). A read changes nothing, so throttling and 5xx answers alike are tried again.

    Raises:
        pynamodb.exceptions.DoesNotExist: no such item.
        leases.errors.LeaseContention: every try failed (the last error is its cause).
    """

    def attempt() -> T:
        try:
            return get()
        except DoesNotExist:
            raise
        except PynamoDBException as exc:
            raise Retryable((error_code(exc) or type(exc.cause).__name__,)) from exc

    return with_conflict_retries(attempt, what=what)


def read_lease(job_id: str, *, retried: bool = False) -> LeaseItem | None:
    """The lease item of ``job_id`` (strongly consistent read), or None. With ``retried``, failures
    are tried again in place as :func:`read_job`'s (a release's read-back after an ambiguous write:
    a blip that failed the write must not end the attempt by failing its read-back too)."""
    try:
        if retried:
            return _with_read_retries(lambda: LeaseItem.get(job_id, consistent_read=True), what=f"read lease {job_id}")
        return LeaseItem.get(job_id, consistent_read=True)
    except DoesNotExist:
        return None


def read_job(job_id: str) -> JobItem:
    """The job item (strongly consistent), with bounded in-place retries of any failure but absence.

    Raises:
        pynamodb.exceptions.DoesNotExist: no such job.
        leases.errors.LeaseContention: every try failed (the last error is its cause).
    """
    return _with_read_retries(lambda: JobItem.get(job_id, consistent_read=True), what=f"read job {job_id}")


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
