"""Reclaiming expired leases (DESIGN §4): the core of the sweeper, with ``now`` as an argument.

For each lease whose ``expires_at`` is in the past (found through the expiry index, never a scan):

1. read the job; if it still has attempts left, **re-publish** its message first (so recovery
   never depends on an old message still existing), else it will be failed. The copy says which
   attempt it follows, so if it arrives before step 2 commits it is deferred, not dropped;
2. one transaction, fenced by the lease's token and its expiry: delete the lease (condition: same
   token, still expired), ``in_flight − 1``, and the job ``running → queued`` (or ``failed`` when out
   of attempts). The attempt the dead holder started stays counted: a job that kills its worker
   ``max_attempts`` times ends ``failed``.

Two sweepers at once are safe: both may publish, but only one reclaim transaction succeeds (the
other finds the lease gone and counts nothing); the spare message finds the job not ``queued``, or
runs it as its next attempt, never alongside another run. A renewal that lands between the query
and the transaction makes the transaction fail (not expired any more), and the lease stays.

A lease whose job does not run under it (the job is missing, or holds another token or status) is
an **orphan**: it can fence nothing, so it is deleted and its slot given back, on condition the
job still does not run under it. Our transactions never leave one; :mod:`leases.audit` reports how
one came to be (a hand edit, a restored backup).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from leases.models import LEASE_EXPIRY_PARTITION, JobItem, JobStatus, LeaseItem, TenantItem
from leases.transactions import (
    AMBIGUOUS,
    CONDITION_FAILED,
    ERROR,
    RETRY,
    Retryable,
    classify,
    new_token,
    read_lease,
    released_by,
    tx_connection,
    with_conflict_retries,
)

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What one sweep did, per tenant: leases reclaimed, jobs re-queued, jobs failed, orphans removed."""

    reclaimed: Counter = field(default_factory=Counter)
    requeued: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)
    orphans: Counter = field(default_factory=Counter)
    lost_races: int = 0

    @property
    def total(self) -> int:
        """Leases reclaimed by this sweep (orphans included)."""
        return sum(self.reclaimed.values()) + sum(self.orphans.values())


def expired_leases(now: float) -> Iterator[LeaseItem]:
    """Leases with ``expires_at < now``, oldest first, through the expiry index (no table scan)."""
    return LeaseItem.by_expiry.query(LEASE_EXPIRY_PARTITION, LeaseItem.expires_at < now)


def _fenced_delete(lease: LeaseItem, build_job_item: Callable[[TransactWrite, str], None], *,
                   expired_before: float | None, what: str) -> bool:
    """Delete ``lease`` and give its slot back in one transaction with one job item; True if done.

    The lease delete is conditional on its token (and on ``expires_at < expired_before`` when
    given). Each attempt writes its own id into the job's ``release_id`` (through
    ``build_job_item(tx, release_id)``), so an ambiguous attempt is resolved by reading it back.
    """
    release_ids: list[str] = []

    def attempt() -> bool:
        release_id = new_token()
        release_ids.append(release_id)
        condition = LeaseItem.token == lease.token
        if expired_before is not None:
            condition = condition & (LeaseItem.expires_at < expired_before)
        try:
            with TransactWrite(connection=tx_connection(), client_request_token=release_id) as tx:
                tx.delete(LeaseItem(lease.job_id), condition=condition)
                tx.update(TenantItem(lease.tenant_id), actions=[TenantItem.in_flight.add(-1)])
                build_job_item(tx, release_id)
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == ERROR:
                raise
            if kind == AMBIGUOUS:
                if released_by(lease.job_id, release_ids):
                    return True
                held = read_lease(lease.job_id)
                if held is not None and held.token == lease.token:
                    raise Retryable(codes) from exc
                return False
            if CONDITION_FAILED in codes:  # gone, renewed, or taken by an earlier ambiguous try of ours
                return len(release_ids) > 1 and released_by(lease.job_id, release_ids[:-1])
            raise
        return True

    return with_conflict_retries(attempt, what=what)


