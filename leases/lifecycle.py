"""An operator's transitions of a job: cancel (``queued``/``waiting`` → ``failed``) and retry
(``failed`` → ``waiting`` | ``queued``), each one DynamoDB transaction with its tenant's counters.

::

    cancel:  job queued|waiting ─► failed (error_code "cancelled")     tenant queued|waiting − 1
             then the caller: wake(tenant) (room freed), admission confirm, job_finished (webhook)
    retry:   job failed ─► the door, as a submission: waiting (+1) | queued (+1)
             attempt budget renewed (max_attempts = charged attempts + budget), the failed run kept in
             ``history``; then the caller: publish (queued) or wake(tenant) (waiting)

A third, :func:`record_unsubmitted`, writes the failed job item of a message no submission wrote
(``imposition.impose`` sent by name), so its caller's result ends instead of staying pending.

Both are conditional on the status read, so a job that moved meanwhile (woken, started by a worker)
is read again and the decision taken again, at most ``Settings.lease_conflict_attempts`` times. A
queued job's message stays in SQS after a cancel; the worker that receives it finds the job
``failed`` and drops it as a duplicate (:mod:`tasks.base`). Neither function publishes or wakes:
that is the caller's (:mod:`imposition.cli.jobs`), after the commit, as every other release does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pynamodb.exceptions import PutError, TransactWriteError

from leases import outbox
from leases.errors import NeverSubmitted, WrongJobStatus
from leases.models import JobItem, JobStatus, TenantItem
from leases.waiting import counter_actions, queues_at_door
from leases.reads import read_tenant
from leases.dynamo import (
    AMBIGUOUS,
    CANCELLED,
    RETRY,
    _CONDITION_FAILED_EXCEPTION,
    error_code,
    NamedTransaction,
    Retryable,
    classify,
    new_token,
    with_conflict_retries,
)
from leases.reads import read_job
from imposition.common.retention import job_expires_at
from imposition.common.settings import get_settings

#: ``error_code`` of a job cancelled by an operator.
CANCELLED_CODE = "cancelled"
#: ``error_code`` of the job item that records a message no submission wrote (:func:`record_unsubmitted`).
SUBMISSION_REQUIRED_CODE = "submission_required"
#: ``tenant_id`` of such a record when its message named no valid tenant: a value the tenancy rules
#: refuse, so it is never a tenant's partition.
NO_TENANT = "(none)"
CANCELLABLE = (JobStatus.QUEUED.value, JobStatus.WAITING.value)
RETRYABLE = (JobStatus.FAILED.value,)


@dataclass(frozen=True)
class Outcome:
    """What an operator transition did.

    Attributes:
        job: the job item as read before the transaction (its ``status`` is the old one).
        status: the status the transaction wrote (``failed`` for a cancel; ``queued`` or
            ``waiting`` for a retry).
        stamp: the transaction's time (epoch s).
    """

    job: JobItem
    status: str
    stamp: float


def _run(job_id: str, operation: str, allowed: tuple[str, ...], write) -> Outcome:
    """Read the job, check its status, ``write(job, now)`` in one transaction; again if it moved."""

    def attempt() -> Outcome:
        job = read_job(job_id)
        if job.status not in allowed:
            raise WrongJobStatus(job_id, operation, job.status, allowed)
        t = time.time()
        try:
            status = write(job, t)
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind in (RETRY, CANCELLED, AMBIGUOUS):  # conflict, moved, or unknown: read again
                if kind == AMBIGUOUS and _applied(job_id, t):
                    return Outcome(job, read_job(job_id).status, t)
                raise Retryable(codes) from exc
            raise
        return Outcome(job, status, t)

    return with_conflict_retries(attempt, what=f"{operation} job {job_id}")


def _applied(job_id: str, t: float) -> bool:
    """After an ambiguous write: does the job carry this call's stamp (``finished_at`` of a cancel,
    the last history entry's ``retried_at`` of a retry)?"""
    job = read_job(job_id)
    if job.status == JobStatus.FAILED.value and job.error_code == CANCELLED_CODE:
        return float(job.finished_at or 0) == t
    return bool(job.history) and float(job.history[-1].get("retried_at", 0)) == t


