"""The lease transactions of DESIGN §2 and §4, each one DynamoDB ``TransactWriteItems``.

Timeline of one job's slot::

    acquire ──► renew … renew ──► commit_success | release_for_retry | fail_job
       │                                  (lease deleted, in_flight − 1, job status written: all
       │                                   fenced by the lease token, all in one transaction)
       └── or, if the worker dies: reclaim (the sweeper, once the lease has expired)

Invariant kept by every transaction here: a lease item for a job exists exactly while the job is
``running`` under that lease's token, and each tenant's ``in_flight`` equals its number of lease
items. Every function takes ``now`` (epoch seconds) so tests and the sweeper control time.

PynamoDB sends a transaction's items grouped by kind (condition checks, deletes, puts, updates, in
that order, see ``pynamodb.connection.base.Connection.transact_write_items``), and DynamoDB returns one
cancellation reason per item in request order; the ``_REASON_*`` indexes below follow that order.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import time
from dataclasses import dataclass

from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from leases.errors import CapReached, JobNotQueued, LeaseContention, LeaseLost
from leases.models import JobItem, JobStatus, LeaseItem, TenantItem
from service.settings import get_settings

log = logging.getLogger(__name__)

#: Cancellation reason codes that mean "try the same transaction again" (DynamoDB API reference,
#: TransactWriteItems: TransactionConflict, ThrottlingError, ProvisionedThroughputExceeded).
RETRYABLE_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})
#: Whole-request error codes that mean the same (botocore already retried them a few times).
RETRYABLE_ERRORS = frozenset(
    {
        "TransactionInProgressException",
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "InternalServerError",
    }
)
CONDITION_FAILED = "ConditionalCheckFailed"


@dataclass(frozen=True)
class Lease:
    """A held slot, as the worker that holds it knows it (times in epoch seconds)."""

    job_id: str
    tenant_id: str
    worker: str
    token: str
    acquired_at: float
    expires_at: float


class _Retryable(Exception):
    """A transaction was cancelled by a conflict or throttled; try it again."""

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


def raise_if_retryable(exc: TransactWriteError) -> tuple[str, ...]:
    """Return the reason codes, or raise :class:`_Retryable` for a conflict/throttling."""
    codes = _reason_codes(exc)
    if any(c in RETRYABLE_REASONS for c in codes) or exc.cause_response_code in RETRYABLE_ERRORS:
        raise _Retryable(codes or (exc.cause_response_code or "unknown",)) from exc
    return codes


def with_conflict_retries(fn, *, what: str):
    """Run ``fn`` with bounded, jittered retries of conflicts and throttling (tenacity).

    Raises:
        LeaseContention: still conflicting after ``Settings.lease_conflict_attempts`` tries.
    """
    s = get_settings()
    retrying = Retrying(
        retry=retry_if_exception_type(_Retryable),
        wait=wait_random_exponential(multiplier=s.lease_conflict_backoff_s, max=s.lease_conflict_backoff_max_s),
        stop=stop_after_attempt(s.lease_conflict_attempts),
        reraise=False,
    )
    try:
        return retrying(fn)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        codes = last.codes if isinstance(last, _Retryable) else ()
        raise LeaseContention(
            f"{what}: still conflicting after {s.lease_conflict_attempts} tries ({', '.join(codes)})",
            reason_codes=codes,
        ) from last


def new_token() -> str:
    """A fresh fencing token (128 random bits, hex)."""
    return secrets.token_hex(16)


# --- acquire ------------------------------------------------------------------------------------

# acquire sends: puts [lease], updates [tenant, job]
_ACQ_LEASE, _ACQ_TENANT, _ACQ_JOB = 0, 1, 2


def acquire(job_id: str, tenant_id: str, worker: str, *, now: float | None = None) -> Lease:
    """Take a slot for ``job_id`` in one transaction (DESIGN §2, layer 2).

    Items, all or nothing:

    1. tenant: ``in_flight += 1`` on condition ``in_flight < cap`` (the tier override ``cap`` when the
       item has one, else ``Settings.default_cap``), read in the same transaction, so a tier change
       applies to the next acquire without restarting anything;
    2. lease: put on condition no lease for this job exists; holds worker, token, ``expires_at``;
    3. job: ``queued → running`` on condition the status is ``queued``; ``attempts += 1``; records
       ``started_at``, the lease token and the worker; sets ``first_received_at`` if absent.

    Conflicts and throttling are retried with jittered backoff (bounded).

    Raises:
        JobNotQueued: the job is not ``queued`` or already has a lease (checked before the cap: a
            duplicate is dropped, not deferred).
        CapReached: the tenant is at its cap.
        LeaseContention: conflicts/throttling outlasted the retries.
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
        try:
            with TransactWrite(connection=tx_connection()) as tx:
                tx.save(lease, condition=LeaseItem.job_id.does_not_exist())
                tx.update(
                    TenantItem(tenant_id),
                    actions=[TenantItem.in_flight.set((TenantItem.in_flight | 0) + 1)],
                    condition=(TenantItem.in_flight.does_not_exist() & no_override) | below_cap,
                    return_values="ALL_OLD",
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
                    condition=JobItem.status == JobStatus.QUEUED.value,
                    return_values="ALL_OLD",
                )
        except TransactWriteError as exc:
            codes = raise_if_retryable(exc)
            reasons = exc.cancellation_reasons
            if len(codes) == 3 and (codes[_ACQ_JOB] == CONDITION_FAILED or codes[_ACQ_LEASE] == CONDITION_FAILED):
                old = reasons[_ACQ_JOB].raw_item if reasons[_ACQ_JOB] else None
                status = (old or {}).get("status", {}).get("S")
                raise JobNotQueued(job_id, status, reason_codes=codes) from exc
            if len(codes) == 3 and codes[_ACQ_TENANT] == CONDITION_FAILED:
                old = (reasons[_ACQ_TENANT].raw_item or {}) if reasons[_ACQ_TENANT] else {}
                in_flight = int(old["in_flight"]["N"]) if "in_flight" in old else None
                cap = int(old["cap"]["N"]) if "cap" in old else s.default_cap
                raise CapReached(tenant_id, in_flight, cap, reason_codes=codes) from exc
            raise
        return Lease(job_id, tenant_id, worker, token, t, t + s.lease_ttl_s)

    return with_conflict_retries(attempt, what=f"acquire lease for job {job_id}")


