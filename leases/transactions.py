"""The lease transactions of DESIGN §2 and §4, each one DynamoDB ``TransactWriteItems``.

Timeline of one job's slot::

    acquire ──► renew … renew ──► commit_success | release_for_retry | fail_job
       │                                  (lease deleted, in_flight − 1, job status written: all
       │                                   fenced by the lease token, all in one transaction)
       └── or, if the worker dies: reclaim (the sweeper, once the lease has expired)

Invariant kept by every transaction here: a lease item for a job exists exactly while the job is
``running`` under that lease's token, and each tenant's ``in_flight`` equals its number of lease
items. Every function takes ``now`` (epoch seconds) so tests and the sweeper control time.

How a failed write is read (:func:`classify`):

* **retry** — a cancellation reason ``TransactionConflict``/``ThrottlingError``/
  ``ProvisionedThroughputExceeded``, or a throttling error for the whole request: nothing was
  written; the same transaction is tried again with jittered backoff (tenacity), bounded by
  ``Settings.lease_conflict_attempts``, then :class:`~leases.errors.LeaseContention`.
* **cancelled** — a condition failed: nothing was written; the reason codes say which (one per
  item, in request order) and decide the domain error.
* **ambiguous** — no answer (connection dropped, read timeout) or a 5xx: the write *may* have
  applied. The transaction is never blindly repeated: the item it would have written is read back
  (strongly consistent) to learn whether it did. Each attempt also carries a fresh
  ``ClientRequestToken``, which makes botocore's own resends of that attempt idempotent on
  DynamoDB (AWS API reference, TransactWriteItems: "ClientRequestToken … makes the call
  idempotent" for 10 minutes).

A release writes the id of its attempt into the job (``JobItem.release_id``): a writer whose
release timed out, or whose retry found the lease gone, reads the job back and knows whether one of
its own attempts applied, so it never reports "lease lost" for a commit that happened.

PynamoDB sends a transaction's items grouped by kind (condition checks, deletes, puts, updates, in
that order, see ``pynamodb.connection.base.Connection.transact_write_items``), and DynamoDB returns one
cancellation reason per item in request order; the ``_ACQ_*`` indexes below follow that order.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from pynamodb.connection import Connection
from pynamodb.exceptions import (
    DoesNotExist,
    PutError,
    PynamoDBException,
    TransactWriteError,
    UpdateError,
)
from pynamodb.transactions import TransactWrite
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from leases.errors import CapReached, JobNotQueued, LeaseContention, LeaseLost, TenantMismatch
from leases.models import JobItem, JobStatus, LeaseItem, TenantItem
from service.settings import get_settings

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Cancellation reason codes that mean "try the same transaction again" (DynamoDB API reference,
#: TransactWriteItems: TransactionConflict, ThrottlingError, ProvisionedThroughputExceeded).
RETRYABLE_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})
#: Whole-request error codes of a request DynamoDB refused before doing anything (botocore already
#: retried them a few times): safe to send again.
RETRYABLE_ERRORS = frozenset(
    {"ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"}
)
#: Whole-request error codes after which a write may or may not have applied (DynamoDB developer
#: guide, "Error handling": a 5xx "may or may not have succeeded"; TransactionInProgressException:
#: a resend of an attempt that is still being applied).
AMBIGUOUS_ERRORS = frozenset(
    {"InternalServerError", "ServiceUnavailable", "TransactionInProgressException"}
)
CONDITION_FAILED = "ConditionalCheckFailed"
_CONDITION_FAILED_EXCEPTION = "ConditionalCheckFailedException"

RETRY, CANCELLED, AMBIGUOUS, ERROR = "retry", "cancelled", "ambiguous", "error"


@dataclass(frozen=True)
class Lease:
    """A held slot, as the worker that holds it knows it (times in epoch seconds)."""

    job_id: str
    tenant_id: str
    worker: str
    token: str
    acquired_at: float
    expires_at: float


class Retryable(Exception):
    """A write was refused (conflict, throttling) or did not apply; try it again."""

    def __init__(self, codes: tuple[str, ...]) -> None:
        super().__init__(", ".join(codes))
        self.codes = codes


@functools.lru_cache(maxsize=None)
def _connection_for(pid: int) -> Connection:
    return Connection(region=get_settings().aws_region)


def tx_connection() -> Connection:
    """The process's PynamoDB connection for transactions (one botocore client per process)."""
    return _connection_for(os.getpid())


