"""The lease transactions of docs/design.md §2 and §4, each one DynamoDB ``TransactWriteItems``.

Timeline of one job's slot::

    acquire ──► renew … renew ──► commit_success | release_for_retry | fail_job
       │                                  (lease deleted, in_flight − 1, job status written: all
       │                                   fenced by the lease token, all in one transaction)
       └── or, if the worker dies: reclaim (the sweeper, once the lease has expired)

Invariant kept by every transaction here: a lease item for a job exists exactly while the job is
``running`` under that lease's token, and each tenant's ``in_flight`` equals its number of lease
items; the tenant's ``queued``/``waiting`` counters move with every status move (:mod:`leases.waiting`).
Every function takes ``now`` (epoch seconds). A failed write is read by :func:`classify`:

* **retry** (:data:`RETRYABLE_REASONS`, :data:`RETRYABLE_ERRORS`): nothing written; tried again with
  jittered backoff, at most ``Settings.lease_conflict_attempts`` times (:func:`with_conflict_retries`);
* **cancelled**: a condition failed, nothing written; each item's reason, looked up by item name
  (:class:`NamedTransaction`), decides the domain error;
* **ambiguous**: no answer or a 5xx: the write may have applied; the item it would have written is
  read back (strongly consistent), never blindly repeated (each attempt has its ``ClientRequestToken``).

Every end of a lease goes through :func:`fenced_release`, which writes its attempt's id into the job
(``JobItem.release_id``) and reads it back after a timeout or refusal. Why: docs/design.md, "Three
outcomes, plus "ambiguous"".
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
from typing import Any, TypeVar, overload

from pynamodb.connection import Connection
from pynamodb.exceptions import (
    DoesNotExist,
    PutError,
    PynamoDBException,
    TransactWriteError,
    UpdateError,
)
from pynamodb.transactions import TransactWrite
from pynamodb.expressions.condition import size
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from leases import outbox
from leases.errors import AcquireUnresolved, CapReached, JobNotQueued, LeaseContention, LeaseLost, TenantMismatch
from leases import policy
from leases.models import CLUSTER_SLOTS_KEY, ClusterItem, JobItem, JobStatus, LeaseItem, TenantItem
from imposition.common import aws
from imposition.common.settings import get_settings

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
    return aws.on_shared_session(Connection(region=get_settings().aws_region))


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
    if any(c in RETRYABLE_REASONS for c in codes):
        return RETRY, codes
    if code is not None and code in RETRYABLE_ERRORS:
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


class NamedTransaction:
    """A PynamoDB ``TransactWrite`` whose items carry names, so cancellation reasons are read by
    name instead of by position.

    PynamoDB sends condition checks, deletes, puts and updates in that order whatever order they
    were added in (``pynamodb.connection.base.Connection.transact_write_items``), and DynamoDB
    answers one cancellation reason per item in request order; :meth:`reasons` undoes that.
    """

    _KINDS = ("condition_check", "delete", "save", "update")

    def __init__(self, client_request_token: str) -> None:
        self.tx = TransactWrite(connection=tx_connection(), client_request_token=client_request_token)
        self._names: dict[str, list[str]] = {kind: [] for kind in self._KINDS}

    def __enter__(self) -> "NamedTransaction":
        self.tx.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.tx.__exit__(*exc_info)

    def add(self, kind: str, name: str, *args, **kwargs) -> None:
        """Add one item: ``kind`` is a ``TransactWrite`` method name; ``name`` labels its reason."""
        self._names[kind].append(name)
        getattr(self.tx, kind)(*args, **kwargs)

    def reasons(self, exc: TransactWriteError) -> dict[str, object]:
        """``{item name: CancellationReason or None}`` of a cancelled commit of this transaction."""
        order = [name for kind in self._KINDS for name in self._names[kind]]
        return dict(zip(order, exc.cancellation_reasons or ()))


def reason_code(reasons: dict[str, object], name: str) -> str | None:
    """The cancellation code of item ``name`` (``None`` when the item had no problem)."""
    reason = reasons.get(name)
    code = getattr(reason, "code", None)
    return None if code in (None, "None") else code


def old_item(reasons: dict[str, object], name: str) -> dict:
    """The raw item DynamoDB returned for a failed condition of ``name`` (``ALL_OLD``), or ``{}``."""
    return getattr(reasons.get(name), "raw_item", None) or {}


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


def released_by(job_id: str, release_ids: Iterable[str]) -> str | None:
    """The one of ``release_ids`` that wrote the job's last release, or None (consistent read)."""
    try:
        job = JobItem.get(job_id, consistent_read=True, attributes_to_get=["release_id"])
    except DoesNotExist:
        return None
    return job.release_id if job.release_id is not None and job.release_id in set(release_ids) else None


# --- the cap as DynamoDB conditions -------------------------------------------------------------


def below_cap(counter, default_cap: int):
    """Condition on a tenant item: ``counter < cap`` (the tier override ``cap`` when the item has
    one, else ``default_cap``); an absent counter is 0."""
    no_override = TenantItem.cap.does_not_exist()
    absent = counter.does_not_exist() & (no_override | (TenantItem.cap > 0))
    return absent | (no_override & (counter < default_cap)) | (TenantItem.cap.exists() & (counter < TenantItem.cap))


def condition_of(rule: policy.Below | tuple[policy.Below, ...], default_cap: int):
    """The PynamoDB condition of a limit declared in :mod:`leases.policy` (a tuple: any of them),
    with the policy's semantics: an absent counter is 0, ``cap`` is the override or
    ``default_cap`` (:func:`below_cap`), any other limit holds only where the item has it (an
    ``or_equal`` limit compares a counter the item has: DynamoDB compares nothing with an absent
    attribute; every lease transaction of a tenant finds its counters written)."""
    if isinstance(rule, tuple):
        return functools.reduce(lambda a, b: a | b, (condition_of(r, default_cap) for r in rule))
    model = TenantItem if rule.item == "tenant" else ClusterItem
    counter = getattr(model, rule.counter)
    if rule.limit == "cap":
        if not rule.or_equal:
            return below_cap(counter, default_cap)
        no_override = TenantItem.cap.does_not_exist()
        return (no_override & (counter <= default_cap)) | (TenantItem.cap.exists() & (counter <= TenantItem.cap))
    limit = getattr(model, rule.limit)
    if rule.or_equal:
        return limit.exists() & (counter <= limit)
    return limit.exists() & ((counter.does_not_exist() & (limit > 0)) | (counter < limit))