def reclaim(lease: LeaseItem, *, now: float, requeue: bool, reason: str) -> bool:
    """Reclaim one expired lease in one transaction; True if this call did it.

    Returns False (and changes nothing) if the lease is gone, carries another token, was renewed
    after it was read, or its job no longer runs under it.

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

    def job_item(tx: TransactWrite, release_id: str) -> None:
        tx.update(
            JobItem(lease.job_id),
            actions=[*job_actions, JobItem.release_id.set(release_id)],
            condition=(JobItem.lease_token == lease.token) & (JobItem.status == JobStatus.RUNNING.value),
        )

    return _fenced_delete(lease, job_item, expired_before=now, what=f"reclaim lease of job {lease.job_id}")


def remove_orphan(lease: LeaseItem, *, expired_before: float | None) -> bool:
    """Delete a lease whose job does not run under it and give its slot back; True if done.

    Conditions, in one transaction: the lease still carries its token (and is expired before
    ``expired_before`` when given), and the job is missing or does not run under this token. Safe
    while workers run: a holder of such a lease can commit nothing (commits are fenced on the
    job's ``lease_token``), so removing it takes nothing from anyone.

    Raises:
        leases.errors.LeaseContention: conflicts outlasted the bounded retries.
    """
    not_running_under_it = (
        JobItem.job_id.does_not_exist()
        | JobItem.lease_token.does_not_exist()
        | (JobItem.lease_token != lease.token)
        | (JobItem.status != JobStatus.RUNNING.value)
    )

    def job_item(tx: TransactWrite, release_id: str) -> None:
        tx.condition_check(JobItem, lease.job_id, condition=not_running_under_it)

    return _fenced_delete(lease, job_item, expired_before=expired_before,
                          what=f"remove orphan lease of job {lease.job_id}")


def runs_under(job: JobItem | None, lease: LeaseItem) -> bool:
    """True if ``job`` is ``running`` under ``lease``'s token (the invariant of every lease)."""
    return job is not None and job.status == JobStatus.RUNNING.value and job.lease_token == lease.token


def sweep(
    now: float,
    *,
    publish: Callable[[str, str], None],
    on_reclaimed: Callable[[LeaseItem, bool], None] | None = None,
) -> SweepReport:
    """Reclaim every lease expired at ``now`` (epoch seconds).

    Args:
        now: the sweep's notion of the current time.
        publish: ``publish(tenant_id, job_id, after_attempt=n)`` re-publishes a job's message (with
            its group id), marked as following attempt ``n`` (the one whose lease is reclaimed).
        on_reclaimed: called as ``on_reclaimed(lease, requeued)`` after each reclaim this sweep did.

    Returns:
        A :class:`SweepReport`.

    Raises:
        leases.errors.LeaseContention, pynamodb/botocore errors: the sweep stops; leases not reached
            are left for the next sweep (every step is idempotent).
    """
    report = SweepReport()
    for lease in expired_leases(now):
        try:
            job = JobItem.get(lease.job_id, consistent_read=True)
        except DoesNotExist:
            job = None
        if not runs_under(job, lease):
            if remove_orphan(lease, expired_before=now):
                report.orphans[lease.tenant_id] += 1
                log.error("removed orphan lease of job %s (tenant %s): its job does not run under it",
                          lease.job_id, lease.tenant_id)
            else:
                report.lost_races += 1
            continue
        assert job is not None
        requeue = int(job.attempts) < int(job.max_attempts)
        holder = f"worker {lease.worker} stopped renewing its lease (expired at {lease.expires_at:.0f})"
        if requeue:
            publish(lease.tenant_id, lease.job_id, after_attempt=int(job.attempts))
            reason = f"{holder}; re-queued"
        else:
            reason = f"{holder}; out of attempts ({job.attempts}/{job.max_attempts})"
        if not reclaim(lease, now=now, requeue=requeue, reason=reason):
            report.lost_races += 1
            continue
        report.reclaimed[lease.tenant_id] += 1
        (report.requeued if requeue else report.failed)[lease.tenant_id] += 1
        log.warning("reclaimed lease of job %s (tenant %s): %s", lease.job_id, lease.tenant_id, reason)
        if on_reclaimed is not None:
            on_reclaimed(lease, requeue)
    return report