def cancel(job_id: str) -> Outcome:
    """Cancel a ``queued`` or ``waiting`` job: it ends ``failed`` with ``error_code`` ``cancelled``.

    One transaction: the job (condition: its status is still the one read), the tenant's ``queued``
    (and ``occupied``) or ``waiting`` counter − 1. The caller then wakes the tenant (a queued job's room is free),
    confirms its admission in-flight entry and sends ``job_finished`` (:func:`tasks.jobs.cancel`).

    Raises:
        pynamodb.exceptions.DoesNotExist: no such job.
        WrongJobStatus: the job is running or final (nothing written).
        LeaseContention: the job kept moving, or DynamoDB kept conflicting, past the bounded retries.
    """

    def write(job: JobItem, t: float) -> str:
        with NamedTransaction(new_token()) as tx:
            tx.add("update", "tenant", TenantItem(job.tenant_id), actions=counter_actions(job, -1))
            tx.add("update", "job", JobItem(job_id),
                   actions=[JobItem.status.set(JobStatus.FAILED.value), JobItem.finished_at.set(t),
                            JobItem.error.set(f"cancelled by an operator while {job.status}"),
                            JobItem.error_code.set(CANCELLED_CODE), JobItem.queued_tenant.remove(),
                            JobItem.waiting_tenant.remove(), JobItem.due_at.remove(), *outbox.intent_actions(t)],
                   condition=(JobItem.status == job.status) & (JobItem.tenant_id == job.tenant_id))
        return JobStatus.FAILED.value

    return _run(job_id, "cancel", CANCELLABLE, write)


def retry(job_id: str, *, max_attempts: int | None = None) -> Outcome:
    """Run a ``failed`` job again under the same job id, through the door like a submission.

    One transaction: the job ``failed → queued`` (its tenant has room and nobody waits) or
    ``→ waiting`` (parked: no message), with a new attempt budget (``max_attempts`` =
    charged attempts so far + ``max_attempts``, default ``Settings.max_attempts``), ``retries + 1``, the
    failed run appended to ``history`` (bounded by ``Settings.job_history_limit``), the outcome
    fields of the failed run removed (error, finish, plate, webhook state); the tenant's ``queued``
    or ``waiting`` + 1. The caller publishes a queued job or wakes the tenant of a parked one.
    Under ``waiting_policy = "timer"`` the job is always queued (the timer never parks at the door).

    Raises:
        ValueError: ``max_attempts`` is not an integer from 1 to ``Settings.max_attempts_limit``.
        pynamodb.exceptions.DoesNotExist: no such job.
        WrongJobStatus: the job is not ``failed`` (nothing written); :class:`NeverSubmitted` for the
            record of a message no submission wrote.
        LeaseContention: as :func:`cancel`.
    """
    s = get_settings()
    budget = s.max_attempts if max_attempts is None else max_attempts
    if not isinstance(budget, int) or isinstance(budget, bool) or not 1 <= budget <= s.max_attempts_limit:
        raise ValueError(f"max_attempts={budget!r}: must be an integer from 1 to "
                         f"max_attempts_limit={s.max_attempts_limit}")

    def write(job: JobItem, t: float) -> str:
        check_submitted(job, "retry")
        queued = s.waiting_policy != "handoff" or queues_at_door(read_tenant(job.tenant_id))
        attempts = int(job.attempts or 0)
        entry = {"retried_at": t, "attempts": attempts, "max_attempts": int(job.max_attempts),
                 "error_code": job.error_code, "error": job.error,
                 "finished_at": float(job.finished_at) if job.finished_at is not None else None}
        history = [*(job.history or []), entry][-s.job_history_limit:]
        if queued:
            placed = [JobItem.status.set(JobStatus.QUEUED.value), JobItem.queued_tenant.set(job.tenant_id),
                      JobItem.due_at.set(t)]
        else:
            placed = [JobItem.status.set(JobStatus.WAITING.value), JobItem.waiting_tenant.set(job.tenant_id),
                      JobItem.parked_at.set(t), JobItem.defer_count.set((JobItem.defer_count | 0) + 1)]
        with NamedTransaction(new_token()) as tx:
            placed_as = JobItem(job_id, status=JobStatus.QUEUED.value if queued else JobStatus.WAITING.value)
            tx.add("update", "tenant", TenantItem(job.tenant_id), actions=counter_actions(placed_as, 1))
            tx.add("update", "job", JobItem(job_id),
                   actions=[*placed, JobItem.max_attempts.set(job.charged_attempts + budget),
                            JobItem.retries.set((JobItem.retries | 0) + 1), JobItem.history.set(history),
                            JobItem.error.remove(), JobItem.error_code.remove(), JobItem.finished_at.remove(),
                            JobItem.expires_at.remove(), JobItem.output_key.remove(), JobItem.sheets.remove(), JobItem.sides.remove(),
                            JobItem.warnings.remove(), JobItem.lease_token.remove(),
                            JobItem.webhook_status.remove(), JobItem.webhook_error.remove(),
                            JobItem.webhook_delivered_at.remove(), *outbox.settle_actions()],
                   condition=(JobItem.status == JobStatus.FAILED.value) & (JobItem.tenant_id == job.tenant_id)
                   & _same_finish(job))
        return JobStatus.QUEUED.value if queued else JobStatus.WAITING.value

    return _run(job_id, "retry", RETRYABLE, write)