def place_passes_on(default_cap: int):
    """Condition on a tenant item: ``occupied <= cap`` (or ``<= burst_cap`` when its tier borrows),
    so the place a release frees may pass to its next waiting job without going over the cap (a
    cap lowered below ``occupied`` frees the place instead; :data:`leases.policy.PASS_ON`)."""
    return condition_of(policy.PASS_ON, default_cap)


def wake_actions(tenant_id: str, woken_at: float, reason: str) -> list:
    """Job actions of a wake, ``waiting → queued`` (its message is due at ``woken_at``); the
    condition is :func:`is_waiting`."""
    return [JobItem.status.set(JobStatus.QUEUED.value), JobItem.waiting_tenant.remove(),
            JobItem.queued_tenant.set(tenant_id), JobItem.woken_at.set(woken_at),
            JobItem.woken_by.set(reason), JobItem.due_at.set(woken_at)]


def take_actions(t: float, token: str, worker: str) -> list:
    """Job actions of a lease taken at ``t`` (epoch s) by ``worker`` with ``token``: ``running``,
    ``attempts + 1``, ``started_at``, ``first_received_at`` if absent; it leaves the queued index."""
    return [
        JobItem.status.set(JobStatus.RUNNING.value),
        JobItem.attempts.set((JobItem.attempts | 0) + 1),
        JobItem.started_at.set(t),
        JobItem.first_received_at.set(JobItem.first_received_at | t),
        JobItem.lease_token.set(token),
        JobItem.worker.set(worker),
        JobItem.queued_tenant.remove(),
        JobItem.due_at.remove(),
    ]


def apply_pass(job: JobItem, hand_off: "HandOff") -> JobItem:
    """``job`` (the handed job as read before the release, its ``parked_at`` the one the release's
    condition checked) as the release that passed it ``hand_off.lease`` wrote it: what
    :func:`take_actions` and the wake's fields write, without reading it back."""
    lease = hand_off.lease
    assert lease is not None and lease.job_id == job.job_id, (hand_off, job.job_id)
    t = lease.acquired_at
    job.status, job.attempts, job.started_at = JobStatus.RUNNING.value, int(job.attempts or 0) + 1, t
    job.first_received_at = job.first_received_at if job.first_received_at is not None else t
    job.lease_token, job.worker = lease.token, lease.worker
    job.queued_tenant = job.due_at = job.waiting_tenant = None
    job.woken_at, job.woken_by = hand_off.woken_at, hand_off.reason
    return job


def new_lease_item(job_id: str, tenant_id: str, worker: str, token: str, t: float, *,
                   borrowed: bool = False) -> LeaseItem:
    """The lease item of a lease taken at ``t`` (epoch s): it expires ``lease_ttl_s`` later."""
    return LeaseItem(job_id, tenant_id=tenant_id, worker=worker, token=token, acquired_at=t, heartbeat_at=t,
                     expires_at=t + get_settings().lease_ttl_s, borrowed=True if borrowed else None)


def slot_passes_on(default_cap: int, now: float):
    """Condition on a tenant item, with :func:`place_passes_on`: ``in_flight <= cap`` and not
    frozen, so the releasing lease's slot may pass to the handed job itself, its lease taken in the
    same transaction (:data:`leases.policy.PASS_SLOT`)."""
    return condition_of(policy.PASS_SLOT, default_cap) & not_frozen(now)


def slot_lent_on(default_cap: int, now: float):
    """Condition on a tenant item, with :func:`place_passes_on`, for a slot passed above the
    cap: ``in_flight <= burst_cap``, ``in_flight > cap`` (not :data:`leases.policy.PASS_SLOT`) and
    not frozen (:func:`leases.policy.may_lend_slot`); the cluster's side is :func:`slot_lent_from_pool`."""
    return (condition_of(policy.LEND_SLOT_TENANT, default_cap) & ~condition_of(policy.PASS_SLOT, default_cap)
            & not_frozen(now))


def slot_lent_from_pool():
    """Condition on the cluster's slot counter for a slot passed above the cap: ``busy <=
    borrowable`` (:data:`leases.policy.LEND_SLOT_CLUSTER`)."""
    return condition_of(policy.LEND_SLOT_CLUSTER, get_settings().default_cap)


def none_waiting():
    """Condition on a tenant item: no job of it waits (``waiting`` 0 or absent)."""
    return TenantItem.waiting.does_not_exist() | (TenantItem.waiting == 0)


def is_waiting(tenant_id: str):
    """Condition on a job item: ``waiting``, and ``tenant_id``'s."""
    return (JobItem.status == JobStatus.WAITING.value) & (JobItem.tenant_id == tenant_id)


def cap_has_room(default_cap: int):
    """Condition on a tenant item: ``in_flight < cap`` (:data:`leases.policy.TAKE_SLOT`)."""
    return condition_of(policy.TAKE_SLOT, default_cap)


def can_borrow():
    """Condition on a tenant item: ``in_flight < burst_cap`` (:data:`leases.policy.BORROW_TENANT`)."""
    return condition_of(policy.BORROW_TENANT, get_settings().default_cap)


def slot_to_borrow():
    """Condition on the cluster's slot counter: ``busy < borrowable`` (the reserve stays free;
    :data:`leases.policy.BORROW_CLUSTER`)."""
    return condition_of(policy.BORROW_CLUSTER, get_settings().default_cap)


@overload
def tenant_state(tenant: TenantItem) -> policy.TenantState: ...
@overload
def tenant_state(tenant: None) -> None: ...
@overload
def tenant_state(tenant: TenantItem | None) -> policy.TenantState | None: ...
def tenant_state(tenant: TenantItem | None) -> policy.TenantState | None:
    """The counters of a tenant item, as :mod:`leases.policy` reads them (None for None)."""
    if tenant is None:
        return None
    return policy.TenantState(
        in_flight=int(tenant.in_flight or 0), queued=int(tenant.queued or 0), waiting=int(tenant.waiting or 0),
        occupied=int(tenant.occupied or 0), cap=None if tenant.cap is None else int(tenant.cap),
        burst_cap=None if tenant.burst_cap is None else int(tenant.burst_cap),
        repair_until=None if tenant.repair_until is None else float(tenant.repair_until))