def _reason_codes(exc: TransactWriteError) -> tuple[str, ...]:
    return tuple((r.code if r is not None else "None") for r in exc.cancellation_reasons)


def error_code(exc: PynamoDBException) -> str | None:
    """The AWS error code of a wrapped botocore error, or None (no answer came: a connection error).

    Unlike ``PynamoDBException.cause_response_code`` it copes with botocore errors whose
    ``response`` attribute is None (``ReadTimeoutError``).
    """
    response = getattr(exc.cause, "response", None)
    return response.get("Error", {}).get("Code") if isinstance(response, dict) else None


def classify(exc: PynamoDBException) -> tuple[str, tuple[str, ...]]:
    """Read a failed DynamoDB write: ``(kind, reason codes)`` (see the module docstring).

    ``kind`` is :data:`RETRY`, :data:`CANCELLED` (a condition failed; the codes say which item),
    :data:`AMBIGUOUS` (the write may have applied) or :data:`ERROR` (anything else: a bug or a
    permission problem; raise it).
    """
    code = error_code(exc)
    codes = _reason_codes(exc) if isinstance(exc, TransactWriteError) and code else ()
    if any(c in RETRYABLE_REASONS for c in codes) or code in RETRYABLE_ERRORS:
        return RETRY, codes or (code,)
    if codes or code == _CONDITION_FAILED_EXCEPTION:
        return CANCELLED, codes or (CONDITION_FAILED,)
    if code is None or code in AMBIGUOUS_ERRORS:
        return AMBIGUOUS, (code or type(exc.cause).__name__,)
    return ERROR, (code,)


def with_conflict_retries(fn: Callable[[], T], *, what: str) -> T:
    """Run ``fn`` with bounded, jittered retries while it raises :class:`Retryable` (tenacity).

    Raises:
        LeaseContention: still refused after ``Settings.lease_conflict_attempts`` tries.
    """
    s = get_settings()
    retrying = Retrying(
        retry=retry_if_exception_type(Retryable),
        wait=wait_random_exponential(multiplier=s.lease_conflict_backoff_s, max=s.lease_conflict_backoff_max_s),
        stop=stop_after_attempt(s.lease_conflict_attempts),
        reraise=False,
    )
    try:
        return retrying(fn)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        codes = last.codes if isinstance(last, Retryable) else ()
        raise LeaseContention(
            f"{what}: still conflicting after {s.lease_conflict_attempts} tries ({', '.join(codes)})",
            reason_codes=codes,
        ) from last


def new_token() -> str:
    """A fresh fencing token or request id (128 random bits, hex)."""
    return secrets.token_hex(16)


def read_lease(job_id: str) -> LeaseItem | None:
    """The lease item of ``job_id`` (strongly consistent read), or None."""
    try:
        return LeaseItem.get(job_id, consistent_read=True)
    except DoesNotExist:
        return None


def read_job(job_id: str) -> JobItem:
    """The job item (strongly consistent), with bounded in-place retries of any failure but absence.

    A read changes nothing, so throttling and ambiguous failures alike are simply tried again.

    Raises:
        pynamodb.exceptions.DoesNotExist: no such job.
        leases.errors.LeaseContention: every try failed (the last error is its cause).
    """

    def attempt() -> JobItem:
        try:
            return JobItem.get(job_id, consistent_read=True)
        except DoesNotExist:
            raise
        except PynamoDBException as exc:
            raise Retryable((error_code(exc) or type(exc.cause).__name__,)) from exc

    return with_conflict_retries(attempt, what=f"read job {job_id}")


def _lease_of(item: LeaseItem) -> Lease:
    return Lease(item.job_id, item.tenant_id, item.worker, item.token, float(item.acquired_at),
                 float(item.expires_at))


def released_by(job_id: str, release_ids: Iterable[str]) -> bool:
    """True if the job's last release was written by one of ``release_ids`` (consistent read)."""
    try:
        job = JobItem.get(job_id, consistent_read=True, attributes_to_get=["release_id"])
    except DoesNotExist:
        return False
    return job.release_id is not None and job.release_id in set(release_ids)


# --- acquire ------------------------------------------------------------------------------------

# acquire sends: puts [lease], updates [tenant, job]
_ACQ_LEASE, _ACQ_TENANT, _ACQ_JOB = 0, 1, 2
_ALL_OLD = "ALL_OLD"


