"""DynamoDB transactions as the lease layer writes them: failures read, conflicts retried, items named.

Not scheduling: the plumbing under :mod:`leases.transactions` and :mod:`leases.waiting`. A failed
write is read by :func:`classify`:

* **retry** (:data:`RETRYABLE_REASONS`, :data:`RETRYABLE_ERRORS`): nothing written; tried again with
  jittered backoff, at most ``Settings.lease_conflict_attempts`` times (:func:`with_conflict_retries`);
* **cancelled**: a condition failed, nothing written; each item's reason, looked up by item name
  (:class:`NamedTransaction`), decides the domain error;
* **ambiguous**: no answer or a 5xx: the write may have applied; the caller reads back the item it
  would have written (strongly consistent), never blindly repeats it (each attempt has its
  ``ClientRequestToken``). Why: docs/design.md, "Three outcomes, plus "ambiguous"".
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import time
from collections.abc import Callable
from typing import TypeVar

from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, PynamoDBException, TransactWriteError
from pynamodb.transactions import TransactWrite
from tenacity import (RetryCallState, RetryError, Retrying, retry_if_exception, retry_if_exception_type,
                      stop_after_attempt, wait_random_exponential)

from imposition.common import aws
from imposition.common.settings import get_settings
from leases.errors import LeaseContention

T = TypeVar("T")

log = logging.getLogger(__name__)

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


def unreachable(exc: BaseException) -> bool:
    """True if ``exc`` says DynamoDB could not be reached or kept refusing, not that a condition
    failed or an item is missing: :class:`LeaseContention`, or a PynamoDB error :func:`classify`
    reads as ambiguous or retry."""
    if isinstance(exc, LeaseContention):
        return True
    return (isinstance(exc, PynamoDBException) and not isinstance(exc, DoesNotExist)
            and classify(exc)[0] in (AMBIGUOUS, RETRY))


def with_patience(fn: Callable[[], T], *, until: float, what: str) -> T:
    """Run ``fn`` again while it fails :func:`unreachable`, until ``until`` (epoch s), with the
    conflict backoff between tries (``Settings.lease_conflict_backoff_s``, ``..._max_s``).

    Raises:
        Whatever ``fn`` raised last: an error that is not :func:`unreachable` at once, or the last
        one once ``until`` has passed.
    """
    s = get_settings()

    def waited(state: RetryCallState) -> None:
        log.warning("%s: DynamoDB unreachable (%s); trying again for up to %.1f s more", what,
                    state.outcome.exception() if state.outcome else None, until - time.time())

    retrying = Retrying(
        retry=retry_if_exception(unreachable),
        wait=wait_random_exponential(multiplier=s.lease_conflict_backoff_s, max=s.lease_conflict_backoff_max_s),
        stop=lambda state: time.time() >= until,
        before_sleep=waited,
        reraise=True,
    )
    return retrying(fn)


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