def cluster_state(cluster: ClusterItem | None) -> policy.ClusterState | None:
    """The cluster's slot counter, as :mod:`leases.policy` reads it."""
    if cluster is None:
        return None
    return policy.ClusterState(busy=int(cluster.busy or 0), borrowable=int(cluster.borrowable or 0),
                               borrowers=int(cluster.borrowers or 0))


def slots_item() -> ClusterItem:
    """The cluster's slot counter (``busy`` is kept in every acquire and release)."""
    return ClusterItem(CLUSTER_SLOTS_KEY)


def not_frozen(now: float):
    """Condition on a tenant item: no counter repair freezes its acquires at ``now``."""
    return TenantItem.repair_until.does_not_exist() | (TenantItem.repair_until < now)


def room_of(tenant: TenantItem | None, default_cap: int) -> int:
    """Slots a tenant may still fill with jobs that are not queued yet: cap − occupied (in_flight +
    queued)."""
    return policy.room(tenant_state(tenant), default_cap)


def _number(raw: dict, name: str) -> int | None:
    return int(raw[name]["N"]) if name in raw else None


# --- acquire ------------------------------------------------------------------------------------

_ALL_OLD = "ALL_OLD"


def acquire(job_id: str, tenant_id: str, worker: str, *, borrow: bool = False, now: float | None = None,
            due_by: float | None = None) -> Lease:
    """Take a slot for ``job_id`` in one transaction (docs/design.md §2, layer 2).

    Items, all or nothing:

    1. tenant: ``in_flight += 1`` on condition :func:`cap_has_room` (the override is read in the
       same transaction, so a tier change applies to the next acquire without restarting anything)
       and :func:`not_frozen`; ``queued −= 1``. With ``borrow`` (docs/design.md §3, borrowing) the
       condition is :func:`can_borrow` instead: ``in_flight < burst_cap``;
    2. the cluster's slot counter: ``busy += 1``; with ``borrow``, on condition ``busy <
       borrowable`` (slots of the live nodes less the reserve);
    2. lease: put on condition no lease for this job exists; holds worker, token, ``expires_at``;
    3. job: ``queued → running`` on condition the status is ``queued`` and the job belongs to
       ``tenant_id`` (with ``due_by``, also that its message is due by then: ``due_at <= due_by``,
       so a job in retry backoff is not taken early); ``attempts += 1``; records ``started_at``,
       the lease token and the worker; sets ``first_received_at`` if absent; leaves the queued index.

    Conflicts and throttling are retried with jittered backoff (bounded). After an ambiguous
    failure the lease item is read back: if it carries this call's token the acquire applied and
    the lease is returned; if not, nothing was written and the transaction is tried again.

    Raises:
        TenantMismatch: the job exists but belongs to another tenant (checked first: such a caller
            must never run the job, whatever its status).
        JobNotQueued: the job is not ``queued`` or already has a lease (checked before the cap: a
            duplicate is dropped, not parked).
        CapReached: the tenant is at its cap.
        LeaseContention: conflicts/throttling/unapplied ambiguous attempts outlasted the retries.
        AcquireUnresolved: an ambiguous failure whose read-back failed too (it may have applied:
            the caller must not assume either way; :func:`resolve_acquire`).
        pynamodb.exceptions.PynamoDBException: anything else.
    """
    s = get_settings()
    token = new_token()

    def attempt() -> Lease:
        t = time.time() if now is None else now
        lease = new_lease_item(job_id, tenant_id, worker, token, t, borrowed=borrow)
        try:
            with NamedTransaction(new_token()) as tx:
                tx.add("save", "lease", lease, condition=LeaseItem.job_id.does_not_exist(), return_values=_ALL_OLD)
                tx.add("update", "tenant", TenantItem(tenant_id),
                       actions=[TenantItem.in_flight.set((TenantItem.in_flight | 0) + 1), TenantItem.queued.add(-1)],
                       condition=(can_borrow() if borrow else cap_has_room(s.default_cap)) & not_frozen(t),
                       return_values=_ALL_OLD)
                tx.add("update", "cluster", slots_item(), actions=[ClusterItem.busy.add(1)],
                       condition=slot_to_borrow() if borrow else None)
                tx.add("update", "job", JobItem(job_id), actions=take_actions(t, token, worker),
                       condition=queued_and_due(tenant_id, due_by), return_values=_ALL_OLD)
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == AMBIGUOUS:
                try:
                    held = read_lease(job_id)
                except PynamoDBException as read_exc:
                    raise AcquireUnresolved(job_id, tenant_id, worker, token, t + s.lease_ttl_s,
                                            reason_codes=codes) from read_exc
                if held is not None and held.token == token:
                    log.info("acquire of job %s: ambiguous failure (%s), but it applied", job_id, codes[0])
                    return _lease_of(held)
                raise Retryable(codes) from exc
            if kind == CANCELLED and exc.cancellation_reasons:
                reasons = tx.reasons(exc)
                lease_failed = reason_code(reasons, "lease") == CONDITION_FAILED
                job_failed = reason_code(reasons, "job") == CONDITION_FAILED
                if lease_failed:
                    old = LeaseItem.from_raw_data(old_item(reasons, "lease") or {"job_id": {"S": job_id}})
                    if old.token == token:  # an earlier, ambiguous attempt of this call applied
                        return _lease_of(old)
                old_job = old_item(reasons, "job")
                job_tenant = old_job.get("tenant_id", {}).get("S")
                if job_tenant is not None and job_tenant != tenant_id:
                    raise TenantMismatch(job_id, tenant_id, job_tenant, reason_codes=codes) from exc
                if job_failed or lease_failed:
                    if not old_job and not job_failed:  # job queued, lease orphaned
                        old_job = {"status": {"S": JobStatus.QUEUED.value}}
                    status = old_job.get("status", {}).get("S")
                    raise JobNotQueued(job_id, status, _number(old_job, "attempts"), reason_codes=codes) from exc
                if CONDITION_FAILED in (reason_code(reasons, "tenant"), reason_code(reasons, "cluster")):
                    old_tenant = old_item(reasons, "tenant")
                    cap = _number(old_tenant, "cap")
                    frozen = float(old_tenant["repair_until"]["N"]) if "repair_until" in old_tenant else None
                    raise CapReached(tenant_id, _number(old_tenant, "in_flight"), s.default_cap if cap is None else cap,
                                     repair_until=frozen if frozen and frozen >= t else None,
                                     burst_cap=_number(old_tenant, "burst_cap"), borrowing=borrow,
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


# --- release: the one fenced write that ends a lease ---------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A job another tenant has queued and due (``due_at`` by the release's time), which a release
    may pass its slot to (:attr:`HandOff.claim`)."""

    job_id: str
    tenant_id: str


@dataclass
class HandOff:
    """Waiting jobs of the releasing tenant, one of which is to be handed the place a release
    frees, in the release's own transaction (:func:`fenced_release`): ``candidates`` (job ids) are
    tried in order; ``job_id`` is the one handed the place, once the release applied, else None."""

    candidates: list[str]
    woken_at: float
    reason: str = "release"
    job_id: str | None = None
    #: A worker's name: pass the releasing lease's slot itself to the handed job, whose lease for
    #: ``lease_to`` the same transaction takes (the hand-off in place, docs/design.md §3), where
    #: :func:`slot_passes_on` holds; else only the place passes.
    lease_to: str | None = None
    #: That lease, once the release applied with it; None: only the place passed (or nothing).
    lease: Lease | None = None
    #: Candidate id → its ``parked_at`` as the caller read it: passing the slot is conditional on it,
    #: so the caller's copy of the job is the job as parked (:func:`apply_pass`).
    parked_at: dict[str, float] = dataclasses.field(default_factory=dict)
    #: With no candidates (the caller read none waiting): True once the release applied on
    #: condition that none waited (:func:`none_waiting`), so there is nobody to wake; False if one
    #: had parked since the read (the release then applied without the condition); None: not known.
    none_waited: bool | None = None
    #: With ``lease_to``: the caller read that no other tenant wants a slot, so a slot above the
    #: cap may pass as a lent one (:func:`slot_lent_on`, :func:`slot_lent_from_pool`; the rule is
    #: :func:`leases.policy.lends_slot`); else it passes only within the cap.
    lend: bool = False
    #: With ``lease_to`` and not ``lend``: asked at most once, when the pass within the cap was
    #: refused for the tenant's counters and a lend could apply on the item the refused try
    #: returned (:func:`_lend_after_refusal`), whether no other tenant wants a slot (the caller
    #: reads it then; raising counts as no); True makes the release try to lend the slot before it
    #: passes the place only, so a tenant's first commit above its cap lends too
    #: (:func:`leases.policy.lends_slot`, the simulator's order).
    lend_if: Callable[[], bool] | None = None
    #: True once a release applied that could not pass its slot for the tenant's counters (above
    #: its cap, or frozen): the caller may read whether to lend it next time (set by the release).
    slot_refused: bool = False
    #: True once the release applied passing its slot as a lent one (:func:`slot_lent_on` and
    #: :func:`slot_lent_from_pool` held); False when it passed within the cap after a refused lend,
    #: or passed nothing (set by the release: ``lend`` is only what the caller asked).
    lent: bool = False
    #: With ``lease_to``: another tenant's queued job to pass the slot to instead, in the same
    #: transaction (the fair share, :func:`leases.policy.yields_slot`; the place still passes to
    #: ``candidates``): a lease of ``lease_to`` for it, taken as :func:`acquire` takes one within
    #: the cap (:func:`claim_actions`). Refused (the job taken or not due any more, its tenant at
    #: its cap or frozen), the release is tried again at once without it: the slot then passes to
    #: the tenant's own next job, so a claim that another releaser won costs one refused try.
    claim: Claim | None = None
    #: That lease, once the release applied with ``claim`` (set by the release); None: it did not.
    claimed: Lease | None = None


#: The items a claim adds to a release (:func:`claim_actions`), by name.
CLAIM_ITEMS = ("claim_tenant", "claim_lease", "claim_job")


def claim_actions(tx: NamedTransaction, claim: Claim, worker: str, token: str, t: float) -> Lease:
    """Add to ``tx`` the take of ``claim``'s job under a new lease of ``worker`` with ``token`` at
    ``t`` (epoch s), as :func:`acquire` takes one within the cap and due by ``t``, without the
    cluster's ``busy + 1`` (the releasing slot stays busy): its tenant ``in_flight + 1``,
    ``queued − 1`` on condition :func:`cap_has_room` and :func:`not_frozen`; its lease item, on
    condition none exists; the job ``queued → running`` (:func:`take_actions`) on condition it is
    queued, the tenant's and due. Items named :data:`CLAIM_ITEMS`. Returns the lease it takes."""
    s = get_settings()
    tx.add("update", "claim_tenant", TenantItem(claim.tenant_id),
           actions=[TenantItem.in_flight.set((TenantItem.in_flight | 0) + 1), TenantItem.queued.add(-1)],
           condition=cap_has_room(s.default_cap) & not_frozen(t))
    tx.add("save", "claim_lease", new_lease_item(claim.job_id, claim.tenant_id, worker, token, t),
           condition=LeaseItem.job_id.does_not_exist())
    tx.add("update", "claim_job", JobItem(claim.job_id), actions=take_actions(t, token, worker),
           condition=queued_and_due(claim.tenant_id, t))
    return Lease(claim.job_id, claim.tenant_id, worker, token, t, t + s.lease_ttl_s)


def queued_and_due(tenant_id: str, due_by: float | None = None):
    """Condition on a job item: ``queued``, ``tenant_id``'s, and with ``due_by`` (epoch s) its
    message due by then (``due_at`` absent or ``<= due_by``: not a job in retry backoff)."""
    condition = (JobItem.status == JobStatus.QUEUED.value) & (JobItem.tenant_id == tenant_id)
    if due_by is not None:
        condition = condition & (JobItem.due_at.does_not_exist() | (JobItem.due_at <= due_by))
    return condition


def fenced_release(job_id: str, tenant_id: str, token: str, job_item: Callable[[NamedTransaction, str], None], *,
                   requeue: bool = False, expired_before: float | None = None, hand_off: HandOff | None = None,
                   what: str) -> bool:
    """End the lease of ``job_id`` in one transaction: delete it, ``in_flight − 1``, write the job.

    The one protocol every end of a lease goes through (holder's commit, retry and failure; the
    sweeper's reclaim and orphan removal). The lease delete is conditional on ``token`` (and on
    ``expires_at < expired_before`` when given); ``job_item(tx, release_id)`` adds the job's item
    (an update that should write ``release_id`` into ``JobItem.release_id``, or a condition check).
    With ``requeue`` the job goes back to ``queued`` (its tenant's ``queued + 1``: it keeps its
    place), else the tenant's place is freed (``occupied − 1``), or, with ``hand_off``, passed to
    that waiting job in the same transaction: it goes ``waiting → queued`` (tenant ``waiting − 1``,
    ``queued + 1``, ``occupied`` unchanged) on condition it is still waiting and
    :func:`place_passes_on`. With ``hand_off.lease_to``, the slot passes too: the handed job goes
    ``waiting → running`` under a new lease of ``lease_to`` (tenant ``waiting − 1`` only: the
    release's and the take's ``in_flight`` cancel, as the cluster's ``busy`` does; a lease item for
    it must not exist; its ``parked_at`` unchanged where ``hand_off.parked_at`` names it) on
    condition :func:`slot_passes_on` as well, or, with ``hand_off.lend``, :func:`slot_lent_on` and
    :func:`slot_lent_from_pool` (a slot above the cap, lent on; if they fail, the pass within the
    cap is tried), or, with ``hand_off.lend_if``, lent once the pass within the cap was refused for
    the tenant's counters and ``lend_if()`` says no other tenant wants a slot (a lend refused then
    passes the place only); ``hand_off.lease`` is then that lease. With ``hand_off.claim`` (and
    ``lease_to``), the slot passes to that job of another tenant instead, its lease for
    ``lease_to`` taken in the same transaction (:func:`claim_actions`; the cluster's ``busy``
    unchanged, the place still handed to the candidate, not its slot); if only the claim's
    conditions fail, the release is tried again at once without it, as just described;
    ``hand_off.claimed`` is then that lease. A ``hand_off``
    without candidates (the caller read none waiting) makes the release conditional on none waiting
    (:func:`none_waiting`; ``hand_off.none_waited``: the caller need not wake). If only the
    hand-off's conditions fail, the release is tried again at once with the next
    candidate still waiting (the job was woken or cancelled meanwhile; one batch read skips the
    others taken too: :func:`_still_waiting`), without passing the slot (the tenant's
    leases are over its cap, as a borrowed one may be, or it is frozen), or without a hand-off
    (the cap was lowered; ``hand_off.job_id`` stays None and the caller wakes the usual way).

    Reading a failure: conflicts and throttling are retried (bounded, jittered). After an ambiguous
    failure, and after *any* refused one, the job is read back: if it carries the ``release_id`` of
    one of this call's attempts, the release applied (botocore may resend an attempt that already
    applied after a read timeout, and the resend is refused because the lease is gone). Otherwise an
    ambiguous attempt whose lease is still held is tried again, and anything else means the lease
    is not ours any more.

    Returns:
        True if one of this call's attempts applied, False if the lease was gone, carried another
        token, or (with ``expired_before``) was renewed.

    Raises:
        LeaseContention: conflicts outlasted the bounded retries (the lease stays).
        pynamodb.exceptions.PynamoDBException: an error that says nothing about the lease.
    """
    s = get_settings()
    release_ids: list[str] = []
    handing_ids: dict[str, str] = {}  # release id → the candidate that attempt handed the place to
    passed: dict[str, Lease] = {}  # release id → the lease that attempt took for it (slot passed)
    candidates = [] if hand_off is None or requeue else list(hand_off.candidates)
    check_none = [True] if hand_off is not None and not requeue and not hand_off.candidates else []
    checked: dict[str, bool] = {}  # release id → that attempt was conditional on none waiting
    lent: dict[str, bool] = {}  # release id → that attempt passed its slot as a lent one
    lease_to = [hand_off.lease_to] if hand_off is not None and hand_off.lease_to else []
    lend = [True] if lease_to and hand_off is not None and hand_off.lend else []
    lend_if = [hand_off.lend_if] if lease_to and not lend and hand_off is not None and hand_off.lend_if else []
    successor_token = new_token()
    refused: list[bool] = []  # a try refused the slot for the tenant's counters
    claim = [hand_off.claim] if lease_to and hand_off is not None and hand_off.claim is not None else []
    if claim and claim[0].tenant_id == tenant_id:
        raise ValueError(f"a claim passes a slot to another tenant, not to {tenant_id} itself")
    claim_to = lease_to[0] if claim else ""
    claimed: dict[str, Lease] = {}  # release id → the lease that attempt took for the claim

    def attempt() -> bool:
        release_id = new_token()
        release_ids.append(release_id)
        t = time.time()
        handing = bool(candidates)
        claiming = bool(claim)
        passing = handing and bool(lease_to) and not claiming
        condition = LeaseItem.token == token
        if expired_before is not None:
            condition = condition & (LeaseItem.expires_at < expired_before)
        if requeue:
            place = [TenantItem.in_flight.add(-1), *TenantItem.counted(TenantItem.queued, 1)]
        elif passing:
            place = [TenantItem.waiting.add(-1)]  # in_flight: the release's −1, the take's +1
        elif handing:
            place = [TenantItem.in_flight.add(-1), TenantItem.waiting.add(-1), *TenantItem.counted(TenantItem.queued, 1)]
        else:
            place = [TenantItem.in_flight.add(-1), TenantItem.occupied.add(-1)]
        checking = bool(check_none)
        checked[release_id] = checking
        tenant_condition = place_passes_on(s.default_cap) if handing else none_waiting() if checking else None
        lending = passing and bool(lend)
        lent[release_id] = lending
        if passing:
            tenant_condition = tenant_condition & (slot_lent_on(s.default_cap, t) if lending
                                                   else slot_passes_on(s.default_cap, t))
        if handing:
            handing_ids[release_id] = candidates[0]
        try:
            with NamedTransaction(release_id) as tx:
                tx.add("delete", "lease", LeaseItem(job_id), condition=condition)
                tx.add("update", "tenant", TenantItem(tenant_id), actions=place, condition=tenant_condition,
                       return_values=_ALL_OLD if passing and lend_if else None)
                if not passing and not claiming:  # a passed slot stays busy
                    tx.add("update", "cluster", slots_item(), actions=[ClusterItem.busy.add(-1)])
                elif lending:
                    tx.add("condition_check", "cluster", ClusterItem, CLUSTER_SLOTS_KEY, condition=slot_lent_from_pool())
                job_item(tx, release_id)
                if passing:
                    assert hand_off is not None  # lease_to is its own
                    tx.add("save", "successor_lease",
                           new_lease_item(candidates[0], tenant_id, lease_to[0], successor_token, t),
                           condition=LeaseItem.job_id.does_not_exist())
                    guard = hand_off.parked_at.get(candidates[0])
                    tx.add("update", "successor", JobItem(candidates[0]),
                           actions=[*take_actions(t, successor_token, lease_to[0]), JobItem.waiting_tenant.remove(),
                                    JobItem.woken_at.set(hand_off.woken_at), JobItem.woken_by.set(hand_off.reason)],
                           condition=is_waiting(tenant_id) if guard is None
                           else is_waiting(tenant_id) & (JobItem.parked_at == guard))
                    passed[release_id] = Lease(candidates[0], tenant_id, lease_to[0], successor_token, t,
                                               t + s.lease_ttl_s)
                elif handing:
                    assert hand_off is not None  # the candidates are its own
                    tx.add("update", "successor", JobItem(candidates[0]),
                           actions=wake_actions(tenant_id, hand_off.woken_at, hand_off.reason),
                           condition=is_waiting(tenant_id))
                if claiming:
                    claimed[release_id] = claim_actions(tx, claim[0], claim_to, successor_token, t)
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if (handing or checking or claiming) and kind == CANCELLED and exc.cancellation_reasons:
                reasons = tx.reasons(exc)
                if CONDITION_FAILED not in (reason_code(reasons, "lease"), reason_code(reasons, "job")):
                    claim_refused = claiming and CONDITION_FAILED in (reason_code(reasons, name) for name in CLAIM_ITEMS)
                    if claim_refused:
                        claim.clear()  # taken by another releaser, or its tenant at its cap: pass in place
                    if CONDITION_FAILED in (reason_code(reasons, "successor"), reason_code(reasons, "successor_lease")):
                        del candidates[0]  # woken by another release, or cancelled: the next one still waiting
                        candidates[:] = _still_waiting(candidates, tenant_id)
                        return attempt()
                    if claim_refused:
                        return attempt()
                    if lending and reason_code(reasons, "cluster") == CONDITION_FAILED:
                        lend.clear()  # the pool is down to its reserve: pass within the cap only
                        if refused:  # which was refused already: the place only
                            lease_to.clear()
                        return attempt()
                    if reason_code(reasons, "tenant") == CONDITION_FAILED:
                        if checking:
                            check_none.clear()  # a job parked since the read: release; the caller wakes
                        elif lending:
                            lend.clear()  # above the burst cap, or not borrowing: within the cap only
                            if refused:  # which was refused already: the place only
                                lease_to.clear()
                        elif passing:
                            refused.append(True)  # over the cap or frozen
                            if lend_if and _lend_after_refusal(lend_if.pop(), old_item(reasons, "tenant"), t):
                                lend.append(True)  # nobody else wants a slot: lend it
                            else:
                                lease_to.clear()  # pass the place only
                        else:
                            candidates.clear()  # the cap was lowered: free the place instead
                        return attempt()
            if kind == ERROR or (kind == CANCELLED and CONDITION_FAILED not in codes):
                raise
            applied_id = released_by(job_id, release_ids)
            if applied_id is not None:
                log.info("%s of job %s: failed (%s), but a try of it applied", what, job_id, codes[0])
                if hand_off is not None:
                    hand_off.slot_refused = bool(refused)
                    hand_off.lent = lent[applied_id] and applied_id in passed
                    hand_off.job_id = handing_ids.get(applied_id)
                    hand_off.lease = passed.get(applied_id)
                    hand_off.claimed = claimed.get(applied_id)
                    hand_off.none_waited = checked[applied_id] if not hand_off.candidates else None
                return True
            if kind == AMBIGUOUS:
                held = read_lease(job_id)
                if held is not None and held.token == token:
                    raise Retryable(codes) from exc
            return False
        if hand_off is not None:
            hand_off.slot_refused = bool(refused)
            hand_off.lent = lending
            hand_off.job_id = candidates[0] if handing else None
            hand_off.lease = passed.get(release_id)
            hand_off.claimed = claimed.get(release_id)
            hand_off.none_waited = checking if not hand_off.candidates else None
        return True

    return with_conflict_retries(attempt, what=what)


def _still_waiting(candidates: list[str], tenant_id: str) -> list[str]:
    """Those of ``candidates`` still waiting (``tenant_id``'s), in their order: one strongly
    consistent batch read after a candidate was handed by a concurrent release. Releasers that read
    the line at once would otherwise try each job taken meanwhile in turn, one refused transaction
    each (the k-th releaser of a round k − 1 of them); the order, oldest first, is kept. A read
    that fails keeps the list as it is."""
    if len(candidates) <= 1:
        return candidates
    try:
        found = {job.job_id: job for job in JobItem.batch_get(candidates, consistent_read=True,
                                                              attributes_to_get=["job_id", "status", "tenant_id"])}
    except PynamoDBException as exc:
        log.info("could not read which hand-off candidates still wait (%s); trying them in turn", exc)
        return candidates
    return [job_id for job_id in candidates if job_id in found and found[job_id].status == JobStatus.WAITING.value
            and found[job_id].tenant_id == tenant_id]


def _lend_after_refusal(lend_if: Callable[[], bool], old_tenant: dict, now: float) -> bool:
    """After a pass within the cap was refused for the tenant's counters (``old_tenant``: its raw
    item as the refused try found it): lend the slot instead? Only where a lend could apply
    (:func:`leases.policy.may_lend_slot` and :data:`leases.policy.PASS_ON` on that item: not a tier
    without a burst cap, nor a frozen one) and ``lend_if()`` says no other tenant wants a slot; a
    ``lend_if`` that raises counts as no (the place then passes)."""
    if not old_tenant:
        return False
    state = tenant_state(TenantItem.from_raw_data(old_tenant))
    default_cap = get_settings().default_cap
    if not (policy.may_lend_slot(state, default_cap, now) and policy.holds(policy.PASS_ON, state, default_cap)):
        return False
    try:
        return bool(lend_if())
    except Exception as exc:  # noqa: BLE001 - the release must not fail on this read: pass the place only
        log.info("could not tell whether another tenant wants a slot (%s); passing the place only", exc)
        return False


def _release(lease: Lease, job_actions: list, *, what: str, requeue: bool = False,
             hand_off: HandOff | None = None) -> None:
    """The holder's release: :func:`fenced_release` on a job that runs under ``lease`` (passing
    its place to ``hand_off`` when given).

    Raises:
        LeaseLost: the lease was not ours any more (nothing was written).
        LeaseContention: as :func:`fenced_release`.
    """

    def job_item(tx: NamedTransaction, release_id: str) -> None:
        tx.add("update", "job", JobItem(lease.job_id),
               actions=[*job_actions, JobItem.release_id.set(release_id)],
               condition=(JobItem.lease_token == lease.token) & (JobItem.status == JobStatus.RUNNING.value))

    if not fenced_release(lease.job_id, lease.tenant_id, lease.token, job_item, requeue=requeue,
                          hand_off=hand_off, what=what):
        raise LeaseLost(lease.job_id, lease.token, f"({what} refused)")


def requeue_actions(tenant_id: str, due_at: float) -> list:
    """Job actions of a move to ``queued`` whose message becomes visible at ``due_at`` (epoch s)."""
    return [JobItem.status.set(JobStatus.QUEUED.value), JobItem.queued_tenant.set(tenant_id),
            JobItem.due_at.set(due_at), JobItem.lease_token.remove()]


def commit_success(
    lease: Lease, *, output_key: str, sheets: int, sides: int, now: float | None = None,
    warnings: list[dict[str, str]] | None = None, preview_keys: list[str] | None = None,
    hand_off: HandOff | None = None,
) -> dict[str, Any]:
    """Record ``succeeded`` with the plate's key and release the slot, all fenced by the token.

    The job's webhook event is put in the outbox by the same write (:mod:`leases.outbox`).
    ``warnings`` are the engine's typed warnings (``[{"code", "message"}, …]``), stored as
    ``JobItem.warnings`` (an empty list when there are none); ``preview_keys`` the S3 keys of the
    plate's previews, as ``JobItem.preview_keys``. ``hand_off``: the tenant's next waiting job,
    handed the place in the same transaction (see :func:`fenced_release`).

    Returns:
        The job attributes the commit wrote, by name (a removed one as None; the outbox's and
        ``release_id`` left out), so the caller knows the committed job without reading it back.

    Raises:
        LeaseLost: the lease was reclaimed; nothing was written (the job is someone else's now).
        LeaseContention: conflicts outlasted the retries (the lease stays; the sweeper frees it).
    """
    t = time.time() if now is None else now
    written: dict[str, Any] = {
        "status": JobStatus.SUCCEEDED.value, "output_key": output_key, "sheets": sheets, "sides": sides,
        "warnings": list(warnings or []), "preview_keys": list(preview_keys or []), "finished_at": t,
    }
    removed = ("lease_token", "error", "error_code")
    _release(
        lease,
        [
            *(getattr(JobItem, name).set(value) for name, value in written.items()),
            *(getattr(JobItem, name).remove() for name in removed),
            *outbox.intent_actions(t),
        ],
        what="commit",
        hand_off=hand_off,
    )
    return {**written, **dict.fromkeys(removed)}


def release_for_retry(lease: Lease, *, error: str, error_code: str, delay_s: float = 0,
                      now: float | None = None, infra_attempt: int | None = None) -> None:
    """Put the job back to ``queued`` (a retry message, visible in ``delay_s``, is already
    published) and free the slot. With ``infra_attempt`` (the attempt's number), the failure was
    the infrastructure's (an AWS endpoint or the network failed the run): in the same transaction
    that attempt joins ``JobItem.infra_lost_attempts`` (not charged) and ``lost_attempts`` records it
    with cause ``infra_error``.

    Raises:
        LeaseLost, LeaseContention: as :func:`commit_success`.
    """
    t = time.time() if now is None else now
    infra = []
    if infra_attempt is not None:
        entry = lost_attempt_entry(infra_attempt, "infra_error", f"{error_code}: {error}", t, token=lease.token)
        infra = [JobItem.infra_lost_attempts.add({int(infra_attempt)}),
                 JobItem.lost_attempts.set((JobItem.lost_attempts | []).append([entry]))]
    _release(
        lease,
        [*requeue_actions(lease.tenant_id, t + delay_s), JobItem.error.set(error), JobItem.error_code.set(error_code),
         *infra],
        what="release for retry",
        requeue=True,
    )


def fail_job(lease: Lease, *, error: str, error_code: str, now: float | None = None,
             hand_off: HandOff | None = None) -> None:
    """Record ``failed`` with the reason and free the slot (or hand it to ``hand_off``, as
    :func:`commit_success`); the webhook event goes to the outbox.

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
            *outbox.intent_actions(t),
        ],
        what="fail",
        hand_off=hand_off,
    )


# --- outside a lease ----------------------------------------------------------------------------


def lost_attempt_entry(attempt: int, cause: str, detail: str, now: float, token: str | None = None) -> dict:
    """One entry of ``JobItem.lost_attempts`` (``cause``: ``infra_lost``, ``infra_error`` or
    ``holder_vanished``; ``token``: the lease's fencing token, where known)."""
    entry = {"attempt": int(attempt), "cause": cause, "at": now, "detail": detail[:500]}
    if token is not None:
        entry["token"] = token
    return entry


def resolve_acquire(unresolved: AcquireUnresolved, *, now: float | None = None) -> Lease | None:
    """Settle an :class:`~leases.errors.AcquireUnresolved` once DynamoDB answers.

    * the lease exists under the acquire's token: the acquire applied and the lease is still this
      caller's; it is renewed at once (its TTL may have run out meanwhile) and returned;
    * else, if the sweeper already reclaimed that lease (a ``holder_vanished`` entry of
      ``JobItem.lost_attempts`` with the token), the attempt is recorded ``infra_lost``
      (:func:`record_infra_lost`: not charged); returns None;
    * else the acquire never applied: returns None.

    Raises:
        pynamodb.exceptions.PynamoDBException: DynamoDB still cannot be reached (the caller retries).
    """
    held = read_lease(unresolved.job_id)
    if held is not None and held.token == unresolved.token:
        try:
            return renew(_lease_of(held), now=now)
        except LeaseLost:
            pass  # reclaimed between the read and the renewal: look for the sweeper's note below
    try:
        job = JobItem.get(unresolved.job_id, consistent_read=True, attributes_to_get=["lost_attempts"])
    except DoesNotExist:
        return None
    for entry in job.lost_attempts or []:
        if entry.get("token") == unresolved.token and entry.get("cause") == "holder_vanished":
            record_infra_lost(unresolved.job_id, int(entry["attempt"]),
                              detail=f"acquire unresolved: DynamoDB unreachable ({unresolved})", now=now)
    return None


def record_infra_lost(job_id: str, attempt: int, *, detail: str, now: float | None = None) -> bool:
    """The holder of attempt ``attempt`` lost its lease because it could not reach DynamoDB: the
    attempt stops counting against the budget (``JobItem.infra_lost_attempts``) and the job's
    ``lost_attempts`` says so. One update, on condition the job is not final (a job the sweeper
    already failed stays failed) and has fewer than ``Settings.infra_retry_limit`` uncharged
    attempts (the bound ``FairTask`` applies to an ``infra_error``: a release that fails the same
    way every time, a ValidationException say, must end in the budget, not loop). Returns True if
    written (or ``attempt`` was recorded already), False if the job is final, missing or at the limit.

    Raises:
        pynamodb.exceptions.UpdateError: DynamoDB failed (the caller retries).
    """
    t = time.time() if now is None else now
    entry = lost_attempt_entry(attempt, "infra_lost", detail, t)
    try:
        JobItem(job_id).update(
            actions=[JobItem.infra_lost_attempts.add({int(attempt)}),
                     JobItem.lost_attempts.set((JobItem.lost_attempts | []).append([entry]))],
            condition=JobItem.job_id.exists() & JobItem.status.is_in(
                JobStatus.QUEUED.value, JobStatus.RUNNING.value, JobStatus.WAITING.value)
            & (JobItem.infra_lost_attempts.does_not_exist()
               | (size(JobItem.infra_lost_attempts) < get_settings().infra_retry_limit)
               | JobItem.infra_lost_attempts.contains(int(attempt))),
        )
    except UpdateError as exc:
        if error_code(exc) == _CONDITION_FAILED_EXCEPTION:
            return False
        raise
    return True


def record_defer(job_id: str, *, delay_s: float = 0, now: float | None = None) -> bool:
    """Count one deferral on a queued job, stamp its first receive and when its copy is due (best
    effort; ``delay_s`` is the copy's SQS delay).

    Does nothing if the job is not queued any more. Never raises: the count is a statistic, and
    a failure here must not cost the deferral itself. Returns True if the count was written.
    """
    t = time.time() if now is None else now
    try:
        JobItem(job_id).update(
            actions=[
                JobItem.defer_count.set((JobItem.defer_count | 0) + 1),
                JobItem.first_received_at.set(JobItem.first_received_at | t),
                JobItem.due_at.set(t + delay_s),
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


#: Items one ``TransactGetItems`` may read (DynamoDB API reference, TransactGetItems).
TRANSACT_GET_MAX_ITEMS = 100
#: Items one ``TransactWriteItems`` may write (DynamoDB API reference, TransactWriteItems).
TRANSACT_WRITE_MAX_ITEMS = 100


@dataclass(frozen=True)
class TenantsSnapshot:
    """Tenant items and the cluster's slot counter read together.

    Attributes:
        tenants: the tenant items that exist, by tenant id order.
        slots: the slot counter (``busy``, ``total``, ``borrowable``), or None if never written.
        reads: the ``TransactGetItems`` calls it took: 1 means one serializable moment for all of
            them; more (over ``TRANSACT_GET_MAX_ITEMS - 1`` tenants) means one moment per call.
    """

    tenants: list
    slots: ClusterItem | None
    reads: int


def _found(future):
    """The model a ``TransactGet`` future holds, or None for an item that does not exist."""
    try:
        return future.get()
    except DoesNotExist:
        return None


def read_tenants_and_slots(tenant_ids: Iterable[str]) -> TenantsSnapshot:
    """Read the tenants ``tenant_ids`` and the cluster's slot counter in one ``TransactGetItems``
    (serializable against the lease transactions, which move a tenant's ``in_flight`` and the
    counter's ``busy`` together), or in as few as ``TRANSACT_GET_MAX_ITEMS`` allows, the counter
    in the first. A read that conflicts with a write in progress is retried with jitter.

    Raises:
        LeaseContention: conflicts outlasted the retries.
        pynamodb.exceptions.TransactGetError: DynamoDB failed otherwise.
    """
    from pynamodb.exceptions import TransactGetError  # noqa: PLC0415
    from pynamodb.transactions import TransactGet  # noqa: PLC0415

    ids = sorted(set(tenant_ids))
    per_read = TRANSACT_GET_MAX_ITEMS - 1
    chunks = [ids[i:i + per_read] for i in range(0, len(ids), per_read)] or [[]]

    def read(chunk: list[str], with_slots: bool):
        def attempt():
            try:
                with TransactGet(connection=tx_connection()) as tx:
                    futures = [tx.get(TenantItem, tenant_id) for tenant_id in chunk]
                    slots = tx.get(ClusterItem, CLUSTER_SLOTS_KEY) if with_slots else None
            except TransactGetError as exc:
                code = error_code(exc)
                if code in RETRYABLE_ERRORS or code == "TransactionCanceledException":
                    raise Retryable((code,)) from exc
                raise
            return [item for item in map(_found, futures) if item is not None], (_found(slots) if slots else None)

        return with_conflict_retries(attempt, what="read the tenants and the slot counter")

    tenants: list = []
    slots = None
    for n, chunk in enumerate(chunks):
        items, counter = read(chunk, n == 0)
        tenants += items
        slots = counter if n == 0 else slots
    return TenantsSnapshot(tenants, slots, len(chunks))
