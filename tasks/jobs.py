"""Operator verbs on one job, for the ``imposition`` command and ``AsyncResult.revoke()``.

:func:`cancel` and :func:`retry` are the transactions of :mod:`leases.lifecycle`, followed by what
every other status change is followed by: the hand-off (:func:`leases.waiting.wake`) where room was
freed, the publish of a queued job, and for a cancel the tenant told (its admission in-flight entry
confirmed, its webhook sent through :data:`leases.signals.job_finished`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from leases.lifecycle import Outcome
from leases.models import JobItem

log = logging.getLogger(__name__)


def cancel(job_id: str) -> JobItem:
    """Cancel a queued or waiting job and tell everyone: :func:`leases.lifecycle.cancel`, then the
    tenant's hand-off (``wake``, reason ``cancel``), its admission in-flight entry confirmed and
    :data:`leases.signals.job_finished` (``failed``: the webhook). Returns the final job item.

    Raises:
        everything :func:`leases.lifecycle.cancel` raises (nothing written then).
    """
    from imposition import admission
    from leases import lifecycle
    from leases.reads import read_job
    from leases import signals
    from leases.signals import JobOutcome
    from . import app
    from .messages import publish_job
    from .wiring import install

    install(app)  # this process's job_finished receivers: the webhook (idempotent)

    outcome = lifecycle.cancel(job_id)
    tenant_id = outcome.job.tenant_id
    _wake(tenant_id, publish_job, "cancel")
    try:
        admission.confirm(job_id, tenant_id=tenant_id)
    except admission.AdmissionUnavailable as exc:  # the entry expires by itself; say so
        log.warning("job %s cancelled; its admission entry could not be confirmed (it expires): %s", job_id, exc)
    job = read_job(job_id)
    signals.job_finished.send(sender=None, job=job, outcome=JobOutcome.FAILED, error=job.error)
    return job


def retry(job_id: str, *, max_attempts: int | None = None) -> Outcome:
    """Retry a failed job through the door: admission first (:meth:`admission.Admission.readmit`:
    the tenant's rate limit and in-flight cap, as for a submission), then
    :func:`leases.lifecycle.retry`, then publish it (queued) or wake its tenant (parked). Returns
    the :class:`leases.lifecycle.Outcome`.

    Raises:
        pynamodb.exceptions.DoesNotExist: no such job.
        leases.errors.WrongJobStatus: the job is not failed, or never was a submitted job
            (:class:`leases.errors.NeverSubmitted`); nothing admitted or written.
        admission.RateLimited, admission.InFlightLimitReached: refused by admission (nothing written).
        admission.AdmissionUnavailable: Redis unreachable (fails closed, nothing written).
        everything :func:`leases.lifecycle.retry` raises (nothing written then, the readmission
            undone); a failed publish
            (the job stays queued with ``due_at`` now: the sweeper re-publishes it).
    """
    from imposition import admission
    from leases import lifecycle
    from leases.errors import WrongJobStatus
    from leases.reads import read_job
    from .messages import publish_job

    job = read_job(job_id)
    if job.status not in lifecycle.RETRYABLE:  # refused as such, before any admission is spent
        raise WrongJobStatus(job_id, "retry", job.status, lifecycle.RETRYABLE)
    lifecycle.check_submitted(job, "retry")  # the record of a call by name: nothing to retry
    door = admission.get_admission()
    added = door.readmit(job.tenant_id, job_id)
    try:
        outcome = lifecycle.retry(job_id, max_attempts=max_attempts)
    except BaseException:
        try:
            door.unreadmit(job.tenant_id, job_id, added=added)
        except admission.AdmissionUnavailable as exc:  # keep the retry's error; the entry expires
            log.warning("retry of job %s failed and its readmission could not be undone: %s", job_id, exc)
        raise
    if outcome.status == "queued":
        publish_job(outcome.job.tenant_id, job_id)
    else:
        _wake(outcome.job.tenant_id, publish_job, "door")
    return outcome


def _wake(tenant_id: str, publish: Callable[..., None], reason: str) -> None:
    from leases import waiting
    from leases import signals

    try:
        waiting.wake(tenant_id, publish=publish, reason=reason,
                     on_woken=lambda job: signals.job_woken.send(sender=None, job=job, reason=reason))
    except Exception as exc:  # noqa: BLE001 - the transition is committed; the sweeper wakes the rest
        log.warning("wake of tenant %s after %s failed (the sweeper will): %s", tenant_id, reason, exc)
