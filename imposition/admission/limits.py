"""Per-tenant admission limits: the defaults in :mod:`imposition.common.settings`, overridden per tenant in the
tenants table (``TenantItem.rate_limit_per_min``, ``admission_in_flight_cap``, ``idempotency_ttl_s``).

Every submitting process keeps a tenant's limits for ``Settings.admission_limits_cache_s`` seconds
(a small in-process TTL cache), so a change made with ``imposition tenant set-limits`` applies
everywhere within that time, without a restart, and admission costs no DynamoDB read per job.
The same read tells whether the tenant is registered (:func:`check_registered`); only a registered
tenant's limits are cached (tenants are never deleted), so a tenant created a moment ago is
admitted at once everywhere.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from pynamodb.exceptions import DoesNotExist, PynamoDBException
from pynamodb.expressions.update import Action

import logging

from imposition.admission.errors import AdmissionUnavailable, UnknownTenant
from leases.models import TenantItem
from imposition.common.settings import get_settings
from imposition.common.tenancy import validate_tenant_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TenantLimits:
    """The three admission limits of one tenant.

    Attributes:
        rate_limit_per_min: jobs admitted in any 60 s window (>= 1).
        in_flight_cap: submitted-but-unconfirmed jobs allowed at once (>= 1).
        idempotency_ttl_s: how long a token stays taken after its submission, seconds (>= 1).
        registered: the tenant has an item in the tenants table (False: the defaults of a tenant
            that does not exist).
    """

    rate_limit_per_min: int
    in_flight_cap: int
    idempotency_ttl_s: int
    registered: bool = True


_cache: dict[str, tuple[float, TenantLimits]] = {}
_cache_lock = threading.Lock()


def _read_limits(tenant_id: str) -> TenantLimits:
    settings = get_settings()
    registered = True
    try:
        item = TenantItem.get(tenant_id, consistent_read=True)
    except DoesNotExist:
        item, registered = TenantItem(tenant_id), False
    return TenantLimits(
        rate_limit_per_min=int(item.rate_limit_per_min or settings.rate_limit_per_min),
        in_flight_cap=int(item.admission_in_flight_cap or settings.admission_in_flight_cap),
        idempotency_ttl_s=int(item.idempotency_ttl_s or settings.idempotency_ttl_s),
        registered=registered,
    )


def limits_for(tenant_id: str) -> TenantLimits:
    """``tenant_id``'s limits: its overrides, else the defaults (cached, see module docstring).

    Raises:
        imposition.common.tenancy.InvalidTenantId: not a canonical tenant id.
        AdmissionUnavailable: the tenants table could not be read (admission fails closed).
    """
    validate_tenant_id(tenant_id)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(tenant_id)
    if hit is not None and hit[0] > now:
        return hit[1]
    try:
        limits = _read_limits(tenant_id)
    except PynamoDBException as exc:
        raise AdmissionUnavailable(f"tenant {tenant_id!r}: admission limits unreadable ({exc})") from exc
    if limits.registered:
        with _cache_lock:
            _cache[tenant_id] = (now + get_settings().admission_limits_cache_s, limits)
    return limits


def check_registered(tenant_id: str) -> None:
    """Refuse a submission for a tenant that is not registered, unless ``Settings.auto_register_tenants``
    is on: then register it (default cap and limits) and log it. Costs no DynamoDB read for a
    tenant whose limits are cached.

    Raises:
        imposition.common.tenancy.InvalidTenantId: not a canonical tenant id (``NonCanonicalTenantId`` names
            the canonical spelling).
        UnknownTenant: no such tenant, and auto-registration is off (nothing written).
        AdmissionUnavailable: the tenants table could not be read.
    """
    from leases.tenants import ensure_tenant  # noqa: PLC0415 (keeps this module light to import)

    if limits_for(tenant_id).registered:
        return
    if not get_settings().auto_register_tenants:
        raise UnknownTenant(tenant_id)
    ensure_tenant(tenant_id)
    forget_cached_limits(tenant_id)
    log.info("tenant %s registered on its first submission (auto_register_tenants is on)", tenant_id)


def require_registered(tenant_id: str) -> None:
    """For a command that changes a tenant (``tenant set-cap``, ``set-limits``, ``set-webhook``):
    refuse a tenant that is not registered, unless ``Settings.auto_register_tenants`` is on (then the
    command registers it, as a submission would). Reads the tenants table (never the cache).

    Raises:
        UnknownTenant: no such tenant, and auto-registration is off.
        AdmissionUnavailable: the tenants table could not be read.
    """
    forget_cached_limits(tenant_id)
    if not limits_for(tenant_id).registered and not get_settings().auto_register_tenants:
        raise UnknownTenant(tenant_id)


def forget_cached_limits(tenant_id: str | None = None) -> None:
    """Drop this process's cached limits of ``tenant_id`` (all tenants if None)."""
    with _cache_lock:
        if tenant_id is None:
            _cache.clear()
        else:
            _cache.pop(tenant_id, None)


def set_limits(
    tenant_id: str,
    *,
    rate_limit_per_min: int | None = None,
    in_flight_cap: int | None = None,
    idempotency_ttl_s: int | None = None,
    reset: tuple[str, ...] = (),
) -> TenantLimits:
    """Set ``tenant_id``'s admission overrides; return its limits as they now are.

    A value of None leaves that override as it is; a name in ``reset`` (``"rate_limit_per_min"``,
    ``"in_flight_cap"``, ``"idempotency_ttl_s"``) removes it (back to the default). Other processes
    see the change within ``Settings.admission_limits_cache_s``. A lower in-flight cap refuses new
    submissions only; nothing admitted is withdrawn.

    Raises:
        imposition.common.tenancy.InvalidTenantId: not a canonical tenant id.
        ValueError: a value below 1, or an unknown name in ``reset``.
    """
    from leases.tenants import ensure_tenant  # noqa: PLC0415 (keeps this module light to import)

    validate_tenant_id(tenant_id)
    attributes = {
        "rate_limit_per_min": TenantItem.rate_limit_per_min,
        "in_flight_cap": TenantItem.admission_in_flight_cap,
        "idempotency_ttl_s": TenantItem.idempotency_ttl_s,
    }
    unknown = set(reset) - set(attributes)
    if unknown:
        raise ValueError(f"reset={sorted(unknown)}: unknown limit(s); known: {sorted(attributes)}")
    values = {"rate_limit_per_min": rate_limit_per_min, "in_flight_cap": in_flight_cap,
              "idempotency_ttl_s": idempotency_ttl_s}
    actions: list[Action] = []
    for name, value in values.items():
        if name in reset:
            actions.append(attributes[name].remove())
        elif value is not None:
            if int(value) < 1:
                raise ValueError(f"{name}={value}: must be >= 1")
            actions.append(attributes[name].set(int(value)))
    ensure_tenant(tenant_id)
    if actions:
        TenantItem(tenant_id).update(actions=[*actions, TenantItem.updated_at.set(time.time())])
    forget_cached_limits(tenant_id)
    return limits_for(tenant_id)
