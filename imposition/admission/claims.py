"""The durable claim of an idempotency token: its rules, and what a refusal of it means.

Redis (:mod:`imposition.admission.control`) is the fast check and can forget; the claim in the ``tokens`` table
(:class:`leases.models.TokenClaimItem`, keyed by tenant and SHA-256 of the token) cannot. It is one
item of the door's transaction (:func:`leases.waiting.admit`), so no job exists without its claim
and no claim without its job::

    TransactWriteItems (leases.waiting.admit)
      [0] Put claim (tenant, sha256(token)) → job id, expires_at = now + idempotency TTL
          condition free = attribute_not_exists(token_sha256)      never claimed
                           OR expires_at < now                     claimed, but expired
                                                                   (TTL deletion lags)
      [1] Put job item (queued, or waiting when the door parks it)
          condition attribute_not_exists(job_id)                   job ids are global
      [2] Update tenant: queued + 1 or waiting + 1 (the counters the hand-off keeps exact)

This module writes nothing: :func:`token_claim` gives the lease layer the claim and its conditions
(``free`` for admit, ``ours`` for :func:`leases.waiting.withdraw`), and :func:`refusal` reads what
admit raised: the claim refused → :class:`~imposition.admission.errors.DuplicateSubmission` (with the
job id holding the token: a token Redis forgot is refused here, and the submission puts it back in
Redis); the job refused → :class:`~imposition.admission.errors.DuplicateJobId`; contention →
:class:`~imposition.admission.errors.AdmissionUnavailable`. Why: docs/design.md, "The idempotency token is
claimed durably in DynamoDB"; a token Redis forgot: "Admission state lives in Redis".
"""

from __future__ import annotations

import math
import time

from pynamodb.exceptions import DoesNotExist

from imposition.admission.control import token_hash
from imposition.admission.errors import AdmissionError, AdmissionUnavailable, DuplicateJobId, DuplicateSubmission
from leases.errors import AdmitRefused, LeaseContention
from leases.models import JobItem, TokenClaimItem
from leases.waiting import Claim


def read_claim(tenant_id: str, token: str, *, now: float | None = None) -> TokenClaimItem | None:
    """The live claim of ``tenant_id``'s ``token`` (strongly consistent), or None if there is none
    or it has expired (``expires_at`` before ``now``, epoch s, default the clock)."""
    t = time.time() if now is None else now
    try:
        claim = TokenClaimItem.get(tenant_id, token_hash(token), consistent_read=True)
    except DoesNotExist:
        return None
    return claim if float(claim.expires_at) >= t else None


def token_claim(job: JobItem, *, ttl_s: float, now: float | None = None) -> Claim:
    """The claim of ``job``'s token, for :func:`leases.waiting.admit` and :func:`leases.waiting.withdraw`.

    Args:
        job: the new job item; its ``tenant_id``, ``token`` and ``job_id`` name the claim.
        ttl_s: the tenant's idempotency TTL, seconds (> 0): the claim's ``expires_at`` is
            ``ceil(now + ttl_s)``, integer epoch seconds (DynamoDB TTL's unit).
        now: epoch seconds (default the clock): a stored claim whose ``expires_at`` is before it is free.

    Raises:
        ValueError: ``ttl_s`` is not > 0.
    """
    if not ttl_s > 0:
        raise ValueError(f"ttl_s={ttl_s!r}: must be > 0 seconds")
    t = time.time() if now is None else now
    item = TokenClaimItem(job.tenant_id, token_hash(job.token), job_id=job.job_id, claimed_at=t,
                          expires_at=math.ceil(t + ttl_s))
    never_claimed = TokenClaimItem.token_sha256.does_not_exist()
    expired = TokenClaimItem.expires_at < t
    return Claim(item=item, free=never_claimed | expired, ours=TokenClaimItem.job_id == job.job_id)


def refusal(exc: AdmitRefused | LeaseContention, tenant_id: str) -> AdmissionError:
    """What a refused :func:`leases.waiting.admit` means to the submitter (nothing was written):
    :class:`DuplicateSubmission` naming the job that holds the token, :class:`DuplicateJobId`, or
    :class:`AdmissionUnavailable` (conflicts or throttling outlasted ``Settings.lease_conflict_attempts``
    tries). The caller raises it, chained to ``exc``."""
    if isinstance(exc, LeaseContention):
        return AdmissionUnavailable(f"tenant {tenant_id!r}: token claim not written: {exc}; nothing published")
    if exc.item == AdmitRefused.CLAIM:
        return DuplicateSubmission(tenant_id, exc.holder)
    return DuplicateJobId(tenant_id, exc.job_id)
