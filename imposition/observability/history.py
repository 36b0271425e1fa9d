"""Reading job items back for reports, and the wait arithmetic both reports share.

Jobs are read per tenant through the ``by-tenant`` index (partition ``tenant_id``, sort
``submitted_at``), never by a table scan; the tenants come from the tenants table, which has one
item per tenant.

A job's **queue wait** is ``started_at − submitted_at`` of its first attempt (docs/design.md §8), from the
job item. The item keeps only the latest attempt's ``started_at``; for a job that was retried (or
recovered by the sweeper) that start also holds the earlier runs and the retry backoff, so its wait
is taken up to its first receive by a worker (``first_received_at``), a lower bound that is exact
when the first receive led straight to the first start. A job still ``queued`` has waited
``now − submitted_at`` so far.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Protocol

from leases.models import JobItem, JobStatus, TenantItem


class JobTimes(Protocol):
    """What the reports read of a job (a :class:`leases.models.JobItem` has all of it); read only."""

    @property
    def tenant_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def attempts(self) -> float: ...
    @property
    def submitted_at(self) -> float: ...
    @property
    def first_received_at(self) -> float | None: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def finished_at(self) -> float | None: ...


def tenant_ids() -> list[str]:
    """Every tenant known to the tenants table, sorted."""
    return sorted(item.tenant_id for item in TenantItem.scan(attributes_to_get=["tenant_id"]))


def jobs_submitted(tenant_id: str, start_at: float, end_at: float) -> Iterator[JobItem]:
    """``tenant_id``'s jobs with ``start_at <= submitted_at < end_at`` (epoch s), oldest first."""
    return JobItem.by_tenant.query(tenant_id, JobItem.submitted_at.between(start_at, math.nextafter(end_at, -math.inf)))


def wait_s(job: JobTimes, now: float) -> float | None:
    """The job's queue wait in seconds (see module docstring); None if not measurable yet."""
    submitted = float(job.submitted_at)
    if JobStatus(job.status).is_pending and int(job.attempts or 0) == 0:
        return max(0.0, now - submitted)
    if int(job.attempts or 0) <= 1 and job.started_at is not None:
        return max(0.0, float(job.started_at) - submitted)
    if job.first_received_at is not None:
        return max(0.0, float(job.first_received_at) - submitted)
    return None


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0–1) of ``values``, linear between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
