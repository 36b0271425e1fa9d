"""Tenant tiers: the cap override in the tenants table, read live by every lease transaction.

A change applies to the next :func:`leases.transactions.acquire` on any worker, without a restart:
the cap is compared inside the transaction's condition, never cached by a worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from pynamodb.exceptions import DoesNotExist, PutError, TransactWriteError

from leases.dynamo import (
    _CONDITION_FAILED_EXCEPTION,
    CANCELLED,
    RETRY,
    RETRYABLE_ERRORS,
    NamedTransaction,
    Retryable,
    classify,
    error_code,
    new_token,
    tx_connection,
    with_conflict_retries,
)
from leases.models import ClusterItem, LeaseItem, TenantItem, slot_shard_key, summed_slots
from leases.conditions import slots_item
from imposition.common.settings import get_settings
from imposition.common.tenancy import shown_value, validate_tenant_id


def set_cap(tenant_id: str, cap: int | None, *, burst_cap: int | None = None) -> None:
    """Set ``tenant_id``'s cap override (``None`` removes it: back to ``Settings.default_cap``) and
    its burst cap (``None``, or equal to the cap: no borrowing).

    With a burst cap above the cap, the tenant may take more leases than its cap, up to the burst
    cap, while the cluster's busy slots stay below its live slots less ``Settings.reserve_slots``
    (borrowing, docs/design.md §3); nothing is preempted when others need the slots back.

    Lowering the cap below the current ``in_flight`` kills nothing: running jobs finish, and the
    tenant acquires no new lease until ``in_flight`` is below the new cap. A cap of 0 pauses the
    tenant: its jobs stay parked (``waiting``, no message) until the cap is raised.

    Raises:
        imposition.common.tenancy.InvalidTenantId: not a canonical tenant id.
        ValueError: ``cap`` is not an integer from 0 to ``Settings.max_cap`` (the bound keeps it far
            inside DynamoDB's 38-digit numbers), or ``burst_cap`` not from the cap to ``max_cap``.
        leases.errors.LeaseContention: concurrent changes of the tier outlasted the retries.
    """
    validate_tenant_id(tenant_id)
    borrows = _checked_tier(cap, burst_cap)
    ensure_tenant(tenant_id)
    action = TenantItem.cap.remove() if cap is None else TenantItem.cap.set(cap)
    # borrows only with a burst cap (_checked_tier); the None test narrows it for mypy
    burst = TenantItem.burst_cap.set(burst_cap) if borrows and burst_cap is not None else TenantItem.burst_cap.remove()

    def attempt() -> None:
        t = time.time()
        before = TenantItem.get(tenant_id, consistent_read=True, attributes_to_get=["tenant_id", "burst_cap"]).burst_cap
        delta = int(borrows) - int(before is not None)
        unchanged = TenantItem.burst_cap.does_not_exist() if before is None else TenantItem.burst_cap == before
        try:
            with NamedTransaction(new_token()) as tx:
                tx.add("update", "tenant", TenantItem(tenant_id),
                       actions=[action, burst, TenantItem.updated_at.set(t), TenantItem.cap_changed_at.set(t)],
                       condition=unchanged)
                if delta:
                    tx.add("update", "cluster", slots_item(), actions=[ClusterItem.borrowers.add(delta)])
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind in (RETRY, CANCELLED):  # another set-cap changed the burst meanwhile: read again
                raise Retryable(codes) from exc
            raise

    with_conflict_retries(attempt, what=f"set the cap of tenant {tenant_id}")


def _checked_tier(cap: int | None, burst_cap: int | None) -> bool:
    """Check a cap and burst cap as :func:`set_cap` takes them; True if the tier borrows (a burst
    cap above the effective cap).

    Raises:
        ValueError: see :func:`set_cap`.
    """
    max_cap = get_settings().max_cap
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or not 0 <= cap <= max_cap):
        raise ValueError(f"cap={shown_value(cap)}: must be an integer from 0 to max_cap={max_cap}")
    effective = get_settings().default_cap if cap is None else cap
    if burst_cap is not None and (not isinstance(burst_cap, int) or isinstance(burst_cap, bool)
                                  or not effective <= burst_cap <= max_cap):
        raise ValueError(f"burst_cap={shown_value(burst_cap)}: must be an integer from the cap ({effective}) "
                         f"to max_cap={max_cap}")
    if burst_cap is not None and effective == 0 and burst_cap > 0:
        raise ValueError(f"burst_cap={burst_cap}: a paused tenant (cap 0) cannot borrow; raise its cap first")
    return burst_cap is not None and burst_cap != effective


class TenantExists(ValueError):
    """``tenant create`` of a tenant that is registered already (nothing was changed)."""


def create_tenant(tenant_id: str, *, cap: int | None = None, burst_cap: int | None = None,
                  rate_limit_per_min: int | None = None, admission_in_flight_cap: int | None = None,
                  webhook_url: str | None = None, webhook_secret_ciphertext: bytes | None = None) -> None:
    """Register ``tenant_id`` with its whole configuration in one transaction: the tenant item, put
    on condition that none exists (counters 0), and for a borrowing tier the cluster's count of
    borrowing tiers. Absent values are the defaults (``Settings.default_cap``, no borrowing, the
    admission defaults, no webhook).

    The webhook URL and secret are the caller's to check (:func:`imposition.webhooks.endpoints.checked_webhook`:
    this package does not resolve hosts) and the secret the caller's to encrypt
    (:func:`imposition.webhooks.secrets.encrypt`).

    Raises:
        imposition.common.tenancy.InvalidTenantId: not a canonical tenant id (``NonCanonicalTenantId`` names the
            lower-case form).
        ValueError: a cap or burst cap as :func:`set_cap` refuses it, a limit below 1.
        TenantExists: the tenant is registered already.
    """
    validate_tenant_id(tenant_id)
    borrows = _checked_tier(cap, burst_cap)
    for name, value in (("rate_limit_per_min", rate_limit_per_min), ("in_flight_cap", admission_in_flight_cap)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{name}={shown_value(value)}: must be an integer >= 1")
    item = TenantItem(tenant_id, in_flight=0, queued=0, waiting=0, occupied=0, updated_at=time.time(), cap=cap,
                      burst_cap=burst_cap if borrows else None, rate_limit_per_min=rate_limit_per_min,
                      admission_in_flight_cap=admission_in_flight_cap, webhook_url=webhook_url,
                      webhook_secret_ciphertext=webhook_secret_ciphertext)
    try:
        with NamedTransaction(new_token()) as tx:
            tx.add("save", "tenant", item, condition=TenantItem.tenant_id.does_not_exist())
            if borrows:
                tx.add("update", "cluster", slots_item(), actions=[ClusterItem.borrowers.add(1)])
    except TransactWriteError as exc:
        if classify(exc)[0] == CANCELLED:
            raise TenantExists(f"tenant {tenant_id!r} is registered already; change it with `imposition tenant "
                               "set-cap`, `set-limits` or `set-webhook`") from exc
        raise


def describe_tenant(tenant_id: str) -> dict:
    """A tenant's fairness state: ``cap``, ``cap_source`` (override/default), ``in_flight``, leases."""
    validate_tenant_id(tenant_id)
    default_cap = get_settings().default_cap
    try:
        item = TenantItem.get(tenant_id, consistent_read=True)
    except DoesNotExist:
        return {"tenant_id": tenant_id, "cap": default_cap, "cap_source": "default", "in_flight": 0,
                "leases": [], "known": False}
    leases = [lease for lease in LeaseItem.scan(LeaseItem.tenant_id == tenant_id)]
    return {
        "tenant_id": tenant_id,
        "cap": item.effective_cap(default_cap),
        "cap_source": "override" if item.cap is not None else "default",
        "burst_cap": int(item.burst_cap) if item.burst_cap is not None else item.effective_cap(default_cap),
        "queued": int(item.queued or 0),
        "waiting": int(item.waiting or 0),
        "in_flight": int(item.in_flight or 0),
        "leases": [{"job_id": lease.job_id, "worker": lease.worker, "expires_at": lease.expires_at}
                   for lease in leases],
        "known": True,
    }


