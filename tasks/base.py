"""``FairTask``: the Celery base class that runs every job under a lease (docs/design.md §2–§4),
on Celery's lifecycle hooks. One delivery (kwargs ``tenant_id``, ``job_id``; ``after_attempt`` on a
copy sent before a re-queue)::

    before_start: give way? ─► a copy at the back of the queue, once (a poorer tenant has a job queued)
                  acquire ─┬─ TenantMismatch ──► Reject as poison (DLQ): another tenant than the job's
                           ├─ JobNotQueued ────► Ignore (a duplicate or a finished job), or defer if the
                           │                     attempt it follows still holds the job; no job item:
                           │                     Reject as poison ``no_such_job``
                           ├─ CapReached ──────► borrow, else park (``waiting``, no message): Retry
                           ├─ LeaseContention ─► defer: a copy with SQS DelaySeconds: Retry
                           ├─ AcquireUnresolved► resolved once DynamoDB answers: run, or Reject
                           ├─ other error ─────► Reject: SQS keeps the message
                           └─ Lease
    run, all under the heartbeat ─► run_job() ─┬─ ok ──────────► commit_success (release)
                                               ├─ bad input ───► fail_job (release), JobFailed
                                               ├─ other error ─► retry copy, then release_for_retry:
                                               │                 Retry; out of attempts: fail_job
                                               └─ lease lost ──► commit nothing
    after_return (SUCCESS, FAILURE): publish the job the release handed the place to; job_finished

Hooks not used: ``on_success``/``on_failure`` run after Celery stored the outcome, which the
release decides; ``on_retry`` runs after the copy must exist. :meth:`tasks.sqs_task.SqsTask.retry` holds copies
in SQS (``DelaySeconds``), never in worker memory. Why: docs/design.md, "FairTask on Celery's hooks".
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from threading import Event
from typing import Any, Callable, NoReturn

from celery.exceptions import Ignore, Reject, Retry

from leases import attempts, transactions, waiting, reads
from leases.errors import AcquireUnresolved, CapReached, JobNotQueued, LeaseContention, LeaseLost, TenantMismatch
from leases.models import JobItem, JobStatus
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings
from leases import signals
from leases.signals import JobOutcome
from . import lost_attempts
from .heartbeat import Heartbeat
from .sqs_task import SqsTask
from .outcomes import INFRASTRUCTURE_ERRORS, JobFailed, JobResult, is_duplicate, is_infrastructure_failure
from .messages import publish_job

log = logging.getLogger(__name__)

#: How a ``lease_lost`` detail begins when the release's outcome is unknown (it may have applied).
RELEASE_UNREACHABLE = "release could not reach DynamoDB"


@dataclass(frozen=True)
class _Ended:
    """A job's fenced end as :meth:`FairTask.run` wrote it, for :meth:`FairTask.after_return`."""

    tenant_id: str
    job: JobItem
    outcome: JobOutcome
    error: str | None
    handed: str | None