# --- renew --------------------------------------------------------------------------------------


def renew(lease: Lease, *, now: float | None = None) -> Lease:
    """Extend ``lease`` to ``now + lease_ttl_s``, on condition its token is still there.

    Raises:
        LeaseLost: the lease item is gone or carries another token.
        pynamodb.exceptions.UpdateError: any other failure (the caller decides; an ambiguous
            timeout is re-checked with :func:`still_held`).
    """
    s = get_settings()
    t = time.time() if now is None else now
    try:
        LeaseItem(lease.job_id).update(
            actions=[LeaseItem.expires_at.set(t + s.lease_ttl_s), LeaseItem.heartbeat_at.set(t)],
            condition=LeaseItem.token == lease.token,
        )
    except UpdateError as exc:
        if exc.cause_response_code == "ConditionalCheckFailedException":
            raise LeaseLost(lease.job_id, lease.token, "(renewal refused)") from exc
        raise
    return Lease(lease.job_id, lease.tenant_id, lease.worker, lease.token, lease.acquired_at, t + s.lease_ttl_s)


def still_held(lease: Lease) -> bool:
    """Read the lease item (strongly consistent) and say whether it still carries our token."""
    try:
        item = LeaseItem.get(lease.job_id, consistent_read=True)
    except DoesNotExist:
        return False
    return item.token == lease.token


# --- release ------------------------------------------------------------------------------------


def _release(lease: Lease, job_actions: list, *, what: str) -> None:
    """Delete the lease, decrement the tenant and write the job, fenced by the lease token."""

    def attempt() -> None:
        try:
            with TransactWrite(connection=tx_connection()) as tx:
                tx.delete(LeaseItem(lease.job_id), condition=LeaseItem.token == lease.token)
                tx.update(TenantItem(lease.tenant_id), actions=[TenantItem.in_flight.add(-1)])
                tx.update(
                    JobItem(lease.job_id),
                    actions=job_actions,
                    condition=(JobItem.lease_token == lease.token)
                    & (JobItem.status == JobStatus.RUNNING.value),
                )
        except TransactWriteError as exc:
            codes = raise_if_retryable(exc)
            if CONDITION_FAILED in codes:
                raise LeaseLost(lease.job_id, lease.token, f"({what} refused)", reason_codes=codes) from exc
            raise

    with_conflict_retries(attempt, what=what)


def commit_success(
    lease: Lease, *, output_key: str, sheets: int, sides: int, now: float | None = None
) -> None:
    """Record ``succeeded`` with the plate's key and release the slot, all fenced by the token.

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


def record_defer(job_id: str, *, now: float | None = None) -> None:
    """Count one cap deferral on a queued job and stamp its first receive (best effort).

    Does nothing if the job is not queued any more.
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
        if exc.cause_response_code != "ConditionalCheckFailedException":
            raise


def ensure_tenant(tenant_id: str, *, now: float | None = None) -> None:
    """Create the tenant item with ``in_flight = 0`` if it does not exist yet."""
    t = time.time() if now is None else now
    try:
        TenantItem(tenant_id, in_flight=0, updated_at=t).save(
            condition=TenantItem.tenant_id.does_not_exist()
        )
    except PutError as exc:
        if exc.cause_response_code != "ConditionalCheckFailedException":
            raise
