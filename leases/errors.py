"""Errors of the lease layer, one root.

::

    LeaseError
    ├── CapReached          the tenant holds as many leases as its cap allows: defer the job
    ├── JobNotQueued        the job is running elsewhere or finished: a duplicate, ack and drop
    │                       (unless the message follows the attempt still running: defer it)
    ├── TenantMismatch      the job belongs to another tenant than the one the caller named: a
    │                       forged or corrupt message, never run (poison: dead-letter queue)
    ├── LeaseContention     conflicts or throttling outlasted the bounded retries: defer the job
    ├── AcquireUnresolved   an acquire got no answer (or a 5xx) and its read-back could not reach
    │                       DynamoDB either: it may have applied; resolve it, never charge it
    ├── LeaseLost           the fencing token is gone (reclaimed by the sweeper): commit nothing
    ├── AdmitRefused        admit's transaction was refused by a condition: the job's claim is
    │                       held by another job, or its job id is taken; nothing written
    └── WrongJobStatus      an operator's cancel or retry found the job in a status it does not
                            apply to (cancel: queued or waiting; retry: failed); nothing written

Each wraps the PynamoDB/botocore error it came from as ``__cause__``; ``reason_codes`` keeps the
DynamoDB cancellation reason codes, one per transaction item, in request order.
"""

from __future__ import annotations

from leases import policy