class FairTask(SqsTask):
    """Celery task base class that wraps each job in a lease, on Celery's own hooks (module
    docstring). Subclasses implement ``run_job(self, *, job, lease, cancel)``, return a
    :class:`JobResult`, and raise typed errors whose ``retryable`` says whether another attempt
    could help. Only the request carries state from one hook to the next (``request.lease``,
    ``request.ended``): no state of the process decides which transaction runs."""

    #: Ack after the job, never before: a crash leaves the message (docs/design.md §1).
    acks_late = True
    #: A killed child's message is requeued (on SQS: made visible again at once, by
    #: :meth:`tasks.sqs_transport.Channel._restore`). Acking it would lose a job whose child died
    #: before its lease existed; a child that held a lease has its redelivery dropped as not
    #: ``queued``, and the sweeper brings the job back.
    reject_on_worker_lost = True
    #: Unlimited: deferrals are not attempts; the attempt budget lives in the job item.
    max_retries = None
    #: The message carries references (tenant_id, job_id).
    typing = False
    #: Failed jobs raise this after recording; logged without a traceback.
    throws = (JobFailed,)
    #: The worker's consumer sends no ``task-received``/``task-started`` for this task: the job
    #: sends both once it has its lease (:mod:`imposition.observability.events`), so Flower counts
    #: runs, not deliveries that park or are spare.
    Strategy = f"{__package__}.worker:run_reported_strategy"

    def worker_name(self) -> str:
        """``<node name>/<pid>``: which process holds a lease."""
        return f"{self.request.hostname or 'local'}/{os.getpid()}"

    def run_job(self, *, job: JobItem, lease: transactions.Lease, cancel: Event) -> JobResult:
        """The job itself (subclasses): ``cancel`` is set once the lease is lost."""
        raise NotImplementedError

    # -- the hooks -------------------------------------------------------------------------------

    def before_start(self, task_id: str, args: tuple, kwargs: dict) -> None:
        """Celery's hook before :meth:`run`: take the lease (**acquire**), or end the delivery.

        Raises:
            celery.exceptions.Retry: gave way (a copy at the back of the queue: a poorer tenant
                has a job due), parked (**park**: no copy; its tenant's next
                release hands it its place) or deferred (contention; a cap hit under the timer policy).
            celery.exceptions.Ignore: a duplicate delivery, dropped (acked, no task event).
            celery.exceptions.Reject: a malformed message or one naming another tenant than the
                job's (to the dead-letter queue), or no lease could be taken for a reason other
                than the cap (SQS redelivers it).
        """
        tenant_id, job_id, after_attempt = self._message_fields(args, kwargs)
        if (not kwargs.get("gave_way") and get_settings().waiting_policy == "handoff"
                and waiting.gives_way(tenant_id)):
            self._give_way(job_id, tenant_id)
        self.request.lease = self._acquire(job_id, tenant_id, after_attempt)
        self.request.ended = None

    def run(self, /, *args: Any, **kwargs: Any) -> dict:
        """Run the job under the lease :meth:`before_start` took, then write its fenced end
        (**release**: commit, retry or failure) while the heartbeat still renews the lease.

        The end is written here, not in ``on_success``/``on_failure``: which of them Celery
        records (SUCCESS, RETRY, FAILURE) depends on the release, and Celery stores the outcome
        before it calls those hooks.

        Returns ``{"outcome", "job_id", "tenant_id"}`` (``succeeded`` or ``lease_lost``).

        Raises:
            celery.exceptions.Retry: the attempt failed and is retried by a new message.
            JobFailed: the job ended ``failed`` (recorded before raising).
        """
        lease: transactions.Lease = self.request.lease
        delivery = (self.request.properties or {}).get("delivery_info") or {}
        heartbeat = Heartbeat(lease, get_clocks(), queue_url=delivery.get("sqs_queue"),
                              receipt_handle=(self.request.properties or {}).get("delivery_tag"))
        with heartbeat:  # up to and including the release's transaction
            job = reads.read_job(lease.job_id)  # raises only after in-place retries: the sweeper's then
            signals.lease_acquired.send(sender=self, lease=lease, job=job, heartbeat=heartbeat)
            try:
                result = self.run_job(job=job, lease=lease, cancel=heartbeat.lost)
            except Retry:
                raise
            except Exception as exc:  # noqa: BLE001 - every job error is recorded, none escapes
                return self._on_job_error(job, lease, heartbeat, exc)
            if heartbeat.lost.is_set():
                return self._on_lease_lost(lease, heartbeat.lost_detail, heartbeat, int(job.attempts))
            return self._commit(job, lease, heartbeat, result)

    def after_return(self, status: str, retval: Any, task_id: str, args: tuple, kwargs: dict, einfo: Any) -> None:
        """Celery's hook once the outcome is recorded (SUCCESS or FAILURE; not called for a
        retry, an ignored or a rejected delivery), before the message is acked: publish the job
        the release handed the tenant's place to, and report the job's end (``job_finished``).
        Never raises (a lost publish is the sweep's: the handed job is ``queued`` with ``due_at``)."""
        ended: _Ended | None = getattr(self.request, "ended", None)
        if ended is None:
            return
        self._publish_handed(ended.tenant_id, ended.handed)
        self._wake_borrowers()
        signals.job_finished.send(sender=self, job=ended.job, outcome=ended.outcome, error=ended.error)

    # -- acquire ---------------------------------------------------------------------------------

    def _acquire(self, job_id: str, tenant_id: str, after_attempt: int) -> transactions.Lease:
        """:func:`leases.transactions.acquire`, each refusal read (:meth:`before_start`)."""
        worker = self.worker_name()
        try:
            return transactions.acquire(job_id, tenant_id, worker)
        except TenantMismatch as exc:
            self._reject_as_poison(str(exc))
        except JobNotQueued as exc:
            if exc.status is None:  # no job item: a message no submission wrote (never silently dropped)
                self._reject_as_poison(f"job {job_id} does not exist (published without submission?)",
                                       reason="no_such_job")
            if not is_duplicate(exc, after_attempt):
                self._defer(job_id, tenant_id, exc)
            self._drop_duplicate(job_id, tenant_id, exc)
        except CapReached as exc:
            return self._at_cap(job_id, tenant_id, worker, exc)
        except LeaseContention as exc:
            self._defer(job_id, tenant_id, exc)
        except AcquireUnresolved as exc:
            resolved = lost_attempts.resolve_acquire(exc)
            if resolved is None:
                raise Reject(str(exc), requeue=False) from exc  # SQS redelivers it; nothing was charged
            return resolved
        except INFRASTRUCTURE_ERRORS as exc:
            # No lease is known to be held (an ambiguous acquire that did apply is the sweeper's),
            # so acking would lose the job: SQS keeps the message and redelivers it.
            log.error("could not acquire a lease for job %s (%s); leaving the message to SQS", job_id, exc)
            raise Reject(exc, requeue=False) from exc

    # -- release -----------------------------------------------------------------------------------

    def _commit(self, job: JobItem, lease: transactions.Lease, heartbeat: Heartbeat, result: JobResult) -> dict:
        """**release** as a commit (:func:`leases.transactions.commit_success`); the handed job and
        the report are :meth:`after_return`'s."""
        signals.lease_releasing.send(sender=self, lease=lease, outcome=JobOutcome.SUCCEEDED)
        try:
            written, released = transactions.commit_success(  # the lease as last renewed: its patience
                heartbeat.lease, output_key=result.output_key, sheets=result.sheets, sides=result.sides,
                warnings=list(result.warnings), preview_keys=list(result.preview_keys),
                jdf_key=result.jdf_key)
        except LeaseLost as exc:
            return self._on_lease_lost(lease, str(exc), heartbeat, int(job.attempts))
        except (*INFRASTRUCTURE_ERRORS, LeaseContention) as exc:
            return self._on_release_unreachable(lease, exc, heartbeat, int(job.attempts))
        signals.lease_released.send(sender=self, lease=lease, outcome=JobOutcome.SUCCEEDED)
        for name, value in written.items():  # the job as committed, without reading it back
            setattr(job, name, value)
        self.request.ended = _Ended(lease.tenant_id, job, JobOutcome.SUCCEEDED, None, released.handed)
        return {"outcome": JobOutcome.SUCCEEDED, "job_id": lease.job_id, "tenant_id": lease.tenant_id}

    def _wake_borrowers(self) -> None:
        """The slot a release freed, offered to a tier that borrows while the cluster has slots
        above its reserve (:func:`leases.waiting.wake_borrowers`); never raises (the sweep's then)."""
        try:
            waiting.wake_borrowers(publish=publish_job,
                                   on_woken=lambda job: signals.job_woken.send(sender=self, job=job, reason="borrow"))
        except Exception as exc:  # noqa: BLE001 - the job's own end is committed; the sweep wakes
            log.warning("wake of borrowers failed (the sweep wakes them): %s", exc)

    def _publish_handed(self, tenant_id: str, handed: str | None) -> None:
        """Publish the job a release handed the tenant's place to; never raises."""
        if handed is None:
            return
        try:
            publish_job(tenant_id, handed)
        except Exception as exc:  # noqa: BLE001 - the job is queued with due_at: the sweep re-publishes it
            log.warning("could not publish handed job %s of %s (the sweep re-publishes it): %s", handed, tenant_id, exc)
            return
        signals.job_woken.send(sender=self, job=JobItem(handed, tenant_id=tenant_id, woken_at=time.time(),
                                                        woken_by="release"), reason="release")

    def _at_cap(self, job_id: str, tenant_id: str, worker: str, refusal: CapReached) -> transactions.Lease:
        """The acquire found the tenant at its cap: :meth:`_park_or_acquire`. Returns the lease if
        a slot was taken after all.

        Raises:
            celery.exceptions.Retry: parked (acked, no copy: a release of its tenant's slots wakes
                it) or deferred.
            celery.exceptions.Ignore: the job moved on meanwhile (a duplicate delivery parked or
                ran it): this delivery is dropped.
            celery.exceptions.Reject: the park could not be written (SQS keeps the message).
        """
        try:
            lease = self._park_or_acquire(job_id, tenant_id, worker, refusal)
        except JobNotQueued as gone:
            self._drop_duplicate(job_id, tenant_id, gone)
        if lease is None:
            raise Retry(f"parked: tenant {tenant_id} is at its cap; a release of its slots wakes it", exc=refusal)
        return lease

    def _park_or_acquire(self, job_id: str, tenant_id: str, worker: str,
                         refusal: CapReached) -> transactions.Lease | None:
        """Rounds of :meth:`_borrow_park_or_acquire` until one parks the job (None: ack the message)
        or takes a slot (the lease), at most ``Settings.lease_conflict_attempts``; then defer. Under
        ``waiting_policy = "timer"``: defer at once.

        Raises:
            celery.exceptions.Retry / Reject: deferred (timer policy, contention, or the rounds
                kept losing to acquires) / the park could not be written (SQS keeps the message).
            JobNotQueued: the job moved on meanwhile (a duplicate delivery parked or ran it).
        """
        if get_settings().waiting_policy == "timer":
            self._defer(job_id, tenant_id, refusal)
        latest = refusal  # the latest refusal decides the next round (may it borrow?)
        for _ in range(get_settings().lease_conflict_attempts):
            try:
                return self._borrow_park_or_acquire(job_id, tenant_id, worker, latest)
            except CapReached as lost_to_an_acquire:  # the room the park saw was taken first
                latest = lost_to_an_acquire
            except LeaseContention as contention:
                self._defer(job_id, tenant_id, contention)
            except INFRASTRUCTURE_ERRORS as infra:
                log.error("could not park job %s (%s); leaving the message to SQS", job_id, infra)
                raise Reject(infra, requeue=False) from infra
        self._defer(job_id, tenant_id, latest)

    def _borrow_park_or_acquire(self, job_id: str, tenant_id: str, worker: str,
                                refusal: CapReached) -> transactions.Lease | None:
        """One round at the cap: borrow an idle slot above the reserve if the tier may
        (``refusal.may_borrow``); else park the job (**park**: None); if the park finds the tenant
        has room by now, acquire after all (the lease).

        Raises:
            CapReached: that acquire was refused: the room was taken first (another round).
            JobNotQueued, LeaseContention, pynamodb/botocore errors: from the park or the acquire.
        """
        reason = refusal
        if refusal.may_borrow:
            try:
                return transactions.acquire(job_id, tenant_id, worker, borrow=True)
            except CapReached as no_slot:
                reason = no_slot
        if waiting.park(job_id, tenant_id):
            log.info("parked job %s of %s: %s", job_id, tenant_id, reason)
            signals.job_deferred.send(sender=self, job_id=job_id, tenant_id=tenant_id, reason="cap", delay_s=None)
            return None
        return transactions.acquire(job_id, tenant_id, worker)

    def _give_way(self, job_id: str, tenant_id: str) -> None:
        """Send the job to the back of the queue, once (``gave_way`` on the copy; nothing written):
        :func:`leases.waiting.gives_way`. Raises Retry (Celery acks this delivery); returns only if
        the copy could not be sent, and the job takes its slot."""
        try:
            retry = self.retry(kwargs={**self.request.kwargs, "gave_way": True}, countdown=0, throw=False)
        except (Reject, *INFRASTRUCTURE_ERRORS) as exc:  # Celery's retry wraps a failed publish in Reject
            log.warning("job %s of %s: could not give way (%s); taking the slot", job_id, tenant_id, exc)
            return
        log.info("job %s of %s gives way to a tenant with fewer jobs running or queued", job_id, tenant_id)
        signals.job_deferred.send(sender=self, job_id=job_id, tenant_id=tenant_id, reason="gave_way", delay_s=0)
        raise retry

    def _drop_duplicate(self, job_id: str, tenant_id: str, exc: JobNotQueued) -> NoReturn:
        """Ack a spare delivery with no task event (``Ignore``): it is no run of the job."""
        log.info("dropping duplicate delivery of job %s (status %s)", job_id, exc.status)
        signals.job_dropped.send(sender=self, job_id=job_id, tenant_id=tenant_id, status=exc.status)
        raise Ignore(f"duplicate delivery of job {job_id} (status {exc.status}) dropped")

    def _defer(self, job_id: str, tenant_id: str, exc: Exception) -> NoReturn:
        """Publish the deferred copy, then count it (best effort); raises Retry (ack) or Reject."""
        reason = {CapReached: "cap", JobNotQueued: "release_pending"}.get(type(exc), "contention")
        delay_s = self._option("defer_delay_s")
        try:
            retry = self.retry(countdown=delay_s, exc=exc, throw=False)
        except INFRASTRUCTURE_ERRORS as publish_exc:
            log.error("could not publish the deferred copy of job %s (%s); leaving the message to SQS",
                      job_id, publish_exc)
            raise Reject(publish_exc, requeue=False) from publish_exc
        attempts.record_defer(job_id, delay_s=delay_s)
        log.info("deferring job %s of %s by %s s: %s", job_id, tenant_id, delay_s, exc)
        signals.job_deferred.send(sender=self, job_id=job_id, tenant_id=tenant_id, reason=reason, delay_s=delay_s)
        raise retry

    def _on_lease_lost(self, lease: transactions.Lease, detail: str, heartbeat, attempt: int) -> dict:
        log.warning("job %s: lease lost, committing nothing (%s)", lease.job_id, detail)
        signals.lease_lost.send(sender=self, lease=lease, detail=detail)
        if heartbeat.lost_cause == "infra_lost":
            lost_attempts.report_infra_lost(self, heartbeat.lease, attempt, detail)
        return {"outcome": JobOutcome.LEASE_LOST, "job_id": lease.job_id, "tenant_id": lease.tenant_id}

    def _on_release_unreachable(self, lease: transactions.Lease, exc: BaseException, heartbeat,
                                attempt: int) -> dict:
        """A fenced release (commit, retry, failure) could not be confirmed: DynamoDB kept failing
        (read-backs too) up to the lease's expiry. It may have applied; if not, the lease expires
        and the sweeper reclaims it, so the attempt is reported ``infra_lost`` (not charged; a no-op
        if the release did apply and the job is final). The job's webhook is in the outbox either way."""
        detail = f"{RELEASE_UNREACHABLE}: {exc}"
        log.warning("job %s: %s", lease.job_id, detail)
        signals.lease_lost.send(sender=self, lease=lease, detail=detail)
        lost_attempts.report_infra_lost(self, heartbeat.lease, attempt, detail)  # its last known expiry
        return {"outcome": JobOutcome.LEASE_LOST, "job_id": lease.job_id, "tenant_id": lease.tenant_id}

    def _release(self, lease: transactions.Lease, outcome: JobOutcome, reason: str,
                 release: Callable[[], transactions.Released | None], heartbeat: Heartbeat, attempt: int) -> dict | None:
        """Run the fenced ``release()`` for ``outcome`` (``retrying``: the job keeps its place;
        ``failed``: the place passes to the tenant's oldest waiting job) and report it: a retry's
        ``job_finished`` now (Celery calls no :meth:`after_return` for a retry), a failure's in
        :meth:`after_return`, with the handed job's publish.

        Returns None once released, or the ``lease_lost`` result if the release was refused (the
        lease is someone else's: nothing was written) or could not be confirmed.
        """
        signals.lease_releasing.send(sender=self, lease=lease, outcome=outcome)
        try:
            released = release()
        except LeaseLost as lost:
            return self._on_lease_lost(lease, str(lost), heartbeat, attempt)
        except (*INFRASTRUCTURE_ERRORS, LeaseContention) as unreachable:
            return self._on_release_unreachable(lease, unreachable, heartbeat, attempt)
        signals.lease_released.send(sender=self, lease=lease, outcome=outcome)
        committed = JobStatus.FAILED if outcome == JobOutcome.FAILED else JobStatus.QUEUED
        job = self._read_committed(JobItem(lease.job_id, tenant_id=lease.tenant_id), committed)
        if outcome == JobOutcome.FAILED:
            self.request.ended = _Ended(lease.tenant_id, job, outcome, reason, released.handed if released else None)
        else:
            self._wake_borrowers()
            signals.job_finished.send(sender=self, job=job, outcome=outcome, error=reason)
        return None

    @staticmethod
    def _read_committed(known: JobItem, status: JobStatus) -> JobItem:
        """The job as its release committed it (read back, with in-place retries), for
        :data:`signals.job_finished`; if DynamoDB cannot answer, ``known`` with the committed
        ``status``, so the job's end is still reported (its webhook is in the outbox either way)."""
        try:
            return reads.read_job(known.job_id)
        except Exception as exc:  # noqa: BLE001 - the release is committed; only the read-back failed
            log.warning("could not read job %s back after its release (%s); reporting it as %s",
                        known.job_id, exc, status.value)
            known.status = status.value
            return known

    def _on_job_error(self, job: JobItem, lease: transactions.Lease, heartbeat, exc: Exception) -> dict:
        """Record a failed attempt: retry it as a new message, or fail the job. Fenced throughout."""
        attempts = int(job.attempts)  # read after the acquire, which counted this attempt
        if heartbeat.lost.is_set() or isinstance(exc, LeaseLost):
            return self._on_lease_lost(lease, heartbeat.lost_detail or str(exc), heartbeat, attempts)
        code = getattr(exc, "code", None) or type(exc).__name__
        reason = str(exc) or type(exc).__name__
        retryable = bool(getattr(exc, "retryable", True))
        # The infrastructure's failure is not the job's: retried without charging the attempt
        # (recorded ``infra_error``), up to ``infra_retry_limit`` such attempts.
        infra = (is_infrastructure_failure(exc)
                 and len(job.infra_lost_attempts or ()) < get_settings().infra_retry_limit)
        if infra or (retryable and job.attempts_left):
            delay_s = self.backoff_s(attempts)
            log.warning("job %s attempt %s/%s failed (%s%s); retrying in %s s", job.job_id, attempts,
                        job.max_attempts, "infrastructure, not charged: " if infra else "", reason, delay_s)
            try:  # published before the release: it follows this attempt
                fresh = {k: v for k, v in self.request.kwargs.items() if k != "gave_way"}  # a new delivery
                retry = self.retry(kwargs={**fresh, "after_attempt": attempts}, countdown=delay_s,
                                   exc=exc, throw=False)
            except (Reject, *INFRASTRUCTURE_ERRORS) as publish_exc:  # Celery's retry wraps a failed publish in Reject
                # No copy: release anyway (the job is queued again, its slot free) and leave this
                # message to SQS, which redelivers it; the reconciler covers a lost one.
                log.warning("job %s: the retry copy could not be published (%s); releasing, and leaving the "
                            "message to SQS", job.job_id, publish_exc)
                retry = Reject(publish_exc, requeue=False)
            lost = self._release(lease, JobOutcome.RETRYING, reason,
                                 lambda: transactions.release_for_retry(
                                     heartbeat.lease, error=reason, error_code=code, delay_s=delay_s,
                                     infra_attempt=attempts if infra else None), heartbeat, attempts)
            if lost is not None:
                return lost
            raise retry
        if retryable:
            reason = f"out of attempts ({job.charged_attempts}/{job.max_attempts}): {reason}"
        log.warning("job %s failed (%s): %s", job.job_id, code, reason)
        lost = self._release(lease, JobOutcome.FAILED, reason,
                             lambda: transactions.fail_job(heartbeat.lease, error=reason, error_code=code),
                             heartbeat, attempts)
        if lost is not None:
            return lost
        raise JobFailed(job.job_id, code, reason) from exc
