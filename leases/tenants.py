"""Tenant tiers: the cap override in the tenants table, read live by every lease transaction.

A change applies to the next :func:`leases.transactions.acquire` on any worker, without a restart:
the cap is compared inside the transaction's condition, never cached by a worker.
"""

from __future__ import annotations

import time

from pynamodb.exceptions import DoesNotExist

from leases.models import LeaseItem, TenantItem
from leases.transactions import ensure_tenant
from service.settings import get_settings
from service.tenancy import shown_value, validate_tenant_id


def set_cap(tenant_id: str, cap: int | None) -> None:
    """Set ``tenant_id``'s cap override (``None`` removes it: back to ``Settings.default_cap``).

    Lowering the cap below the current ``in_flight`` kills nothing: running jobs finish, and the
    tenant acquires no new lease until ``in_flight`` is below the new cap. A cap of 0 pauses the
    tenant: its jobs stay queued (deferred again and again) until the cap is raised.

    Raises:
        service.tenancy.InvalidTenantId: not a canonical tenant id.
        ValueError: ``cap`` is not an integer from 0 to ``Settings.max_cap`` (the bound keeps it far
            inside DynamoDB's 38-digit numbers).
    """
    validate_tenant_id(tenant_id)
    max_cap = get_settings().max_cap
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or not 0 <= cap <= max_cap):
        raise ValueError(f"cap={shown_value(cap)}: must be an integer from 0 to max_cap={max_cap}")
    ensure_tenant(tenant_id)
    action = TenantItem.cap.remove() if cap is None else TenantItem.cap.set(cap)
    t = time.time()
    TenantItem(tenant_id).update(
        actions=[action, TenantItem.updated_at.set(t), TenantItem.cap_changed_at.set(t)]
    )


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
        "in_flight": int(item.in_flight or 0),
        "leases": [{"job_id": lease.job_id, "worker": lease.worker, "expires_at": lease.expires_at}
                   for lease in leases],
        "known": True,
    }