class LeaseError(Exception):
    """Root of the lease layer's errors."""

    def __init__(self, message: str, *, reason_codes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reason_codes = reason_codes


class CapReached(LeaseError):
    """The tenant's ``in_flight`` is not below its cap (docs/design.md §2 layer 2), or the tenant is briefly
    frozen while ``imposition audit --repair`` recounts it (``repair_until``, epoch s)."""

    def __init__(self, tenant_id: str, in_flight: int | None, cap: int | None, *,
                 repair_until: float | None = None, burst_cap: int | None = None, borrowing: bool = False,
                 **kw) -> None:
        detail = f" and frozen for a counter repair until {repair_until:.0f}" if repair_until else ""
        if borrowing:
            detail += f"; no slot to borrow (burst cap {burst_cap}, or the cluster is down to its reserve)"
        super().__init__(
            f"tenant {tenant_id!r} is at its cap (in_flight={in_flight}, cap={cap}){detail}", **kw
        )
        self.tenant_id = tenant_id
        self.in_flight = in_flight
        self.cap = cap
        self.repair_until = repair_until
        #: The tier's burst cap (None: no borrowing); ``borrowing``: this was a refused borrow.
        self.burst_cap = burst_cap
        self.borrowing = borrowing

    @property
    def may_borrow(self) -> bool:
        """True if the tier lets the tenant borrow above its cap and it is below its burst cap
        (:func:`leases.policy.borrows`, :data:`leases.policy.BORROW_TENANT`; the cluster's side is
        the borrowing acquire's condition)."""
        if self.borrowing or self.repair_until is not None or self.cap is None:
            return False
        state = policy.TenantState(in_flight=self.in_flight or 0, cap=self.cap, burst_cap=self.burst_cap)
        return policy.borrows(state, self.cap) and policy.holds(policy.BORROW_TENANT, state, self.cap)


class JobNotQueued(LeaseError):
    """The job's status is not ``queued`` (a duplicate delivery, or a finished job).

    ``status`` and ``attempts`` are the job's as the transaction found them (None if the job is
    missing), so the caller can tell a duplicate from a copy that arrived before the transaction
    re-queueing the job committed.
    """

    def __init__(self, job_id: str, status: str | None, attempts: int | None = None, **kw) -> None:
        super().__init__(f"job {job_id!r} is not queued (status={status}, attempts={attempts})", **kw)
        self.job_id = job_id
        self.status = status
        self.attempts = attempts


class TenantMismatch(LeaseError):
    """The job item's ``tenant_id`` is not the tenant the acquire was asked for (nothing written).

    The acquire's cap check counts the tenant the caller names, so a message naming the wrong
    tenant would run the job under that tenant's cap; it is refused instead.
    """

    def __init__(self, job_id: str, tenant_id: str, job_tenant_id: str, **kw) -> None:
        super().__init__(
            f"job {job_id!r} belongs to tenant {job_tenant_id!r}, not to tenant_id={tenant_id!r}", **kw
        )
        self.job_id = job_id
        self.tenant_id = tenant_id
        self.job_tenant_id = job_tenant_id


class LeaseContention(LeaseError):
    """Transaction conflicts or throttling persisted through every retry."""


class AcquireUnresolved(LeaseError):
    """An acquire's outcome is unknown: its transaction got no answer or a 5xx, and the strongly
    consistent read-back of the lease failed too (DynamoDB could not be reached).

    The acquire may have applied (a lease under ``token``, attempt counted). The caller resolves it
    once DynamoDB answers (:func:`leases.attempts.resolve_acquire`), so that an attempt the
    infrastructure cost is not charged, and leaves the message for redelivery.

    Attributes:
        job_id, tenant_id, worker, token (the fencing token the acquire would have written),
        expires_at (epoch s: when that lease would expire).
    """

    def __init__(self, job_id: str, tenant_id: str, worker: str, token: str, expires_at: float, **kw) -> None:
        super().__init__(f"acquire of job {job_id!r} (token {token[:8]}…) unresolved: DynamoDB could not be "
                         "reached to read it back", **kw)
        self.job_id = job_id
        self.tenant_id = tenant_id
        self.worker = worker
        self.token = token
        self.expires_at = expires_at

    def __reduce__(self):
        """Picklable (a pool child hands its errors to the worker's main process)."""
        return (type(self), (self.job_id, self.tenant_id, self.worker, self.token, self.expires_at))


class LeaseLost(LeaseError):
    """The lease's fencing token no longer matches: the lease was reclaimed or released."""

    def __init__(self, job_id: str, token: str, detail: str = "", **kw) -> None:
        super().__init__(f"lease on job {job_id!r} (token {token[:8]}…) is lost {detail}".rstrip(), **kw)
        self.job_id = job_id
        self.token = token


class AdmitRefused(LeaseError):
    """:func:`leases.waiting.admit` was refused by a condition; nothing was written. What the refusal
    means to the caller is the layer above's to say (:func:`imposition.admission.claims.refusal`).

    Attributes:
        job_id: the job that was not admitted.
        item: which item's condition failed: :data:`CLAIM` (the claim is held: its ``free``
            condition) or :data:`JOB` (a job item with ``job_id`` exists).
        holder: the job id the refused item names, from its stored image (``ALL_OLD``): the job
            holding the claim, or ``job_id`` itself.
    """

    CLAIM = "claim"
    JOB = "job"

    def __init__(self, job_id: str, item: str, holder: str, **kw) -> None:
        super().__init__(f"admit of job {job_id!r} refused: its {item} is held by job {holder!r}", **kw)
        self.job_id = job_id
        self.item = item
        self.holder = holder


class WrongJobStatus(LeaseError):
    """``imposition job cancel`` / ``job retry`` (:mod:`leases.lifecycle`) found the job in a status
    the operation does not apply to; nothing was written.

    Attributes:
        job_id, status (the job's status as read), allowed (the statuses the operation accepts).
    """

    def __init__(self, job_id: str, operation: str, status: str, allowed: tuple[str, ...], **kw) -> None:
        super().__init__(f"job {job_id!r} is {status}: {operation} applies only to a job that is "
                         f"{' or '.join(allowed)}", **kw)
        self.job_id = job_id
        self.status = status
        self.allowed = allowed


class NeverSubmitted(WrongJobStatus):
    """The job item records a message that no submission wrote (``error_code``
    ``submission_required``, :func:`leases.lifecycle.record_unsubmitted`): there is no job to retry;
    nothing was written.
    """

    def __init__(self, job_id: str, operation: str, **kw) -> None:
        LeaseError.__init__(self, f"job {job_id!r} was never submitted (submission_required): {operation} applies "
                            "only to a submitted job; submit it (imposition.client.submit, imposition submit)", **kw)
        self.job_id = job_id
        self.status = "failed"
        self.allowed = ("failed",)
