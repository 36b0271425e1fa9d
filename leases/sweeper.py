"""Reclaiming expired leases (docs/design.md §4): the core of the sweeper, with ``now`` as an argument.

:func:`sweep` lists the leases whose ``expires_at`` is in the past (through the expiry index, never
a scan), reads the nodes' clock skews, then :func:`expire` judges each lease:

1. read the job; if it still has attempts left (``JobItem.attempts_left``), **re-publish** its
   message first (so recovery never depends on an old message still existing), else it will be
   failed. The copy says which attempt it follows, so if it arrives before step 2 commits it is
   deferred, not dropped;
2. one transaction, fenced by the lease's token and its expiry: delete the lease (condition: same
   token, still expired), ``in_flight − 1``, and the job ``running → queued`` (or ``failed`` when out
   of attempts).

The holder's attempt stays counted (``holder_vanished`` in ``JobItem.lost_attempts``) unless the
holder reported it ``infra_lost``; a job that would be failed waits for that report until
``Clocks.infra_report_grace_s`` past its lease's expiry. Then :func:`bring_back`, the reconciler:
drop worker nodes that stopped beating, wake the waiting jobs of every tenant with room, re-publish
queued jobs that no message could still bring (``Clocks.lost_message_after_s``). A lease whose job
does not run under it is an **orphan**, removed by :func:`remove_orphan`. Two sweepers at once are
safe. Why: docs/design.md §4, "Attempts count what the job caused", "The reconciler".
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pynamodb.exceptions import UpdateError

from leases import nodes, outbox, skew, waiting
from leases.models import (
    LEASE_EXPIRY_PARTITION, PENDING_PARTITION, JobItem, JobStatus, LeaseItem, TenantItem, lost_attempt_entry,
)
from leases.dynamo import NamedTransaction
from leases.reads import job_or_none
from leases.transactions import fenced_release, requeue_actions
from imposition.common.clocks import get_clocks

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What one sweep did, per tenant: leases reclaimed, jobs re-queued, jobs failed, orphans removed."""

    reclaimed: Counter = field(default_factory=Counter)
    requeued: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)
    orphans: Counter = field(default_factory=Counter)
    lost_races: int = 0
    #: Waiting jobs woken by the safety net (a lost hand-off), queued jobs re-published (lost message).
    woken: Counter = field(default_factory=Counter)
    republished: Counter = field(default_factory=Counter)
    #: Leases of jobs out of attempts left for a later sweep: their holder may still report them
    #: ``infra_lost`` (``Clocks.infra_report_grace_s``).
    held_for_report: int = 0
    #: Worker nodes that stopped beating, dropped from the slot registry.
    nodes_dropped: list = field(default_factory=list)
    #: Leases expired by this sweeper's clock but not by their node's (leases/skew.py): not reclaimed.
    held_for_skew: int = 0

    @property
    def total(self) -> int:
        """Leases reclaimed by this sweep (orphans included)."""
        return sum(self.reclaimed.values()) + sum(self.orphans.values())


def expired_leases(now: float) -> Iterator[LeaseItem]:
    """Leases with ``expires_at < now``, oldest first, through the expiry index (no table scan)."""
    return LeaseItem.by_expiry.query(LEASE_EXPIRY_PARTITION, LeaseItem.expires_at < now)


def reclaim(lease: LeaseItem, *, now: float, requeue: bool, reason: str, vanished: dict | None = None) -> bool:
    """Reclaim one expired lease in one transaction; True if this call did it. ``vanished``: an
    entry appended to the job's ``lost_attempts`` (the holder reported nothing).

    Returns False (and changes nothing) if the lease is gone, carries another token, was renewed
    after it was read, or its job no longer runs under it.

    Raises:
        leases.errors.LeaseContention: conflicts outlasted the bounded retries.
    """
    if requeue:
        job_actions = [*requeue_actions(lease.tenant_id, now), JobItem.error.set(reason),
                       JobItem.error_code.set("lease_expired")]
    else:
        job_actions = [JobItem.status.set(JobStatus.FAILED.value), JobItem.lease_token.remove(),
                       JobItem.finished_at.set(now), JobItem.error.set(reason),
                       JobItem.error_code.set("lease_expired"), *outbox.intent_actions(now)]
    if vanished is not None:
        job_actions.append(JobItem.lost_attempts.set((JobItem.lost_attempts | []).append([vanished])))

    def job_item(tx: NamedTransaction, release_id: str) -> None:
        tx.add("update", "job", JobItem(lease.job_id),
               actions=[*job_actions, JobItem.release_id.set(release_id)],
               condition=(JobItem.lease_token == lease.token) & (JobItem.status == JobStatus.RUNNING.value))

    return fenced_release(lease.job_id, lease.tenant_id, lease.token, job_item, requeue=requeue,
                          expired_before=now, what=f"reclaim lease of job {lease.job_id}") is not None


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

    def job_item(tx: NamedTransaction, release_id: str) -> None:
        tx.add("condition_check", "job", JobItem, lease.job_id, condition=not_running_under_it)

    return fenced_release(lease.job_id, lease.tenant_id, lease.token, job_item, expired_before=expired_before,
                          what=f"remove orphan lease of job {lease.job_id}") is not None