def acquire(job_id: str, tenant_id: str, worker: str, *, now: float | None = None) -> Lease:
    """Take a slot for ``job_id`` in one transaction (DESIGN §2, layer 2).

    Items, all or nothing:

    1. tenant: ``in_flight += 1`` on condition ``in_flight < cap`` (the tier override ``cap`` when the
       item has one, else ``Settings.default_cap``), read in the same transaction, so a tier change
       applies to the next acquire without restarting anything; and not frozen by a counter repair
       (``repair_until`` absent or past);
    2. lease: put on condition no lease for this job exists; holds worker, token, ``expires_at``;
    3. job: ``queued → running`` on condition the status is ``queued`` and the job belongs to
       ``tenant_id``; ``attempts += 1``; records ``started_at``, the lease token and the worker;
       sets ``first_received_at`` if absent.

    Conflicts and throttling are retried with jittered backoff (bounded). After an ambiguous
    failure the lease item is read back: if it carries this call's token the acquire applied and
    the lease is returned; if not, nothing was written and the transaction is tried again.

    Raises:
        TenantMismatch: the job exists but belongs to another tenant (checked first: such a caller
            must never run the job, whatever its status).
        JobNotQueued: the job is not ``queued`` or already has a lease (checked before the cap: a
            duplicate is dropped, not deferred).
        CapReached: the tenant is at its cap.
        LeaseContention: conflicts/throttling/unapplied ambiguous attempts outlasted the retries.
        pynamodb.exceptions.PynamoDBException: anything else, including an ambiguous failure whose
            read-back failed too (the caller must not assume either way).
    """
    s = get_settings()
    token = new_token()

    def attempt() -> Lease:
        t = time.time() if now is None else now
        lease = LeaseItem(
            job_id,
            tenant_id=tenant_id,
            worker=worker,
            token=token,
            acquired_at=t,
            heartbeat_at=t,
            expires_at=t + s.lease_ttl_s,
        )
        no_override = TenantItem.cap.does_not_exist()
        below_cap = (no_override & (TenantItem.in_flight < s.default_cap)) | (
            TenantItem.cap.exists() & (TenantItem.in_flight < TenantItem.cap)
        )
        not_frozen = TenantItem.repair_until.does_not_exist() | (TenantItem.repair_until < t)
        try:
            with TransactWrite(connection=tx_connection(), client_request_token=new_token()) as tx:
                tx.save(lease, condition=LeaseItem.job_id.does_not_exist(), return_values=_ALL_OLD)
                tx.update(
                    TenantItem(tenant_id),
                    actions=[TenantItem.in_flight.set((TenantItem.in_flight | 0) + 1)],
                    condition=((TenantItem.in_flight.does_not_exist() & no_override) | below_cap) & not_frozen,
                    return_values=_ALL_OLD,
                )
                tx.update(
                    JobItem(job_id),
                    actions=[
                        JobItem.status.set(JobStatus.RUNNING.value),
                        JobItem.attempts.set((JobItem.attempts | 0) + 1),
                        JobItem.started_at.set(t),
                        JobItem.first_received_at.set(JobItem.first_received_at | t),
                        JobItem.lease_token.set(token),
                        JobItem.worker.set(worker),
                    ],
                    condition=(JobItem.status == JobStatus.QUEUED.value) & (JobItem.tenant_id == tenant_id),
                    return_values=_ALL_OLD,
                )
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == AMBIGUOUS:
                held = read_lease(job_id)
                if held is not None and held.token == token:
                    log.info("acquire of job %s: ambiguous failure (%s), but it applied", job_id, codes[0])
                    return _lease_of(held)
                raise Retryable(codes) from exc
            if kind == CANCELLED and len(codes) == 3:
                reasons = exc.cancellation_reasons
                if codes[_ACQ_LEASE] == CONDITION_FAILED and reasons[_ACQ_LEASE] is not None:
                    old = LeaseItem.from_raw_data(reasons[_ACQ_LEASE].raw_item or {"job_id": {"S": job_id}})
                    if old.token == token:  # an earlier, ambiguous attempt of this call applied
                        return _lease_of(old)
                old_job = (reasons[_ACQ_JOB].raw_item or {}) if reasons[_ACQ_JOB] else {}
                job_tenant = old_job.get("tenant_id", {}).get("S")
                if job_tenant is not None and job_tenant != tenant_id:
                    raise TenantMismatch(job_id, tenant_id, job_tenant, reason_codes=codes) from exc
                if codes[_ACQ_JOB] == CONDITION_FAILED or codes[_ACQ_LEASE] == CONDITION_FAILED:
                    if not old_job and codes[_ACQ_JOB] != CONDITION_FAILED:  # job queued, lease orphaned
                        old_job = {"status": {"S": JobStatus.QUEUED.value}}
                    status = old_job.get("status", {}).get("S")
                    attempts = int(old_job["attempts"]["N"]) if "attempts" in old_job else None
                    raise JobNotQueued(job_id, status, attempts, reason_codes=codes) from exc
                if codes[_ACQ_TENANT] == CONDITION_FAILED:
                    old = (reasons[_ACQ_TENANT].raw_item or {}) if reasons[_ACQ_TENANT] else {}
                    in_flight = int(old["in_flight"]["N"]) if "in_flight" in old else None
                    cap = int(old["cap"]["N"]) if "cap" in old else s.default_cap
                    frozen = float(old["repair_until"]["N"]) if "repair_until" in old else None
                    raise CapReached(tenant_id, in_flight, cap, repair_until=frozen if frozen and frozen >= t else None,
                                     reason_codes=codes) from exc
            raise
        return Lease(job_id, tenant_id, worker, token, t, t + s.lease_ttl_s)

    return with_conflict_retries(attempt, what=f"acquire lease for job {job_id}")


