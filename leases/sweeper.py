"""Reclaiming expired leases (DESIGN §4): the core of the sweeper, with ``now`` as an argument.

For each lease whose ``expires_at`` is in the past (found through the expiry index, never a scan):

1. read the job; if it still has attempts left, **re-publish** its message first (so recovery
   never depends on an old message still existing), else it will be failed;
2. one transaction, fenced by the lease's token and its expiry: delete the lease (condition: same
   token, still expired), ``in_flight − 1``, and the job ``running → queued`` (or ``failed`` when out
   of attempts).

Two sweepers at once are safe: both may publish, but only one reclaim transaction succeeds (the
other finds the lease gone and counts nothing); the spare message finds the job not ``queued``, or
runs it as its next attempt, never alongside another run. A renewal that lands between the query
and the transaction makes the transaction fail (not expired any more), and the lease stays.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from leases.models import LEASE_EXPIRY_PARTITION, JobItem, JobStatus, LeaseItem, TenantItem
from leases.transactions import CONDITION_FAILED, raise_if_retryable, tx_connection, with_conflict_retries

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What one sweep did, per tenant: leases reclaimed, jobs re-queued, jobs failed."""

    reclaimed: Counter = field(default_factory=Counter)
    requeued: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)
    lost_races: int = 0

    @property
    def total(self) -> int:
        """Leases reclaimed by this sweep."""
        return sum(self.reclaimed.values())


def expired_leases(now: float) -> Iterator[LeaseItem]:
    """Leases with ``expires_at < now``, oldest first, through the expiry index (no table scan)."""
    return LeaseItem.by_expiry.query(LEASE_EXPIRY_PARTITION, LeaseItem.expires_at < now)


def reclaim(lease: LeaseItem, *, now: float, requeue: bool, reason: str) -> bool:
    """Reclaim one expired lease in one transaction; True if this call did it.

    Returns False (and changes nothing) if the lease is gone, carries another token, or was
    renewed after it was read.

    Raises:
        leases.errors.LeaseContention: conflicts outlasted the bounded retries.
    """
    if requeue:
        job_actions = [JobItem.status.set(JobStatus.QUEUED.value), JobItem.lease_token.remove(),
                       JobItem.error.set(reason), JobItem.error_code.set("lease_expired")]
    else:
        job_actions = [JobItem.status.set(JobStatus.FAILED.value), JobItem.lease_token.remove(),
                       JobItem.finished_at.set(now), JobItem.error.set(reason),
                       JobItem.error_code.set("lease_expired")]

    def attempt() -> bool:
        try:
            with TransactWrite(connection=tx_connection()) as tx:
                tx.delete(
                    LeaseItem(lease.job_id),
                    condition=(LeaseItem.token == lease.token) & (LeaseItem.expires_at < now),
                )
                tx.update(TenantItem(lease.tenant_id), actions=[TenantItem.in_flight.add(-1)])
                tx.update(
                    JobItem(lease.job_id),
                    actions=job_actions,
                    condition=(JobItem.lease_token == lease.token) & (JobItem.status == JobStatus.RUNNING.value),
                )
        except TransactWriteError as exc:
            codes = raise_if_retryable(exc)
            if CONDITION_FAILED in codes:
                return False
            raise
        return True

    return with_conflict_retries(attempt, what=f"reclaim lease of job {lease.job_id}")


def sweep(
    now: float,
    *,
    publish: Callable[[str, str], None],
    on_reclaimed: Callable[[LeaseItem, bool], None] | None = None,
) -> SweepReport:
    """Reclaim every lease expired at ``now`` (epoch seconds).

    Args:
        now: the sweep's notion of the current time.
        publish: ``publish(tenant_id, job_id)`` re-publishes a job's message (with its group id).
        on_reclaimed: called as ``on_reclaimed(lease, requeued)`` after each reclaim this sweep did.

    Returns:
        A :class:`SweepReport`.
    """
    report = SweepReport()
    for lease in expired_leases(now):
        try:
            job = JobItem.get(lease.job_id, consistent_read=True)
        except DoesNotExist:
            job = None
        requeue = job is not None and int(job.attempts) < int(job.max_attempts)
        holder = f"worker {lease.worker} stopped renewing its lease (expired at {lease.expires_at:.0f})"
        if requeue:
            publish(lease.tenant_id, lease.job_id)
            reason = f"{holder}; re-queued"
        else:
            reason = f"{holder}; out of attempts ({job.attempts if job else '?'}/{job.max_attempts if job else '?'})"
        if not reclaim(lease, now=now, requeue=requeue, reason=reason):
            report.lost_races += 1
            continue
        report.reclaimed[lease.tenant_id] += 1
        (report.requeued if requeue else report.failed)[lease.tenant_id] += 1
        log.warning("reclaimed lease of job %s (tenant %s): %s", lease.job_id, lease.tenant_id, reason)
        if on_reclaimed is not None:
            on_reclaimed(lease, requeue)
    return report