def runs_under(job: JobItem | None, lease: LeaseItem) -> bool:
    """True if ``job`` is ``running`` under ``lease``'s token (the invariant of every lease)."""
    return job is not None and job.status == JobStatus.RUNNING.value and job.lease_token == lease.token


def sweep(
    now: float,
    *,
    publish: Callable[..., None],
    on_reclaimed: Callable[[LeaseItem, bool], None] | None = None,
    on_woken: Callable[[JobItem], None] | None = None,
    on_republished: Callable[[JobItem], None] | None = None,
    backlog: Callable[[], int] | None = None,
) -> SweepReport:
    """Reclaim every lease expired at ``now`` (epoch seconds), then bring back what waits.

    The steps: list the expired leases; read the nodes' clock skews (:func:`leases.skew.refresh`,
    after the listing: a node registers its clock before it takes a job, tasks/nodes.py, so every
    lease listed has its node's reading); expire each lease (:func:`expire`); then
    :func:`bring_back`.

    Args:
        now: the sweep's notion of the current time.
        publish: ``publish(tenant_id, job_id, after_attempt=n)`` re-publishes a job's message (with
            its group id), marked as following attempt ``n`` (the one whose lease is reclaimed).
        on_reclaimed: called as ``on_reclaimed(lease, requeued)`` after each reclaim this sweep did.
        on_woken, on_republished: called with the job after each wake / re-publish of
            :func:`bring_back`, which runs after the reclaims.
        backlog: ``backlog()`` → visible messages in the work queue (see :func:`bring_back`).

    Returns:
        A :class:`SweepReport`.

    Raises:
        leases.errors.LeaseContention, pynamodb/botocore errors: the sweep stops; leases not reached
            are left for the next sweep (every step is idempotent).
    """
    report = SweepReport()
    expired = list(expired_leases(now))
    skew.refresh(now)
    for lease in expired:
        expire(lease, now=now, publish=publish, report=report, on_reclaimed=on_reclaimed)
    bring_back(now, publish=publish, report=report, on_woken=on_woken, on_republished=on_republished,
               backlog=backlog)
    return report


def expire(lease: LeaseItem, *, now: float, publish: Callable[..., None], report: SweepReport,
           on_reclaimed: Callable[[LeaseItem, bool], None] | None = None) -> None:
    """One lease expired by this sweeper's clock at ``now``, judged and counted in ``report``: held
    (alive by its node's clock: :func:`leases.skew.held_by_skew`), removed as an orphan (its job
    does not run under it), held for its holder's report (out of attempts, within
    ``Clocks.infra_report_grace_s``), or reclaimed (:func:`_reclaim_dead_holder`)."""
    if skew.held_by_skew(float(lease.expires_at), lease.worker, now):
        report.held_for_skew += 1
        return
    job = job_or_none(lease.job_id)
    if job is None or not runs_under(job, lease):
        _sweep_orphan(lease, now=now, report=report)
        return
    if not job.attempts_left and float(lease.expires_at) > now - get_clocks().infra_report_grace_s:
        report.held_for_report += 1  # its holder may still report the attempt infra_lost
        return
    _reclaim_dead_holder(lease, job, now=now, publish=publish, report=report, on_reclaimed=on_reclaimed)


def _sweep_orphan(lease: LeaseItem, *, now: float, report: SweepReport) -> None:
    if remove_orphan(lease, expired_before=now):
        report.orphans[lease.tenant_id] += 1
        log.error("removed orphan lease of job %s (tenant %s): its job does not run under it",
                  lease.job_id, lease.tenant_id)
    else:
        report.lost_races += 1


def _reclaim_dead_holder(lease: LeaseItem, job: JobItem, *, now: float, publish: Callable[..., None],
                        report: SweepReport, on_reclaimed: Callable[[LeaseItem, bool], None] | None = None) -> None:
    """Reclaim the expired ``lease`` of ``job`` (running under it): re-publish the job first if it
    has attempts left, then :func:`reclaim`; the holder's attempt stays charged
    (``holder_vanished``) unless it reported it ``infra_lost``. Counted in ``report``."""
    requeue = job.attempts_left
    holder = f"worker {lease.worker} stopped renewing its lease (expired at {lease.expires_at:.0f})"
    reported = int(job.attempts) in {int(a) for a in (job.infra_lost_attempts or ())}
    vanished = None if reported else lost_attempt_entry(int(job.attempts), "holder_vanished", holder, now,
                                                        token=lease.token)
    if requeue:
        publish(lease.tenant_id, lease.job_id, after_attempt=int(job.attempts))
        reason = f"{holder}; re-queued"
    else:
        reason = f"{holder}; out of attempts ({job.attempts}/{job.max_attempts})"
    if not reclaim(lease, now=now, requeue=requeue, reason=reason, vanished=vanished):
        report.lost_races += 1
        return
    report.reclaimed[lease.tenant_id] += 1
    (report.requeued if requeue else report.failed)[lease.tenant_id] += 1
    log.warning("reclaimed lease of job %s (tenant %s): %s", lease.job_id, lease.tenant_id, reason)
    if on_reclaimed is not None:
        on_reclaimed(lease, requeue)