# --- renew --------------------------------------------------------------------------------------


def renew(lease: Lease, *, now: float | None = None) -> Lease:
    """Extend ``lease`` to ``now + lease_ttl_s``, on condition its token is still there.

    Throttling is retried in place (bounded, jittered). After an ambiguous failure the lease is
    read back: the returned :class:`Lease` then carries the ``expires_at`` found there (extended if
    the write applied, unchanged if not), so the caller's deadline stays truthful either way.

    Raises:
        LeaseLost: the lease item is gone or carries another token (also when found so after an
            ambiguous renewal).
        LeaseContention: throttled on every try.
        pynamodb.exceptions.PynamoDBException: an ambiguous failure whose read-back failed too, or
            an unexpected error.
    """
    s = get_settings()

    def attempt() -> Lease:
        t = time.time() if now is None else now
        try:
            LeaseItem(lease.job_id).update(
                actions=[LeaseItem.expires_at.set(t + s.lease_ttl_s), LeaseItem.heartbeat_at.set(t)],
                condition=LeaseItem.token == lease.token,
            )
        except UpdateError as exc:
            kind, codes = classify(exc)
            if kind == CANCELLED:
                raise LeaseLost(lease.job_id, lease.token, "(renewal refused)") from exc
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == AMBIGUOUS:
                held = read_lease(lease.job_id)
                if held is None or held.token != lease.token:
                    raise LeaseLost(lease.job_id, lease.token, f"(token gone after an ambiguous renewal: {codes[0]})") from exc
                return dataclasses.replace(lease, expires_at=float(held.expires_at))
            raise
        return dataclasses.replace(lease, expires_at=t + s.lease_ttl_s)

    return with_conflict_retries(attempt, what=f"renew lease of job {lease.job_id}")


def still_held(lease: Lease) -> bool:
    """Read the lease item (strongly consistent) and say whether it still carries our token."""
    held = read_lease(lease.job_id)
    return held is not None and held.token == lease.token


# --- release ------------------------------------------------------------------------------------


def _release(lease: Lease, job_actions: list, *, what: str) -> None:
    """Delete the lease, decrement the tenant and write the job, fenced by the lease token.

    Every attempt writes its own id into ``JobItem.release_id``; when an attempt is ambiguous, or a
    later attempt finds the lease gone, the job is read back to learn whether one of ours applied.
    """
    release_ids: list[str] = []

    def attempt() -> None:
        release_id = new_token()
        release_ids.append(release_id)
        try:
            with TransactWrite(connection=tx_connection(), client_request_token=release_id) as tx:
                tx.delete(LeaseItem(lease.job_id), condition=LeaseItem.token == lease.token)
                tx.update(TenantItem(lease.tenant_id), actions=[TenantItem.in_flight.add(-1)])
                tx.update(
                    JobItem(lease.job_id),
                    actions=[*job_actions, JobItem.release_id.set(release_id)],
                    condition=(JobItem.lease_token == lease.token)
                    & (JobItem.status == JobStatus.RUNNING.value),
                )
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == ERROR or (kind == CANCELLED and CONDITION_FAILED not in codes):
                raise
            # An ambiguous try may have applied; a cancelled one did not, but an earlier one may have.
            candidates = release_ids if kind == AMBIGUOUS else release_ids[:-1]
            if candidates and released_by(lease.job_id, candidates):
                log.info("%s of job %s: failed (%s), but a try of it applied", what, lease.job_id, codes[0])
                return
            if kind == AMBIGUOUS and still_held(lease):
                raise Retryable(codes) from exc
            raise LeaseLost(lease.job_id, lease.token, f"({what} refused)", reason_codes=codes) from exc

    with_conflict_retries(attempt, what=what)


