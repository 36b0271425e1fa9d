"""The one function that builds every Redis key of the service: :func:`redis_key`.

A key is made of typed parts, joined by ``:``, a separator none of them may contain::

    <namespace>:<area>:<tenant>:<kind>            kinds without an id (a tenant's rate log)
    <namespace>:<area>:<tenant>:<kind>:<id>       kinds with an id (a token hash, a job id, a bucket)

* ``namespace`` is ``Settings.redis_key_namespace`` (``[A-Za-z0-9._-]{1,64}``);
* ``area`` and ``kind`` come from :class:`KeyKind` (a fixed set; the caller never names them);
* ``tenant`` is a canonical tenant id (:func:`imposition.common.tenancy.validate_tenant_id`: it starts with a
  letter or digit) or, for keys that belong to no tenant, :data:`NO_TENANT` (``_``), which no
  tenant id can be;
* ``id`` is ``[A-Za-z0-9._-]+`` (job ids, hex digests and integers all are).

Because no part can hold a ``:``, a key splits back into exactly the parts it was built from, and
every kind has a fixed number of parts: two different (tenant, kind, id) never give the same key,
whatever a caller chooses as its job id or tenant id. (The old layout put caller-chosen job ids at
``<ns>:admission:job:<job id>``, the same place as tenant ``job``'s keys: job id ``rate`` overwrote
tenant ``job``'s rate log.)

No I/O here; the namespace is read from the settings at call time.
"""

from __future__ import annotations

import re
from enum import Enum

from imposition.common.settings import get_settings
from imposition.common.tenancy import shown_value, validate_tenant_id

#: Separator of the parts of a key; no part may contain it.
SEPARATOR = ":"
#: The tenant part of a key that belongs to no tenant (tenant ids start with a letter or digit).
NO_TENANT = "_"
_ID_PART = re.compile(r"[A-Za-z0-9._-]+")


class KeyKind(Enum):
    """Every kind of Redis key: value (area, kind name, takes an id)."""

    #: admission: job id holding one idempotency token (id: SHA-256 hex of the token).
    TOKEN = ("admission", "token", True)
    #: admission: the tenant's sliding-window rate log (sorted set).
    RATE = ("admission", "rate", False)
    #: admission: the tenant's admitted, unconfirmed jobs (sorted set).
    IN_FLIGHT = ("admission", "in_flight", False)
    #: admission: tenant of an admitted job, for ``confirm(job_id)`` (no tenant; id: the job id).
    JOB = ("admission", "job", True)
    #: imposition.observability.recent: cap defers of one tenant in one time bucket (id: bucket start, epoch s).
    RECENT_CAP_DEFER = ("recent", "cap_defer", True)
    #: imposition.observability.recent: lease recoveries of one tenant in one time bucket (id: bucket start).
    RECENT_LEASE_RECOVERED = ("recent", "lease_recovered", True)
    #: imposition.webhooks.fairness: one of the tenant's delivery slots, a redis-py lock (id: the slot's number).
    WEBHOOK_DELIVERING = ("webhooks", "delivering", True)
    #: imposition.webhooks.signing: an accepted webhook request, for the replay check (no tenant; id:
    #: ``<event id>.<signature timestamp>``).
    WEBHOOK_REPLAY = ("webhooks", "replay", True)

    @property
    def area(self) -> str:
        """The package the key belongs to (second part of the key)."""
        return self.value[0]

    @property
    def kind_name(self) -> str:
        """The kind's name (fourth part of the key)."""
        return self.value[1]

    @property
    def takes_id(self) -> bool:
        """True if keys of this kind end with an id part."""
        return self.value[2]


def redis_key(kind: KeyKind, tenant_id: str | None, key_id: str | int | None = None) -> str:
    """The Redis key of ``kind`` for ``tenant_id`` (None: a key of no tenant) and ``key_id``.

    Args:
        kind: which key.
        tenant_id: canonical tenant id, or None for a key that belongs to no tenant (written
            :data:`NO_TENANT`).
        key_id: the id part, required exactly when ``kind.takes_id``; ``[A-Za-z0-9._-]+`` (an int
            is written in decimal).

    Returns:
        ``<namespace>:<area>:<tenant>:<kind>[:<id>]`` (see the module docstring).

    Raises:
        imposition.common.tenancy.InvalidTenantId: ``tenant_id`` is not canonical.
        ValueError: an id given to a kind that takes none, missing for one that does, or holding
            a character outside ``[A-Za-z0-9._-]`` (the message shows at most a short prefix of it).
    """
    tenant_part = NO_TENANT if tenant_id is None else validate_tenant_id(tenant_id)
    parts = [get_settings().redis_key_namespace, kind.area, tenant_part, kind.kind_name]
    if kind.takes_id:
        text = str(key_id) if isinstance(key_id, (str, int)) and not isinstance(key_id, bool) else None
        if text is None or not _ID_PART.fullmatch(text):
            raise ValueError(f"Redis key {kind.name}: id={shown_value(key_id)} must be a non-empty string "
                             "of [A-Za-z0-9._-]")
        parts.append(text)
    elif key_id is not None:
        raise ValueError(f"Redis key {kind.name}: takes no id, got {shown_value(key_id)}")
    return SEPARATOR.join(parts)

