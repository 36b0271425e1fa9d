"""The heartbeat's fenced write (docs/design.md §4): :func:`renew` extends a lease while its token
is still there; :func:`still_held` reads whether it is."""

from __future__ import annotations

import dataclasses
import time

from pynamodb.exceptions import UpdateError

from imposition.common.settings import get_settings
from leases.dynamo import AMBIGUOUS, CANCELLED, RETRY, Retryable, classify, with_conflict_retries
from leases.errors import LeaseLost
from leases.models import LeaseItem
from leases.reads import read_lease
from leases.transactions import Lease


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