#: Items one ``TransactGetItems`` may read (DynamoDB API reference, TransactGetItems).
TRANSACT_GET_MAX_ITEMS = 100


@dataclass(frozen=True)
class TenantsSnapshot:
    """Tenant items and the cluster's slot counter read together.

    Attributes:
        tenants: the tenant items that exist, by tenant id order.
        slots: the slot counter (``busy``, ``total``, ``borrowable`` summed over its shards), or
            None if never written.
        reads: the ``TransactGetItems`` calls it took: 1 means one serializable moment for all of
            them; more (over ``TRANSACT_GET_MAX_ITEMS − cluster_slot_shards`` tenants) means one
            moment per call.
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
    """Read the tenants ``tenant_ids`` and the cluster's slot counter (all its shards) in one
    ``TransactGetItems`` (serializable against the lease transactions, which move a tenant's
    ``in_flight`` and a shard's ``busy`` together), or in as few as ``TRANSACT_GET_MAX_ITEMS``
    allows, the counter in the first. A read that conflicts with a write in progress is retried with jitter.

    Raises:
        LeaseContention: conflicts outlasted the retries.
        pynamodb.exceptions.TransactGetError: DynamoDB failed otherwise.
    """
    from pynamodb.exceptions import TransactGetError  # noqa: PLC0415
    from pynamodb.transactions import TransactGet  # noqa: PLC0415

    ids = sorted(set(tenant_ids))
    shards = get_settings().cluster_slot_shards
    per_read = TRANSACT_GET_MAX_ITEMS - shards
    chunks = [ids[i:i + per_read] for i in range(0, len(ids), per_read)] or [[]]

    def read(chunk: list[str], with_slots: bool):
        def attempt():
            try:
                with TransactGet(connection=tx_connection()) as tx:
                    futures = [tx.get(TenantItem, tenant_id) for tenant_id in chunk]
                    slots = [tx.get(ClusterItem, slot_shard_key(k)) for k in range(shards if with_slots else 0)]
            except TransactGetError as exc:
                code = error_code(exc)
                if code in RETRYABLE_ERRORS or code == "TransactionCanceledException":
                    raise Retryable((code,)) from exc
                raise
            counter = summed_slots(item for item in map(_found, slots) if item is not None)
            return [item for item in map(_found, futures) if item is not None], counter

        return with_conflict_retries(attempt, what="read the tenants and the slot counter")

    tenants: list = []
    slots = None
    for n, chunk in enumerate(chunks):
        items, counter = read(chunk, n == 0)
        tenants += items
        slots = counter if n == 0 else slots
    return TenantsSnapshot(tenants, slots, len(chunks))


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
