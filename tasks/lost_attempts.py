"""Attempts lost to the infrastructure, not charged (docs/design.md, "Leases, messages and
attempts"): an acquire whose outcome DynamoDB could not tell is settled once it answers, and an
attempt whose lease was lost because DynamoDB could not be reached is recorded ``infra_lost``.
Both retry for as long as the sweeper waits for such a report (``Clocks.infra_report_grace_s``)."""

from __future__ import annotations

import logging
import time

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

from imposition.common.clocks import get_clocks
from leases import attempts, signals
from leases.errors import AcquireUnresolved
from leases.transactions import Lease
from .outcomes import INFRASTRUCTURE_ERRORS

log = logging.getLogger(__name__)


def until_sweeper_grace(expires_at: float) -> Retrying:
    """Retries of a DynamoDB write on infrastructure errors, jittered and at least once per
    heartbeat interval, until ``Clocks.infra_report_grace_s`` past ``expires_at`` (epoch s, a
    lease's expiry); the last error is re-raised."""
    clocks = get_clocks()
    return Retrying(
        retry=retry_if_exception_type(INFRASTRUCTURE_ERRORS),
        wait=wait_random_exponential(multiplier=0.2, max=clocks.heartbeat_interval_s),
        stop=stop_after_delay(max(0.0, expires_at + clocks.infra_report_grace_s - time.time())),
        reraise=True,
    )


def resolve_acquire(unresolved: AcquireUnresolved) -> Lease | None:
    """Settle an acquire whose outcome DynamoDB could not tell (:func:`leases.attempts.resolve_acquire`),
    retried (jittered) until DynamoDB answers, for as long as the sweeper would wait for an
    ``infra_lost`` report of that attempt. Returns the lease if the acquire applied and is still
    ours (the job runs), else None (the message is left for redelivery); never raises."""
    log.warning("job %s: %s; resolving it once DynamoDB answers", unresolved.job_id, unresolved)
    try:
        lease = until_sweeper_grace(unresolved.expires_at)(attempts.resolve_acquire, unresolved)
    except INFRASTRUCTURE_ERRORS as exc:
        log.error("job %s: acquire still unresolved when the sweeper's grace ended (%s); if it applied, its "
                  "attempt counts against the budget", unresolved.job_id, exc)
        return None
    log.warning("job %s: unresolved acquire %s", unresolved.job_id,
                "applied: running the job under it" if lease else "did not apply, or was reclaimed (not charged)")
    return lease


def report_infra_lost(sender: object, lease: Lease, attempt: int, detail: str) -> bool:
    """This attempt lost its lease because DynamoDB could not be reached: record it
    ``infra_lost`` so that it does not count against the budget (``sender``: the task, for
    :data:`leases.signals.attempt_infra_lost`).

    Retried (jittered, at least once per heartbeat interval) until DynamoDB answers, for as long
    as the sweeper waits for the report: until ``Clocks.infra_report_grace_s`` past the lease's
    last known expiry. Never raises; returns True if the report was written.
    """
    try:
        written = until_sweeper_grace(lease.expires_at)(attempts.record_infra_lost, lease.job_id,
                                                              attempt, detail=detail)
    except INFRASTRUCTURE_ERRORS as exc:
        log.error("job %s: could not report attempt %s as infra_lost before the sweeper's grace ended (%s); "
                  "it counts against the budget", lease.job_id, attempt, exc)
        return False
    if written:
        log.warning("job %s: attempt %s recorded infra_lost (not charged): %s", lease.job_id, attempt, detail)
        signals.attempt_infra_lost.send(sender=sender, lease=lease, attempt=attempt)
    else:
        log.warning("job %s: attempt %s not recorded infra_lost: the job is final already, or has had "
                    "infra_retry_limit uncharged attempts (this one counts)", lease.job_id, attempt)
    return written