def _same_finish(job: JobItem):
    """Condition: the job still ends in the failure that was read (not retried meanwhile)."""
    if job.finished_at is None:
        return JobItem.finished_at.does_not_exist()
    return JobItem.finished_at == job.finished_at


def check_submitted(job: JobItem, operation: str) -> None:
    """Refuse ``operation`` on the record of a message no submission wrote (:func:`record_unsubmitted`).

    Raises:
        NeverSubmitted: ``job`` is such a record (it never changes: no race with the check).
    """
    if job.error_code == SUBMISSION_REQUIRED_CODE:
        raise NeverSubmitted(job.job_id, operation)


def record_unsubmitted(job_id: str, *, tenant_id: str, token: str, input_key: str, error: str,
                       now: float | None = None) -> bool:
    """Write job ``job_id`` as ``failed`` with ``error_code`` :data:`SUBMISSION_REQUIRED_CODE`: the
    record of a job message that no submission wrote (``app.send_task("imposition.impose", ...)``),
    so that its caller's ``AsyncResult``, read from the jobs table, ends in that typed failure.

    One conditional put: written only if no item has ``job_id``, so a submitted job's item is never
    overwritten. Nothing else: no tenant counter, lease, token claim, attempt or webhook, since
    nothing was admitted. The record keeps the job's retention (``expires_at``), is never a
    ``wait`` of the capacity report (it never started) and refuses ``job retry``
    (:func:`check_submitted`).

    Args:
        tenant_id: the tenant the message named, if a valid id, else :data:`NO_TENANT`.
        token, input_key: what the message named (for ``jobs list --token``), already bounded.
        error: the explanation the caller's ``get()`` raises, saying how to submit.

    Returns True if written, False if an item with ``job_id`` existed.

    Raises:
        pynamodb.exceptions.PutError: DynamoDB refused or did not answer (retry the message).
    """
    t = time.time() if now is None else now
    item = JobItem(job_id, tenant_id=tenant_id, token=token, status=JobStatus.FAILED.value, attempts=0,
                   max_attempts=0, layout={}, input_key=input_key, submitted_at=t, finished_at=t, error=error,
                   error_code=SUBMISSION_REQUIRED_CODE, expires_at=job_expires_at(t))
    try:
        item.save(condition=JobItem.job_id.does_not_exist())
    except PutError as exc:
        if error_code(exc) == _CONDITION_FAILED_EXCEPTION:
            return False
        raise
    return True