def _unmark_pending(tenant_id: str) -> None:
    """Drop a tenant from the pending index, on condition it still has no queued or waiting job."""
    idle = ((TenantItem.queued.does_not_exist() | (TenantItem.queued <= 0))
            & (TenantItem.waiting.does_not_exist() | (TenantItem.waiting <= 0)))
    try:
        TenantItem(tenant_id).update(actions=[TenantItem.pending_partition.remove()], condition=idle)
    except UpdateError:  # a job was queued or parked meanwhile: it stays
        pass


def bring_back(now: float, *, publish: Callable[..., None], report: SweepReport,
               on_woken: Callable[[JobItem], None] | None = None,
               on_republished: Callable[[JobItem], None] | None = None,
               backlog: Callable[[], int] | None = None) -> None:
    """The safety net of the hand-off (docs/design.md §3), for every tenant with waiting or queued jobs.

    * waiting jobs of a tenant with room are woken (:func:`leases.waiting.wake`): a releaser that
      died between its release and its wake, a cap raised while jobs waited, the index's lag;
    * queued jobs that no message could still bring (:func:`lost_queued`: due more than
      ``Clocks.lost_message_after_s`` ago while the work queue shows no visible message) are
      re-published: a wake whose publish was lost, a purged queue, an endpoint restarted empty, a
      message hidden by a worker that died or stopped with it. A spare copy is dropped by the
      conditional acquire. Not while ``backlog()`` (visible messages in the work queue) is above
      0: then every worker is busy, an overdue message is simply not received yet, and a copy
      would only add to the queue.

    A tenant whose step fails is logged and left for the next sweep; the others go on.
    """
    report.nodes_dropped += nodes.drop_dead(now)
    check_lost = backlog is None or backlog() == 0
    for tenant in TenantItem.by_pending.query(PENDING_PARTITION):
        try:
            if int(tenant.waiting or 0) <= 0 and int(tenant.queued or 0) <= 0:
                _unmark_pending(tenant.tenant_id)
                continue
            if int(tenant.waiting or 0) > 0:
                woken = waiting.wake(tenant.tenant_id, publish=publish, reason="sweeper", now=now,
                                     on_woken=on_woken)
                report.woken[tenant.tenant_id] += len(woken)
            if check_lost and int(tenant.queued or 0) > 0:
                for job in lost_queued(tenant.tenant_id, now=now):
                    republish_lost(job, publish=publish, now=now)
                    report.republished[tenant.tenant_id] += 1
                    if on_republished is not None:
                        on_republished(job)
        except Exception:  # noqa: BLE001 - one tenant's failure must not stop the net for the others
            log.exception("sweeper: bringing back the jobs of tenant %s failed; next sweep", tenant.tenant_id)


def lost_queued(tenant_id: str, *, now: float) -> Iterator[JobItem]:
    """The tenant's queued jobs overdue by ``Clocks.lost_message_after_s`` (``due_at`` that long
    before ``now``), oldest first. Meaningful only while the work queue shows no visible message
    (the caller checks): then no message could still bring them soon."""
    return stale_queued(tenant_id, now=now, grace_s=get_clocks().lost_message_after_s)


def republish_lost(job: JobItem, *, publish: Callable[..., None], now: float) -> None:
    """Publish a lost queued job again (marked as following its last attempt), then stamp its
    ``due_at`` so the next sweep waits again. A spare copy is dropped by the conditional acquire."""
    publish(job.tenant_id, job.job_id, after_attempt=int(job.attempts or 0))
    mark_republished(job.job_id, now=now)
    log.warning("re-published job %s (tenant %s): queued since its message was due at %.0f, never started, "
                "and no message visible", job.job_id, job.tenant_id, float(job.due_at))


def stale_queued(tenant_id: str, *, now: float, grace_s: float) -> Iterator[JobItem]:
    """The tenant's queued jobs whose message was due more than ``grace_s`` ago and never started
    (a lost wake or publish, a purged queue): the sweeper re-publishes them."""
    for job in JobItem.by_queued.query(tenant_id, scan_index_forward=True):
        if job.due_at is not None and float(job.due_at) < now - grace_s:
            yield job


def mark_republished(job_id: str, *, now: float) -> bool:
    """Stamp a re-published queued job's ``due_at`` (so the next sweep waits again); False if it
    is not queued any more."""
    try:
        JobItem(job_id).update(actions=[JobItem.due_at.set(now)], condition=JobItem.status == JobStatus.QUEUED.value)
    except UpdateError as exc:  # the copy is sent already; only the stamp is missing
        log.info("could not stamp the re-published job %s: %s", job_id, exc)
        return False
    return True
