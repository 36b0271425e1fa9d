"""The durable claim of an idempotency token, written with the job item in one DynamoDB transaction.

Redis (:mod:`imposition.admission.control`) is the fast check and can forget; the claim in the ``tokens`` table
(:class:`leases.models.TokenClaimItem`, keyed by tenant and SHA-256 of the token) cannot, and it is
written in the job item's transaction, so no job exists without its claim and no claim without its
job::

    TransactWriteItems (one NamedTransaction)
      [0] Put claim (tenant, sha256(token)) → job id, expires_at = now + idempotency TTL
          condition claim_free = attribute_not_exists(token_sha256)      never claimed
                                 OR expires_at < now                     claimed, but expired
                                                                         (TTL deletion lags)
      [1] Put job item (queued, or waiting when the door parks it: leases.waiting.through_door)
          condition job_new    = attribute_not_exists(job_id)            job ids are global
      [2] Update tenant: queued + 1 or waiting + 1 (the counters the hand-off keeps exact)

A failure is read by :func:`leases.dynamo.classify` (reasons by item name): claim cancelled →
:class:`~imposition.admission.errors.DuplicateSubmission` (with the job id holding the token: a token Redis
forgot is refused here, and put back in Redis); job cancelled → :class:`~imposition.admission.errors.DuplicateJobId`;
ambiguous → the claim is read back (it names our job id exactly when the write applied). Why: docs/design.md,
"The idempotency token is claimed durably in DynamoDB"; a token Redis forgot: "Admission state lives in Redis".
"""

from __future__ import annotations

import logging
import math
import time

from pynamodb.exceptions import DeleteError, DoesNotExist, TransactWriteError

from imposition.admission.control import token_hash
from imposition.admission.errors import AdmissionUnavailable, DuplicateJobId, DuplicateSubmission
from leases.errors import LeaseContention
from leases import waiting
from leases.models import JobItem, TenantItem, TokenClaimItem
from leases.dynamo import (
    AMBIGUOUS,
    CANCELLED,
    CONDITION_FAILED,
    RETRY,
    NamedTransaction,
    Retryable,
    classify,
    error_code,
    new_token,
    old_item,
    reason_code,
    with_conflict_retries,
)

log = logging.getLogger(__name__)

_ALL_OLD = "ALL_OLD"
_CONDITION_FAILED_EXCEPTION = "ConditionalCheckFailedException"


def read_claim(tenant_id: str, token: str, *, now: float | None = None) -> TokenClaimItem | None:
    """The live claim of ``tenant_id``'s ``token`` (strongly consistent), or None if there is none
    or it has expired (``expires_at`` before ``now``, epoch s, default the clock)."""
    t = time.time() if now is None else now
    try:
        claim = TokenClaimItem.get(tenant_id, token_hash(token), consistent_read=True)
    except DoesNotExist:
        return None
    return claim if float(claim.expires_at) >= t else None


