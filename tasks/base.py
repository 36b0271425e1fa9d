"""``FairTask``: the Celery base class that runs every job under a lease (docs/design.md §2–§4).

One delivery (kwargs ``tenant_id``, ``job_id``; ``after_attempt`` on a copy sent before a re-queue)::

    acquire ─┬─ TenantMismatch ──► reject as poison (DLQ): it names another tenant than the job's
             ├─ JobNotQueued ────► ack and drop (a duplicate or a finished job), or defer if the
             │                      attempt it follows still holds the job; no job item at all:
             │                      reject as poison ``no_such_job``
             ├─ CapReached ──────► park: the job becomes ``waiting`` (no message), then ack; a
             │                      release of its tenant wakes it (timer policy: a delayed copy)
             ├─ LeaseContention ─► defer: a copy with SQS DelaySeconds, then ack
             ├─ AcquireUnresolved► resolved once DynamoDB answers: run the lease if it applied, else reject
             ├─ any other error ─► reject: SQS keeps the message (redelivered after the visibility
             │                      timeout; a crash loop ends in the DLQ)
             └─ Lease ─► heartbeat ─► run() ─┬─ ok ──────────► commit_success (fenced)
                                             ├─ bad input ───► fail_job (fenced), no retry
                                             ├─ other error ─► retry copy with backoff, then
                                             │                 release_for_retry (fenced); out of
                                             │                 attempts: fail_job (AWS's: uncharged)
                                             └─ lease lost ──► commit nothing
    A commit or failure hands its place to the tenant's oldest waiting job in its own transaction
    (a commit passes its slot too and runs the job here; a failure's is published); others wake.

Copies go through :meth:`FairTask.retry` (a deferral is never an attempt). Why each edge: docs/design.md
"Departures from the text" 1, "Publish before the transaction", "A message is acked only once a successor exists".
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, NamedTuple, NoReturn

from botocore.exceptions import BotoCoreError, ClientError
from celery import Task
from celery.exceptions import Ignore, Reject, Retry
from kombu.exceptions import KombuError
from pynamodb.exceptions import PynamoDBException
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_random_exponential

from leases import policy, transactions, waiting
from leases.errors import AcquireUnresolved, CapReached, JobNotQueued, LeaseContention, LeaseLost, TenantMismatch
from leases.models import JobItem, JobStatus
from imposition.common.clocks import Clocks, get_clocks
from imposition.common.settings import get_settings
from imposition.common.sqs import backoff_s, delay_seconds
from imposition.common.tenancy import message_group_id, shown_value, validate_job_id, validate_tenant_id
from leases import signals
from leases.signals import JobOutcome
from tasks import storage
from tasks.heartbeat import Heartbeat
from tasks.messages import publish_job
from tasks.worker import expedite_to_dead_letter_queue, shutting_down

log = logging.getLogger(__name__)

#: How a ``lease_lost`` detail begins when the release's outcome is unknown (it may have applied).
RELEASE_UNREACHABLE = "release could not reach DynamoDB"
#: Errors of the AWS SDKs and the broker client that say nothing about the job itself.
_INFRASTRUCTURE_ERRORS = (PynamoDBException, BotoCoreError, ClientError, KombuError, OSError)


def is_infrastructure_failure(exc: BaseException) -> bool:
    """True if a run failed on the infrastructure, not on the job: an S3 transfer whose endpoint or
    network failed (:attr:`tasks.storage.StorageError.infrastructure`), a DynamoDB, botocore or
    kombu error, a connection error or timeout (raised by a renewal or an upload inside the run), or
    DynamoDB contention outlasting its retries; not any other ``OSError`` (a disk is the job's host). Such an attempt is not charged
    (up to ``Settings.infra_retry_limit``). The engine's errors, a missing input and anything else
    are the job's own."""
    if isinstance(exc, storage.StorageError):
        return exc.infrastructure
    if isinstance(exc, ClientError):
        return storage.is_infrastructure(exc)
    return isinstance(exc, (PynamoDBException, BotoCoreError, KombuError, ConnectionError, TimeoutError,
                            LeaseContention))


@dataclass(frozen=True)
class JobResult:
    """What a job produced: the plate's S3 key, its size in sheets and sides, the engine's typed
    warnings (``[{"code", "message"}, …]``) and its previews' S3 keys (recorded on the job item)."""

    output_key: str
    sheets: int
    sides: int
    warnings: tuple[dict[str, str], ...] = ()
    preview_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Handed:
    """The lease a commit passed to the tenant's next waiting job (its slot, in the commit's own
    transaction), for the same delivery to run in place, and the commit's own report
    (``job_finished``), to be sent in the committed job's request before that lease's run."""

    lease: transactions.Lease
    report: Callable[[], None]
    #: The handed job as the commit wrote it (:func:`leases.transactions.apply_pass`): not read back;
    #: None: read it (a job taken from the pool, :meth:`FairTask._take_from_pool`).
    job: JobItem | None


@dataclass
class PoolRead:
    """A releaser's read of the other tenants that want a slot (:func:`leases.waiting.pool_read`),
    made only where its slot could pass on in place (:meth:`FairTask._successor`): ``wanting`` is
    None until read, or when the read failed; ``own``: the releasing tenant's counters in the same
    read (None: not read, or not pending there)."""

    wanting: dict[str, policy.TenantState] | None = None
    own: policy.TenantState | None = None
    #: The due job of a claimant found for the fair share (:meth:`FairTask._due_claim`), for the take.
    claim: JobItem | None = None


class HeldWake:
    """A ``publish`` for :func:`leases.waiting.wake` that holds back the first job it is given,
    for the releaser to take in place (:meth:`FairTask._take_held`), and publishes the rest."""

    def __init__(self) -> None:
        #: ``(tenant_id, job_id)`` of the job held back, woken (``queued``) and not published yet.
        self.job: tuple[str, str] | None = None

    def __call__(self, tenant_id: str, job_id: str) -> None:
        if self.job is None:
            self.job = (tenant_id, job_id)
        else:
            publish_job(tenant_id, job_id)


class Successor(NamedTuple):
    """What a release hands on (:meth:`FairTask._successor`): the tenant's oldest waiting jobs by
    id, the :class:`~leases.transactions.HandOff` for the release, and the read of who else wants
    a slot, if one is made."""

    jobs: dict[str, JobItem]
    hand_off: transactions.HandOff
    pool: PoolRead


class JobFailed(Exception):
    """The job ended ``failed``; raised after the failure is recorded so Celery shows FAILURE.

    Listed in :attr:`FairTask.throws`, so the worker logs it as an expected error, no traceback.
    """

    def __init__(self, job_id: str, code: str, reason: str) -> None:
        super().__init__(job_id, code, reason)  # picklable: args match __init__
        self.job_id = job_id
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        return f"job {self.job_id} failed ({self.code}): {self.reason}"


def is_duplicate(exc: JobNotQueued, after_attempt: int) -> bool:
    """True if a message that found its job not ``queued`` is a duplicate (ack and drop it).

    It is one if the job is final (or missing: the caller sends a message naming a missing job to
    the dead-letter queue as ``no_such_job`` first), or runs an attempt later than ``after_attempt`` (the
    attempt the message follows). Otherwise the job may still come back to ``queued`` (a retry or
    reclaim in flight, an orphaned lease the sweeper will remove) and the message must not be lost.
    """
    if exc.status is None or JobStatus(exc.status).is_final or exc.status == JobStatus.WAITING.value:
        return True  # a waiting job is brought back by its wake, with a message of its own
    return exc.status == JobStatus.RUNNING.value and exc.attempts is not None and exc.attempts > after_attempt


class FairTask(Task):
    """Celery task base class that wraps each job in a lease.

    Subclasses implement ``run(self, job, lease, cancel)``, return a :class:`JobResult`, and raise
    typed errors whose ``retryable`` says whether another attempt could help. Options are class
    attributes; ``None`` falls back to :mod:`imposition.common.settings`.
    """

    #: Ack after the job, never before: a crash leaves the message (docs/design.md §1).
    acks_late = True
    #: A killed child's message is requeued (on SQS: made visible again at once, by
    #: :meth:`tasks.sqs_transport.Channel._restore`).
    #: Acking it would lose a job whose child died before its lease existed (mid-acquire, or in a
    #: deferral before the copy was published); a child that held a lease has its redelivery
    #: dropped as not ``queued``, and the sweeper brings the job back (module docstring).
    reject_on_worker_lost = True
    #: Unlimited: deferrals are not attempts; the attempt budget lives in the job item.
    max_retries = None
    #: No Celery ETA ever: :meth:`retry` always sets an SQS ``DelaySeconds`` instead.
    default_retry_delay = None
    #: The message carries references (tenant_id, job_id); ``run`` takes the loaded job.
    typing = False
    #: Failed jobs raise this after recording; logged without a traceback.
    throws = (JobFailed,)
    #: The worker's consumer sends no ``task-received``/``task-started`` for this task: the job
    #: sends both once it has its lease (:mod:`imposition.observability.events`), so Flower counts runs, not
    #: deliveries that park or are spare.
    Strategy = "tasks.worker:run_reported_strategy"
    #: Seconds SQS holds a cap-deferred copy (``Settings.defer_delay_s``, at most 900).
    defer_delay_s: int | None = None
    #: First retry backoff in seconds, doubled per attempt (``Settings.retry_backoff_base_s``).
    retry_backoff_base_s: int | None = None
    #: Cap on the retry backoff, at most the SQS DelaySeconds limit (``Settings.retry_backoff_max_s``).
    retry_backoff_max_s: int | None = None
    #: Tenants whose last release in this process found none of their jobs waiting: the next
    #: release skips the read of the waiting line and commits on condition none waits
    #: (:meth:`_successor`). A hint only: the condition decides; a wrong hint costs one retry.
    _none_waited_last: ClassVar[set[str]] = set()
    #: Tenants whose last commit in this process could not pass its slot within the cap (the tenant
    #: borrows above it): the next commit reads whether another tenant wants a slot, and if none
    #: does, passes its slot as a lent one (:meth:`_successor`, ``HandOff.lend``).
    _above_cap_last: ClassVar[set[str]] = set()
    #: Tenant → monotonic deadline: this process's last pending-index read at a commit of the tenant
    #: found no other tenant wanting a slot; until then its commits skip that read
    #: (``Settings.fair_share_recheck_s``). At most ``handoff_hint_tenants`` remembered.
    _alone_until: ClassVar[dict[str, float]] = {}

    # -- options ----------------------------------------------------------------------------------

    def _option(self, name: str) -> Any:
        value = getattr(self, name)
        return getattr(get_settings(), name) if value is None else value

    @property
    def clocks(self) -> Clocks:
        """The clocks this task runs with."""
        return get_clocks()

    def backoff_s(self, attempts: int) -> int:
        """SQS delay before attempt ``attempts + 1``: base × 2^(attempts − 1), capped (seconds)."""
        base, cap = self._option("retry_backoff_base_s"), self._option("retry_backoff_max_s")
        return backoff_s(base, attempts, cap)

    def worker_name(self) -> str:
        """``<node name>/<pid>``: which process holds a lease."""
        return f"{self.request.hostname or 'local'}/{os.getpid()}"

    # -- SQS-held retry ------------------------------------------------------------------------

    def retry(self, args=None, kwargs=None, exc=None, throw=True, eta=None, countdown=None,
              max_retries=None, **options):
        """Publish a copy of this job's message that SQS holds for ``countdown`` seconds, then ack.

        Same contract as :meth:`celery.app.task.Task.retry`, except that ``countdown`` becomes the
        SQS ``DelaySeconds`` of the copy (0–900 s, the SQS limit) instead of a Celery ETA held in
        worker memory, and the copy keeps the tenant's ``MessageGroupId``.

        Raises:
            ValueError: ``eta`` is given (SQS has no absolute delivery time), or ``countdown`` is
                outside 0–900 s.
            celery.exceptions.Retry: always when ``throw`` is true (Celery then acks the original).
        """
        if eta is not None:
            raise ValueError("eta is not supported on SQS; pass countdown (0–900 s) instead")
        delay_s = delay_seconds(countdown or 0, "countdown")
        call_kwargs = self.request.kwargs if kwargs is None else kwargs
        options["MessageGroupId"] = message_group_id(call_kwargs["tenant_id"])
        options["DelaySeconds"] = delay_s
        retry = super().retry(args=args, kwargs=kwargs, exc=exc, throw=False, max_retries=max_retries, **options)
        retry.when = delay_s  # for the log line "Retry in <n>s"; the delay itself is SQS's
        if throw:
            raise retry
        return retry

    # -- the lifecycle ---------------------------------------------------------------------------

    def __call__(self, /, *args: Any, **kwargs: Any) -> dict:
        """Run one delivery of a job under a lease (see module docstring).

        The message's kwargs are ``tenant_id``, ``job_id`` and ``after_attempt`` (the attempt this
        message follows; 0 or absent for the first message); anything else is ignored.

        Returns ``{"outcome": ..., "job_id": ..., "tenant_id": ...}``; outcome is ``succeeded`` or
        ``lease_lost``.

        Raises:
            celery.exceptions.Retry: parked (no copy: its tenant's next release wakes it), deferred
                (contention; a cap hit under the timer policy) or retried after a failure; Flower
                shows the task as RETRY.
            celery.exceptions.Ignore: a duplicate delivery, dropped (acked, no task event).
            celery.exceptions.Reject: the message is malformed or names another tenant than the
                job's (sent on to the dead-letter queue), or no lease could be taken for a reason
                other than the cap (SQS redelivers it).
            JobFailed: the job ended ``failed`` (recorded before raising).
        """
        request = self.request
        tenant_id, job_id, after_attempt = self._message_fields(args, kwargs)
        worker = self.worker_name()
        try:
            lease = transactions.acquire(job_id, tenant_id, worker)
        except TenantMismatch as exc:
            self._reject_as_poison(str(exc))
        except JobNotQueued as exc:
            if exc.status is None:  # no job item: a message no submission wrote (never silently dropped)
                self._reject_as_poison(f"job {job_id} does not exist (published without submission?)",
                                       reason="no_such_job")
            if not is_duplicate(exc, after_attempt):
                self._defer(job_id, tenant_id, exc)
            return self._drop_duplicate(job_id, tenant_id, exc)
        except CapReached as exc:
            try:
                acquired = self._park_or_acquire(job_id, tenant_id, worker, exc)
            except JobNotQueued as gone:  # a duplicate delivery parked or ran it meanwhile
                return self._drop_duplicate(job_id, tenant_id, gone)
            if acquired is None:
                raise Retry(f"parked: tenant {tenant_id} is at its cap; a release of its slots wakes it", exc=exc)  # noqa: B904 - Celery reads exc=, the park is no error of this except
            lease = acquired
        except LeaseContention as exc:
            self._defer(job_id, tenant_id, exc)
        except AcquireUnresolved as exc:
            resolved = self._resolve_acquire(exc)
            if resolved is None:
                raise Reject(str(exc), requeue=False) from exc  # SQS redelivers it; nothing was charged
            lease = resolved
        except _INFRASTRUCTURE_ERRORS as exc:
            # No lease is known to be held (an ambiguous acquire that did apply is the sweeper's),
            # so acking would lose the job: SQS keeps the message and redelivers it.
            log.error("could not acquire a lease for job %s (%s); leaving the message to SQS", job_id, exc)
            raise Reject(exc, requeue=False) from exc

        delivery = (request.properties or {}).get("delivery_info") or {}
        receipt = (delivery.get("sqs_queue"), (request.properties or {}).get("delivery_tag"))
        began = time.monotonic()
        outcome, handed = self._run_leased(lease, receipt, began)
        if handed is not None:
            self._run_in_place(handed, receipt, began)
        return outcome

    def _run_leased(self, lease: transactions.Lease, receipt: tuple[str | None, str | None],
                    began: float, known: JobItem | None = None) -> tuple[dict, Handed | None]:
        """Run the job under ``lease`` to its fenced end (module docstring, from ``Lease``), the
        message's visibility (``receipt``: queue URL and receipt handle) extended with the lease;
        ``began``: when the delivery began (monotonic s), for :meth:`_may_pass_slot`; ``known``:
        the job as its lease's transaction wrote it (None: read it).

        Returns ``(outcome, handed)``: the delivery's result and, after a commit that passed its
        slot on, the lease it took for the tenant's next waiting job, to run in place, with the
        commit's report still to send (None: nothing passed; the report is sent). Raises as
        :meth:`__call__` does after its acquire.
        """
        job_id, tenant_id = lease.job_id, lease.tenant_id
        heartbeat = Heartbeat(lease, self.clocks, queue_url=receipt[0], receipt_handle=receipt[1])
        with heartbeat:
            job = known or transactions.read_job(job_id)  # raises only after in-place retries: the sweeper's then
            signals.lease_acquired.send(sender=self, lease=lease, job=job, heartbeat=heartbeat)
            try:
                result = self.run(job=job, lease=lease, cancel=heartbeat.lost)
            except Retry:
                raise
            except Exception as exc:  # noqa: BLE001 - every job error is recorded, none escapes
                return self._on_job_error(job, lease, heartbeat, exc), None
        if heartbeat.lost.is_set():
            return self._on_lease_lost(lease, heartbeat.lost_detail, heartbeat, int(job.attempts)), None
        signals.lease_releasing.send(sender=self, lease=lease, outcome=JobOutcome.SUCCEEDED)
        in_place = self._may_pass_slot(began)
        successor = self._successor(tenant_id, lease_to=lease.worker if in_place else None)
        try:
            written = transactions.commit_success(
                lease, output_key=result.output_key, sheets=result.sheets, sides=result.sides,
                warnings=list(result.warnings), preview_keys=list(result.preview_keys),
                hand_off=successor and successor.hand_off,
            )
        except LeaseLost as exc:
            return self._on_lease_lost(lease, str(exc), heartbeat, int(job.attempts)), None
        except (*_INFRASTRUCTURE_ERRORS, LeaseContention) as exc:
            return self._on_release_unreachable(lease, exc, heartbeat, int(job.attempts)), None
        signals.lease_released.send(
            sender=self, lease=lease, outcome=JobOutcome.SUCCEEDED,
            passed=(successor.hand_off.lease or successor.hand_off.claimed) if successor is not None else None)
        next_run = self._hand_on(lease, successor, in_place)
        for name, value in written.items():  # the job as committed, without reading it back
            setattr(job, name, value)

        def report() -> None:
            signals.job_finished.send(sender=self, job=job, outcome=JobOutcome.SUCCEEDED, error=None)

        outcome = {"outcome": JobOutcome.SUCCEEDED, "job_id": job_id, "tenant_id": tenant_id}
        if next_run is not None:
            return outcome, Handed(next_run[0], report, next_run[1])
        report()
        return outcome, None

    def _hand_on(self, lease: transactions.Lease, successor: Successor | None,
                 in_place: bool) -> tuple[transactions.Lease, JobItem | None] | None:
        """After the commit of ``lease`` with ``successor``'s hand-off (:meth:`_successor`): hand on
        what it freed (:meth:`_hand_off`) and, for a delivery that may run on in place
        (``in_place``, :meth:`_may_pass_slot`), the lease to run next here with the job as written
        (None: read it): the slot the commit passed to the tenant's next job, else the one it
        passed to another tenant's job (``HandOff.claimed``), else a take from the pool
        (:meth:`_take_from_pool`), else the job its wake brought (:meth:`_take_held`). None: the
        chain ends (the delivery goes back to SQS for its next message). Never raises."""
        held = HeldWake() if in_place else None
        passed = self._hand_off(lease.tenant_id, successor, held)
        if successor is not None and passed is not None:
            return passed, transactions.apply_pass(successor.jobs[passed.job_id], successor.hand_off)
        taken = successor.hand_off.claimed if successor is not None else None
        if taken is not None:
            log.info("passed the slot of job %s to job %s of %s in the commit", lease.job_id, taken.job_id,
                     taken.tenant_id)
        elif in_place and successor is not None:
            if successor.hand_off.claim is not None:  # refused in the commit: taken by another releaser
                successor.pool.claim = None
            taken = self._take_from_pool(successor.pool, lease.worker)
        if held is not None and held.job is not None:
            taken = self._take_held(held.job, lease.worker, publish_only=taken is not None) or taken
        return (taken, None) if taken is not None else None

    @staticmethod
    def _may_pass_slot(began: float) -> bool:
        """A commit of this delivery may pass its slot to the tenant's next waiting job, to run in
        place: ``handoff_in_place_s`` > 0, the delivery (``began``, monotonic s) has run less than
        that, and its worker's warm shutdown has not begun (:func:`tasks.worker.shutting_down`)."""
        limit_s = get_settings().handoff_in_place_s
        return limit_s > 0 and time.monotonic() - began < limit_s and not shutting_down()

    def _run_in_place(self, handed: Handed, receipt: tuple[str | None, str | None], began: float) -> None:
        """Run the job a commit passed its slot to here, without a message (docs/design.md §3,
        "Hand-off in place"), and so on down the tenant's waiting line while its commits pass
        their slots on, or take a slot that went back to the pool for another tenant's queued job
        (:meth:`_take_from_pool`), while :meth:`_may_pass_slot` holds (until this delivery has run
        ``Settings.handoff_in_place_s`` since ``began``, monotonic s, or its worker's warm shutdown
        has begun); a later commit hands its place on by a message, as usual. Each job runs under
        the lease its predecessor's commit (or take) took for it and its own Celery request (task
        id = job id, as its message would have; ``in_place_of``: this delivery's id), with this
        delivery's message kept invisible; each commit's report (``job_finished``) is sent in its
        own request.

        An outcome of the job itself (retry, failure, lost lease) is recorded by its own run and
        ends the chain; never raises: this delivery's own job is committed already. A crash leaves
        the passed lease to the sweeper, as any crash during a run does.
        """
        parent_id = self.request.id
        handed.report()
        next_handed: Handed | None = handed
        while next_handed is not None:
            lease = next_handed.lease  # another tenant's after a take from the pool
            log.info("running handed job %s of %s in place (after %s)", lease.job_id, lease.tenant_id, parent_id)
            self.push_request(id=lease.job_id, in_place_of=parent_id, in_place_began=time.time(), retries=0,
                              eta=None, kwargs={"tenant_id": lease.tenant_id, "job_id": lease.job_id}, args=(),
                              argsrepr=None, kwargsrepr=None)
            try:
                next_handed = self._run_one_in_place(next_handed, receipt, began)
            finally:
                self.pop_request()

    def _run_one_in_place(self, handed: Handed, receipt: tuple[str | None, str | None],
                          began: float) -> Handed | None:
        """Run one handed job in place under its own request (pushed by :meth:`_run_in_place`) and
        send its commit's report; returns what that commit passed on, or None (the chain ends).
        Never raises."""
        lease = handed.lease
        try:
            _, passed_on = self._run_leased(lease, receipt, began, known=handed.job)
        except (Retry, Ignore, Reject, JobFailed) as ended:  # recorded by the run; it has no message to ack
            log.info("job %s run in place ended: %s", lease.job_id, ended)
            return None
        except Exception:  # noqa: BLE001 - as Celery would log it; the lease is the sweeper's
            log.exception("job %s run in place raised; its lease is left to the sweeper", lease.job_id)
            return None
        if passed_on is not None:
            passed_on.report()
        return passed_on

    def _message_fields(self, args: tuple, kwargs: dict) -> tuple[str, str, int]:
        """``(tenant_id, job_id, after_attempt)`` of the message, or reject it as poison.

        A message whose fields are missing or malformed can never run: it is rejected and sent on
        to the dead-letter queue (:func:`tasks.worker.expedite_to_dead_letter_queue`), not acked.
        """
        after_attempt = kwargs.get("after_attempt", 0)
        problems, checked = [], []
        for check, value in ((validate_tenant_id, kwargs.get("tenant_id")), (validate_job_id, kwargs.get("job_id"))):
            try:
                checked.append(check(value))
            except ValueError as exc:
                problems.append(str(exc))
        if not isinstance(after_attempt, int) or isinstance(after_attempt, bool) or after_attempt < 0:
            problems.append(f"after_attempt={shown_value(after_attempt)}: must be an integer >= 0")
        if args:
            problems.append(f"positional arguments {shown_value(args)}: the message carries keyword arguments only")
        if problems:
            self._reject_as_poison("; ".join(problems))
        tenant_id, job_id = checked
        return tenant_id, job_id, after_attempt

    def _reject_as_poison(self, problem: str, reason: str = "invalid_fields") -> NoReturn:
        """Reject this delivery towards the dead-letter queue as ``reason`` (``invalid_fields``, or
        ``no_such_job`` for a message naming a job that has no item); never returns.

        Raises:
            celery.exceptions.Reject: always (not requeued; its visibility is reset so that SQS's
                redrive moves it after ``maxReceiveCount`` quick receives).
        """
        log.error("refusing message of task %s (id %s): %s", self.name, self.request.id, problem)
        properties = self.request.properties or {}
        expedite_to_dead_letter_queue(properties.get("delivery_info"), properties.get("delivery_tag"), reason)
        raise Reject(problem, requeue=False)

    def _park_or_acquire(self, job_id: str, tenant_id: str, worker: str,
                         exc: CapReached) -> transactions.Lease | None:
        """The tenant is at its cap: park the job (None: ack the message), or, if a slot freed
        meanwhile, acquire after all (the lease). Under ``waiting_policy = "timer"``: defer.

        Raises:
            celery.exceptions.Retry / Reject: deferred (timer policy, or parking kept losing to
                acquires) / the park could not be written (SQS keeps the message).
            JobNotQueued: the job moved on meanwhile (a duplicate delivery parked or ran it).
        """
        if get_settings().waiting_policy == "timer":
            self._defer(job_id, tenant_id, exc)
        for _ in range(get_settings().lease_conflict_attempts):
            try:
                if exc.may_borrow:  # the tier borrows: an idle slot above the reserve, if there is one
                    try:
                        return transactions.acquire(job_id, tenant_id, worker, borrow=True)
                    except CapReached as refused:
                        exc = refused
                if waiting.park(job_id, tenant_id):
                    log.info("parked job %s of %s: %s", job_id, tenant_id, exc)
                    signals.job_deferred.send(sender=self, job_id=job_id, tenant_id=tenant_id, reason="cap",
                                              delay_s=None)
                    return None
                return transactions.acquire(job_id, tenant_id, worker)
            except CapReached as again:
                exc = again
            except LeaseContention as contention:
                self._defer(job_id, tenant_id, contention)
            except _INFRASTRUCTURE_ERRORS as infra:
                log.error("could not park job %s (%s); leaving the message to SQS", job_id, infra)
                raise Reject(infra, requeue=False) from infra
        self._defer(job_id, tenant_id, exc)

    def _drop_duplicate(self, job_id: str, tenant_id: str, exc: JobNotQueued) -> NoReturn:
        """Ack a spare delivery with no task event (``Ignore``): it is no run of the job."""
        log.info("dropping duplicate delivery of job %s (status %s)", job_id, exc.status)
        signals.job_dropped.send(sender=self, job_id=job_id, tenant_id=tenant_id, status=exc.status)
        raise Ignore(f"duplicate delivery of job {job_id} (status {exc.status}) dropped")

    def _successor(self, tenant_id: str, *, lease_to: str | None = None) -> Successor | None:
        """The tenant's oldest waiting jobs (``handoff_scan_limit`` of them, oldest first) and the
        :class:`~leases.transactions.HandOff` that passes the first one still waiting the place of
        the release about to be written (``handoff`` policy only), with ``lease_to`` its slot too
        (a lease for that worker); with none waiting, a HandOff without candidates (the release is
        then conditional on none waiting: no wake follows it); None when the read failed (then the
        release frees the place and :meth:`_hand_off` wakes the usual way). A tenant whose last
        release in this process found none waiting is not read: the HandOff without candidates
        (if a job parked since, the condition fails, the release frees the place and the wake
        follows, as after a read that found none).

        Where the slot could pass (``lease_to``), who else wants one is read first
        (:meth:`_read_pool`, one read, kept in ``Successor.pool`` for :meth:`_take_from_pool`; not
        made within ``fair_share_recheck_s`` of a read of this process that found nobody else, then
        taken as "nobody else"). If a tenant that could take the slot from the pool holds at least
        two leases fewer (:func:`leases.policy.yields_slot`, the fair share) and has a due queued
        job (:meth:`_due_claim`), the slot passes to that job in the release's transaction
        (``HandOff.claim``) and only the place to the tenant's own; if that job was taken meanwhile
        (as when several releasers read the same claim at once), the release passes its slot in
        place after all, in its next try. Else a slot passed above the cap may go on as
        a lent one when no other tenant wants a slot: for a tenant whose last commit in this process
        could not pass within the cap (:attr:`_above_cap_last`) the lend is tried first
        (``HandOff.lend``); otherwise only once the pass within the cap is refused and a lend could
        apply (``HandOff.lend_if``, answered from the same read), so a first commit above the cap
        lends as well."""
        s = get_settings()
        if s.waiting_policy != "handoff":
            return None
        pool = PoolRead()
        if tenant_id in self._none_waited_last:  # most likely none waits still: the condition checks it
            return Successor({}, transactions.HandOff([], time.time()), pool)
        try:
            jobs = waiting.oldest_waiting(tenant_id, s.handoff_scan_limit)
        except Exception as exc:  # noqa: BLE001 - the release must not depend on this read
            log.info("could not read tenant %s's next waiting job (%s); waking after the release", tenant_id, exc)
            return None
        if not jobs:  # the release then commits on condition none waits, and needs no wake
            return Successor({}, transactions.HandOff([], time.time()), pool)
        none_other = False
        claim = None
        if lease_to is not None:
            none_other = self._alone_until.get(tenant_id, 0.0) > time.monotonic() or self._read_pool(tenant_id, pool)
            if (pool.wanting and pool.own is not None
                    and policy.yields_slot(pool.own, pool.wanting, s.default_cap, time.time())):
                due = self._safe_due_claim(pool, poorer_than=int(pool.own.in_flight or 0))
                if due is not None:
                    log.info("tenant %s gives its slot to job %s of %s, a tenant with fewer leases, if it is "
                             "still queued", tenant_id, due.job_id, due.tenant_id)
                    claim = transactions.Claim(due.job_id, due.tenant_id)
        hinted = lease_to is not None and tenant_id in self._above_cap_last
        return Successor({j.job_id: j for j in jobs}, transactions.HandOff(
            [j.job_id for j in jobs], time.time(), lease_to=lease_to,
            lend=hinted and none_other,
            lend_if=None if lease_to is None or hinted else lambda: none_other,
            parked_at={j.job_id: float(j.parked_at) for j in jobs if j.parked_at is not None}, claim=claim), pool)

    def _read_pool(self, tenant_id: str, pool: PoolRead) -> bool:
        """:meth:`_none_other_wants_slot` into ``pool``; if none does, the process skips the read at
        the tenant's commits for ``Settings.fair_share_recheck_s`` (:attr:`_alone_until`)."""
        none_other = self._none_other_wants_slot(tenant_id, pool)
        recheck_s = get_settings().fair_share_recheck_s
        if none_other and recheck_s > 0 and get_settings().handoff_hint_tenants > 0:
            if len(self._alone_until) >= get_settings().handoff_hint_tenants:
                self._alone_until.clear()
            self._alone_until[tenant_id] = time.monotonic() + recheck_s
        else:
            self._alone_until.pop(tenant_id, None)
        return none_other

    @staticmethod
    def _none_other_wants_slot(tenant_id: str, pool: PoolRead | None = None) -> bool:
        """No tenant but ``tenant_id`` wants a slot (:func:`leases.waiting.tenants_wanting_slot`,
        read now, and kept in ``pool``); a failed read: False (the slot then passes within the cap
        only). Never raises."""
        try:
            own, wanting = waiting.pool_read(tenant_id)
        except Exception as exc:  # noqa: BLE001 - then the slot passes within the cap only
            log.info("could not read whether another tenant wants a slot (%s); not lending one", exc)
            return False
        if pool is not None:
            pool.wanting, pool.own = wanting, own
        return not wanting

    def _take_held(self, woken: tuple[str, str], worker: str, *, publish_only: bool = False) -> transactions.Lease | None:
        """Take the slot this release freed for ``woken`` (``(tenant_id, job_id)``: the first job its
        wakes brought, held back unpublished by :class:`HeldWake`), to run in place: an ordinary
        acquire, or, refused at the cap where the tier may borrow, a borrowing one. Refused (or
        ``publish_only``: the slot went to another job already), the job is published as the wake
        would have; a publish that fails is the sweeper's (the job is ``queued``, its ``due_at``
        passes). An acquire whose outcome DynamoDB could not tell is settled as a delivery's is
        (:meth:`_resolve_acquire`): its lease if it applied, else the job is published. Never raises."""
        tenant_id, job_id = woken
        lease = None
        if not publish_only:
            try:
                try:
                    lease = transactions.acquire(job_id, tenant_id, worker)
                except CapReached as refused:
                    if not refused.may_borrow:
                        raise
                    lease = transactions.acquire(job_id, tenant_id, worker, borrow=True)
            except (CapReached, JobNotQueued, TenantMismatch, LeaseContention) as refused:
                log.info("job %s woken by a release not taken in place (%s); publishing it", job_id, refused)
            except AcquireUnresolved as unresolved:  # it may have applied: run it if it did, else publish
                lease = self._resolve_acquire(unresolved)
            except _INFRASTRUCTURE_ERRORS as exc:
                log.warning("taking woken job %s in place failed (%s); publishing it", job_id, exc)
        if lease is not None:
            log.info("took job %s of %s, woken by this release, in place", job_id, tenant_id)
            return lease
        try:
            publish_job(tenant_id, job_id)
        except Exception as exc:  # noqa: BLE001 - the sweeper re-publishes a queued job whose due_at passed
            log.warning("could not publish woken job %s (the sweeper will): %s", job_id, exc)
        return None

    def _take_from_pool(self, pool: PoolRead, worker: str) -> transactions.Lease | None:
        """After a commit whose slot went back to the pool because another tenant wants one (the
        lend refused, on ``pool``'s read): take that slot here for the job ``pool.claim``, else
        :meth:`_due_claim`'s (the oldest due queued
        job of the first tenant in :func:`leases.policy.claimant_order` that has one), with an
        ordinary acquire for ``worker``, to run in place (:meth:`_run_in_place`). The job's own
        message, delivered later, finds it running and is dropped as a duplicate.

        Only a job whose message is due is taken (``due_at`` by now, read and conditioned: not one
        in retry backoff). Returns the lease, or None: nobody to take (not read, nobody queued
        within its cap, nothing due), or the acquire refused (the cap, the job gone meanwhile) or
        failed; the job's message then brings it as usual. An acquire whose outcome DynamoDB could
        not tell is settled as a delivery's is (:meth:`_resolve_acquire`: the lease if it applied).
        Never raises.
        """
        now = time.time()
        job: JobItem | None = None
        try:
            job = pool.claim if pool.claim is not None else self._due_claim(pool)
            if job is None:  # nobody within its cap, or their queued jobs in retry backoff
                return None
            tenant_id = job.tenant_id
            lease = transactions.acquire(job.job_id, tenant_id, worker, due_by=now)
        except (CapReached, JobNotQueued, TenantMismatch, LeaseContention) as refused:
            log.info("no take from the pool for job %s: %s", job.job_id if job else None, refused)
            return None
        except AcquireUnresolved as unresolved:  # it may have applied: run it if it did (as a delivery does)
            return self._resolve_acquire(unresolved)
        except _INFRASTRUCTURE_ERRORS as exc:
            log.warning("take from the pool failed (its message brings the job): %s", exc)
            return None
        log.info("took job %s of %s from the pool, for a slot another tenant freed", job.job_id, tenant_id)
        return lease

    @staticmethod
    def _due_claim(pool: PoolRead, poorer_than: int | None = None) -> JobItem | None:
        """The job a take from the pool would run: the oldest queued job whose message is due of the
        first tenant in :func:`leases.policy.claimant_order` (fewest leases first) that has one
        (:func:`leases.waiting.oldest_due`: not one in retry backoff), kept in ``pool.claim``; with
        ``poorer_than``, only a tenant holding at least two leases fewer (the fair share,
        :func:`leases.policy.yields_slot`). None: nobody, or no due job. Raises as the index
        query does."""
        if not pool.wanting:
            return None
        now = time.time()
        for tenant_id in policy.claimant_order(pool.wanting, get_settings().default_cap, now):
            if poorer_than is not None and int(pool.wanting[tenant_id].in_flight or 0) > poorer_than - 2:
                break  # the fewest leases first: none after it is poorer
            job = waiting.oldest_due(tenant_id, now=now)
            if job is not None:
                pool.claim = job
                return job
        return None

    @classmethod
    def _safe_due_claim(cls, pool: PoolRead, poorer_than: int) -> JobItem | None:
        """:meth:`_due_claim`; a failed read: None (the slot passes in place). Never raises."""
        try:
            return cls._due_claim(pool, poorer_than=poorer_than)
        except Exception as exc:  # noqa: BLE001 - the release must not depend on this read
            log.info("could not read a claimant's due job (%s); passing the slot in place", exc)
            return None

    @staticmethod
    def _remember(hints: set[str], tenant_id: str, yes: bool) -> None:
        """Add ``tenant_id`` to one of this process's release hints (:attr:`_none_waited_last`,
        :attr:`_above_cap_last`), or drop it (``yes`` False); at most ``Settings.handoff_hint_tenants``
        tenants are remembered (past that, the hints start again empty)."""
        if not yes:
            hints.discard(tenant_id)
            return
        limit = get_settings().handoff_hint_tenants
        if len(hints) >= limit:
            hints.clear()
        if limit > 0:
            hints.add(tenant_id)

    def _hand_off(self, tenant_id: str, successor: Successor | None = None,
                  held: HeldWake | None = None) -> transactions.Lease | None:
        """After a release: report the job the release handed its place to, and publish it unless
        the release passed it the slot too (then return that lease, for the caller to run in
        place); or else, unless the release found none waiting, wake the tenant's oldest waiting
        jobs while it has room; then, if a slot was freed, offer any slot above the cluster's
        reserve to a borrowing tier. With ``held``, the first job the place passed to or these
        wakes bring is not published but held there for the caller to take in place
        (:meth:`_take_held`). Never
        raises (a wake or publish that fails is the sweeper's: a woken job is ``queued`` with
        ``due_at`` set, so a lost publish is re-published)."""
        publish = held if held is not None else publish_job
        passed = successor[1].lease if successor is not None else None
        if successor is not None:
            self._remember(self._none_waited_last, tenant_id, successor[1].none_waited is True)
            if successor[1].slot_refused or (passed is not None and not successor[1].lent):
                self._remember(self._above_cap_last, tenant_id, successor[1].slot_refused)
        try:
            handed_id = successor[1].job_id if successor is not None else None
            if successor is not None and handed_id is not None:
                jobs, hand_off, _ = successor
                job = jobs[handed_id]
                if passed is None:  # held, where the caller may take it in place (a take from the pool failed)
                    publish(tenant_id, job.job_id)
                job.woken_at, job.woken_by = hand_off.woken_at, hand_off.reason
                signals.job_woken.send(sender=self, job=job, reason="release")
            elif successor is None or not successor[1].none_waited:  # else none waited at the release
                waiting.wake(tenant_id, publish=publish,
                             on_woken=lambda job: signals.job_woken.send(sender=self, job=job, reason="release"))
            if passed is None and (successor is None or successor[1].claimed is None):  # a passed slot stays busy
                waiting.wake_borrowers(publish=publish,
                                       on_woken=lambda job: signals.job_woken.send(sender=self, job=job, reason="borrow"))
        except Exception as exc:  # noqa: BLE001 - the job's own outcome is committed; the sweeper wakes
            log.warning("hand-off for tenant %s failed (the sweeper will wake its jobs): %s", tenant_id, exc)
        return passed

    def _defer(self, job_id: str, tenant_id: str, exc: Exception) -> NoReturn:
        """Publish the deferred copy, then count it (best effort); raises Retry (ack) or Reject."""
        reason = {CapReached: "cap", JobNotQueued: "release_pending"}.get(type(exc), "contention")
        delay_s = self._option("defer_delay_s")
        try:
            retry = self.retry(countdown=delay_s, exc=exc, throw=False)
        except _INFRASTRUCTURE_ERRORS as publish_exc:
            log.error("could not publish the deferred copy of job %s (%s); leaving the message to SQS",
                      job_id, publish_exc)
            raise Reject(publish_exc, requeue=False) from publish_exc
        transactions.record_defer(job_id, delay_s=delay_s)
        log.info("deferring job %s of %s by %s s: %s", job_id, tenant_id, delay_s, exc)
        signals.job_deferred.send(sender=self, job_id=job_id, tenant_id=tenant_id, reason=reason, delay_s=delay_s)
        raise retry

    def _on_lease_lost(self, lease: transactions.Lease, detail: str, heartbeat, attempt: int) -> dict:
        log.warning("job %s: lease lost, committing nothing (%s)", lease.job_id, detail)
        signals.lease_lost.send(sender=self, lease=lease, detail=detail)
        if heartbeat.lost_cause == "infra_lost":
            self._report_infra_lost(heartbeat.lease, attempt, detail)
        return {"outcome": JobOutcome.LEASE_LOST, "job_id": lease.job_id, "tenant_id": lease.tenant_id}

    def _until_sweeper_grace(self, expires_at: float) -> Retrying:
        """Retries of a DynamoDB write on infrastructure errors, jittered and at least once per
        heartbeat interval, for as long as the sweeper waits for an ``infra_lost`` report of a lease
        that expires (or expired) at ``expires_at``: until ``Clocks.infra_report_grace_s`` past it;
        the last error is re-raised."""
        clocks = self.clocks
        return Retrying(
            retry=retry_if_exception_type(_INFRASTRUCTURE_ERRORS),
            wait=wait_random_exponential(multiplier=0.2, max=clocks.heartbeat_interval_s),
            stop=stop_after_delay(max(0.0, expires_at + clocks.infra_report_grace_s - time.time())),
            reraise=True,
        )

    def _resolve_acquire(self, unresolved: AcquireUnresolved) -> transactions.Lease | None:
        """Settle an acquire whose outcome DynamoDB could not tell (:func:`transactions.resolve_acquire`),
        retried (jittered) until DynamoDB answers, for as long as the sweeper would wait for an
        ``infra_lost`` report of that attempt. Returns the lease if the acquire applied and is still
        ours (the job runs), else None (the message is left for redelivery); never raises."""
        log.warning("job %s: %s; resolving it once DynamoDB answers", unresolved.job_id, unresolved)
        try:
            lease = self._until_sweeper_grace(unresolved.expires_at)(transactions.resolve_acquire, unresolved)
        except _INFRASTRUCTURE_ERRORS as exc:
            log.error("job %s: acquire still unresolved when the sweeper's grace ended (%s); if it applied, its "
                      "attempt counts against the budget", unresolved.job_id, exc)
            return None
        log.warning("job %s: unresolved acquire %s", unresolved.job_id,
                    "applied: running the job under it" if lease else "did not apply, or was reclaimed (not charged)")
        return lease

    def _on_release_unreachable(self, lease: transactions.Lease, exc: BaseException, heartbeat,
                                attempt: int) -> dict:
        """A fenced release (commit, retry, failure) could not be confirmed: DynamoDB kept failing
        (its read-back of ``release_id`` too). It may have applied; if it did not, the lease expires
        and the sweeper reclaims it, so the attempt is reported ``infra_lost`` (not charged; a no-op
        if the release did apply and the job is final). The job's webhook is in the outbox either way."""
        detail = f"{RELEASE_UNREACHABLE}: {exc}"
        log.warning("job %s: %s", lease.job_id, detail)
        signals.lease_lost.send(sender=self, lease=lease, detail=detail)
        self._report_infra_lost(heartbeat.lease, attempt, detail)  # its last known expiry
        return {"outcome": JobOutcome.LEASE_LOST, "job_id": lease.job_id, "tenant_id": lease.tenant_id}

    def _report_infra_lost(self, lease: transactions.Lease, attempt: int, detail: str) -> bool:
        """This attempt lost its lease because DynamoDB could not be reached: record it
        ``infra_lost`` so that it does not count against the budget (issue 15, item 5).

        Retried (jittered, at least once per heartbeat interval) until DynamoDB answers, for as long
        as the sweeper waits for the report: until ``Clocks.infra_report_grace_s`` past the lease's
        last known expiry. Never raises; returns True if the report was written.
        """
        try:
            written = self._until_sweeper_grace(lease.expires_at)(transactions.record_infra_lost, lease.job_id,
                                                                  attempt, detail=detail)
        except _INFRASTRUCTURE_ERRORS as exc:
            log.error("job %s: could not report attempt %s as infra_lost before the sweeper's grace ended (%s); "
                      "it counts against the budget", lease.job_id, attempt, exc)
            return False
        if written:
            log.warning("job %s: attempt %s recorded infra_lost (not charged): %s", lease.job_id, attempt, detail)
            signals.attempt_infra_lost.send(sender=self, lease=lease, attempt=attempt)
        else:
            log.warning("job %s: attempt %s not recorded infra_lost: the job is final already, or has had "
                        "infra_retry_limit uncharged attempts (this one counts)", lease.job_id, attempt)
        return written

    def _release(self, lease: transactions.Lease, outcome: JobOutcome, reason: str, release, heartbeat,
                 attempt: int) -> dict | None:
        """Run the fenced ``release(hand_off)`` for ``outcome`` (``retrying``/``failed``; a failure
        hands its place to the tenant's next waiting job) and report it.

        Returns None once released and :data:`signals.job_finished` sent, or the ``lease_lost``
        result if the release was refused (the lease is someone else's: nothing was written).
        """
        signals.lease_releasing.send(sender=self, lease=lease, outcome=outcome)
        successor = self._successor(lease.tenant_id) if outcome == JobOutcome.FAILED else None  # a retry keeps its place
        try:
            release(successor and successor[1])
        except LeaseLost as lost:
            return self._on_lease_lost(lease, str(lost), heartbeat, attempt)
        except (*_INFRASTRUCTURE_ERRORS, LeaseContention) as unreachable:
            return self._on_release_unreachable(lease, unreachable, heartbeat, attempt)
        signals.lease_released.send(sender=self, lease=lease, outcome=outcome)
        self._hand_off(lease.tenant_id, successor)
        committed = JobStatus.FAILED if outcome == JobOutcome.FAILED else JobStatus.QUEUED
        job = self._read_committed(JobItem(lease.job_id, tenant_id=lease.tenant_id), committed)
        signals.job_finished.send(sender=self, job=job, outcome=outcome, error=reason)
        return None

    @staticmethod
    def _read_committed(known: JobItem, status: JobStatus) -> JobItem:
        """The job as its release committed it (read back, with in-place retries), for
        :data:`signals.job_finished`; if DynamoDB cannot answer, ``known`` with the committed
        ``status``, so the job's end is still reported (its webhook is in the outbox either way)."""
        try:
            return transactions.read_job(known.job_id)
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
                retry = self.retry(kwargs={**self.request.kwargs, "after_attempt": attempts}, countdown=delay_s,
                                   exc=exc, throw=False)
            except (Reject, *_INFRASTRUCTURE_ERRORS) as publish_exc:  # Celery's retry wraps a failed publish in Reject
                # No copy: release anyway (the job is queued again, its slot free) and leave this
                # message to SQS, which redelivers it; the reconciler covers a lost one.
                log.warning("job %s: the retry copy could not be published (%s); releasing, and leaving the "
                            "message to SQS", job.job_id, publish_exc)
                retry = Reject(publish_exc, requeue=False)
            lost = self._release(lease, JobOutcome.RETRYING, reason,
                                 lambda _: transactions.release_for_retry(
                                     lease, error=reason, error_code=code, delay_s=delay_s,
                                     infra_attempt=attempts if infra else None), heartbeat, attempts)
            if lost is not None:
                return lost
            raise retry
        if retryable:
            reason = f"out of attempts ({job.charged_attempts}/{job.max_attempts}): {reason}"
        log.warning("job %s failed (%s): %s", job.job_id, code, reason)
        lost = self._release(lease, JobOutcome.FAILED, reason,
                             lambda hand_off: transactions.fail_job(lease, error=reason, error_code=code,
                                                                    hand_off=hand_off),
                             heartbeat, attempts)
        if lost is not None:
            return lost
        raise JobFailed(job.job_id, code, reason) from exc