def commit_success(
    lease: Lease, *, output_key: str, sheets: int, sides: int, now: float | None = None,
    warnings: list[dict[str, str]] | None = None,
) -> None:
    """Record ``succeeded`` with the plate's key and release the slot, all fenced by the token.

    ``warnings`` are the engine's typed warnings (``[{"code", "message"}, …]``), stored as
    ``JobItem.warnings`` (an empty list when there are none).

    Raises:
        LeaseLost: the lease was reclaimed; nothing was written (the job is someone else's now).
        LeaseContention: conflicts outlasted the retries (the lease stays; the sweeper frees it).
    """
    t = time.time() if now is None else now
    _release(
        lease,
        [
            JobItem.status.set(JobStatus.SUCCEEDED.value),
            JobItem.output_key.set(output_key),
            JobItem.sheets.set(sheets),
            JobItem.sides.set(sides),
            JobItem.warnings.set(list(warnings or [])),
            JobItem.finished_at.set(t),
            JobItem.lease_token.remove(),
            JobItem.error.remove(),
            JobItem.error_code.remove(),
        ],
        what="commit",
    )


def release_for_retry(lease: Lease, *, error: str, error_code: str) -> None:
    """Put the job back to ``queued`` (a retry message is already published) and free the slot.

    Raises:
        LeaseLost, LeaseContention: as :func:`commit_success`.
    """
    _release(
        lease,
        [
            JobItem.status.set(JobStatus.QUEUED.value),
            JobItem.lease_token.remove(),
            JobItem.error.set(error),
            JobItem.error_code.set(error_code),
        ],
        what="release for retry",
    )


def fail_job(lease: Lease, *, error: str, error_code: str, now: float | None = None) -> None:
    """Record ``failed`` with the reason and free the slot.

    Raises:
        LeaseLost, LeaseContention: as :func:`commit_success`.
    """
    t = time.time() if now is None else now
    _release(
        lease,
        [
            JobItem.status.set(JobStatus.FAILED.value),
            JobItem.finished_at.set(t),
            JobItem.lease_token.remove(),
            JobItem.error.set(error),
            JobItem.error_code.set(error_code),
        ],
        what="fail",
    )


# --- outside a lease ----------------------------------------------------------------------------


def record_defer(job_id: str, *, now: float | None = None) -> bool:
    """Count one cap deferral on a queued job and stamp its first receive (best effort).

    Does nothing if the job is not queued any more. Never raises: the count is a statistic, and
    a failure here must not cost the deferral itself. Returns True if the count was written.
    """
    t = time.time() if now is None else now
    try:
        JobItem(job_id).update(
            actions=[
                JobItem.defer_count.set((JobItem.defer_count | 0) + 1),
                JobItem.first_received_at.set(JobItem.first_received_at | t),
            ],
            condition=JobItem.status == JobStatus.QUEUED.value,
        )
    except UpdateError as exc:
        if error_code(exc) != _CONDITION_FAILED_EXCEPTION:
            log.warning("could not count the deferral of job %s: %s", job_id, exc.cause or exc)
        return False
    return True


def ensure_tenant(tenant_id: str, *, now: float | None = None) -> None:
    """Create the tenant item with ``in_flight = 0`` if it does not exist yet."""
    t = time.time() if now is None else now
    try:
        TenantItem(tenant_id, in_flight=0, updated_at=t).save(
            condition=TenantItem.tenant_id.does_not_exist()
        )
    except PutError as exc:
        if error_code(exc) != _CONDITION_FAILED_EXCEPTION:
            raise