def create_job_with_claim(job: JobItem, *, ttl_s: float, now: float | None = None) -> None:
    """Write ``job`` (a new job item, ``queued`` or ``waiting`` as the door set it), the claim of
    its token and its tenant's counter in one transaction.

    Args:
        job: the job item to create; its ``tenant_id``, ``token`` and ``job_id`` name the claim.
        ttl_s: the tenant's idempotency TTL, seconds (> 0): the claim's ``expires_at`` is
            ``ceil(now + ttl_s)``, integer epoch seconds (DynamoDB TTL's unit).
        now: epoch seconds (default the clock): a claim whose ``expires_at`` is before it is free.

    Raises:
        ValueError: ``ttl_s`` is not > 0.
        DuplicateSubmission: the token holds a live claim of another job (``.job_id``); nothing written.
        DuplicateJobId: a job item with ``job.job_id`` exists (any tenant's); nothing written.
        AdmissionUnavailable: conflicts or throttling outlasted ``Settings.lease_conflict_attempts``
            tries; nothing written (cause chained).
        pynamodb.exceptions.PynamoDBException: any other DynamoDB failure.
    """
    if not ttl_s > 0:
        raise ValueError(f"ttl_s={ttl_s!r}: must be > 0 seconds")
    tenant_id, job_id = job.tenant_id, job.job_id
    digest = token_hash(job.token)

    def attempt() -> None:
        t = time.time() if now is None else now
        claim = TokenClaimItem(tenant_id, digest, job_id=job_id, claimed_at=t, expires_at=math.ceil(t + ttl_s))
        never_claimed = TokenClaimItem.token_sha256.does_not_exist()
        claim_expired = TokenClaimItem.expires_at < t
        job_new = JobItem.job_id.does_not_exist()
        try:
            with NamedTransaction(new_token()) as tx:
                tx.add("save", "claim", claim, condition=never_claimed | claim_expired, return_values=_ALL_OLD)
                tx.add("save", "job", job, condition=job_new, return_values=_ALL_OLD)
                tx.add("update", "tenant", TenantItem(tenant_id), actions=waiting.counter_actions(job, 1))
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == AMBIGUOUS:
                held = read_claim(tenant_id, job.token, now=t)
                if held is not None and held.job_id == job_id:
                    log.info("job %s: claim write failed ambiguously (%s), but it applied", job_id, codes[0])
                    return
                raise Retryable(codes) from exc
            if kind == CANCELLED and exc.cancellation_reasons:
                reasons = tx.reasons(exc)
                if reason_code(reasons, "claim") == CONDITION_FAILED:
                    holder = old_item(reasons, "claim").get("job_id", {}).get("S")
                    if holder is None:  # no old image returned: read it
                        held = read_claim(tenant_id, job.token, now=t)
                        holder = held.job_id if held is not None else None
                        if holder is None:  # expired or deleted meanwhile: try again
                            raise Retryable(codes) from exc
                    if holder == job_id:  # an earlier, ambiguous attempt of this call applied
                        return
                    raise DuplicateSubmission(tenant_id, holder) from exc
                if reason_code(reasons, "job") == CONDITION_FAILED:
                    raise DuplicateJobId(tenant_id, job_id) from exc
            raise

    try:
        with_conflict_retries(attempt, what=f"claim token for job {job_id}")
    except LeaseContention as exc:
        raise AdmissionUnavailable(f"tenant {tenant_id!r}: token claim for job {job_id} not written: {exc}; "
                                   "nothing published") from exc


def undo_job_with_claim(job: JobItem) -> None:
    """Delete the job item, its tenant's count of it and the token's claim written by
    :func:`create_job_with_claim` (its submission failed later), in one transaction; idempotent.

    Only what is the job's is deleted: the claim if it still names the job, the job item (and its
    count) if it belongs to the tenant and still has the status it was written with. If either
    condition fails (already undone, the claim expired and was taken by a later job, the job moved
    on), the other part is still undone on its own condition.

    Raises:
        pynamodb.exceptions.PynamoDBException: DynamoDB failed (the caller logs it and keeps its
            original error; the claim then expires after the idempotency TTL).
    """
    claim = TokenClaimItem(job.tenant_id, token_hash(job.token))
    claim_is_ours = TokenClaimItem.job_id == job.job_id
    try:
        with NamedTransaction(new_token()) as tx:
            tx.add("delete", "claim", claim, condition=claim_is_ours)
            _undo_job(tx, job)
        return
    except TransactWriteError as exc:
        kind, _ = classify(exc)
        if kind != CANCELLED:
            raise
    try:
        claim.delete(condition=claim_is_ours)
    except DeleteError as exc:
        if error_code(exc) != _CONDITION_FAILED_EXCEPTION:
            raise
    try:
        with NamedTransaction(new_token()) as tx:
            _undo_job(tx, job)
    except TransactWriteError as exc:
        if classify(exc)[0] != CANCELLED:
            raise


def _undo_job(tx: NamedTransaction, job: JobItem) -> None:
    tx.add("delete", "job", JobItem(job.job_id),
           condition=(JobItem.tenant_id == job.tenant_id) & (JobItem.status == job.status))
    tx.add("update", "tenant", TenantItem(job.tenant_id), actions=waiting.counter_actions(job, -1))
