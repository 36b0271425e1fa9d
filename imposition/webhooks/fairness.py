"""Fair webhook delivery (issue 16): at most ``Settings.webhook_tenant_concurrency`` rounds of one
tenant POST at once, across every notifications worker.

A per-tenant Redis semaphore made of that many redis-py locks (``<ns>:webhooks:<tenant>:delivering:<i>``),
each taken without blocking and with the round's hard time limit as its timeout, so the slot of a
child killed mid-round frees itself by then. A round whose tenant has every slot taken is put back
on the queue with an SQS delay (:mod:`imposition.webhooks.tasks`) and the notifications slot goes to the next
message: one tenant's hanging endpoint holds at most that many notifications slots, for at most one
round's time limit each. Why this and not the lease mechanism: docs/design.md, "Fair notifications".

Redis unreachable: the round goes ahead without the limit (fail open, logged): fairness between
tenants' webhooks is not worth delaying every tenant's webhook for.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
from collections.abc import Iterator

import redis
from redis.exceptions import LockError, RedisError

from imposition.common.redis_keys import KeyKind, redis_key
from imposition.common.settings import SQS_MAX_DELAY_S, get_settings

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def _client(url: str, pid: int) -> redis.Redis:
    timeout_s = get_settings().admission_redis_timeout_s
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def slot_keys(tenant_id: str) -> list[str]:
    """The Redis keys of ``tenant_id``'s delivery slots (one lock each)."""
    return [redis_key(KeyKind.WEBHOOK_DELIVERING, tenant_id, n)
            for n in range(get_settings().webhook_tenant_concurrency)]


class TenantBusy(Exception):
    """Every delivery slot of the tenant is taken; ``retry_after_s`` until the first one frees at the latest."""

    def __init__(self, tenant_id: str, retry_after_s: float) -> None:
        super().__init__(f"tenant {tenant_id}: {get_settings().webhook_tenant_concurrency} webhook round(s) "
                         f"already running; next slot free within {retry_after_s:.0f} s")
        self.tenant_id = tenant_id
        self.retry_after_s = retry_after_s


@contextlib.contextmanager
def delivery_slot(tenant_id: str, *, hold_s: float) -> Iterator[None]:
    """Hold one of ``tenant_id``'s delivery slots for the block (at most ``hold_s`` seconds, then it
    frees itself).

    Raises:
        TenantBusy: every slot is held (nothing taken).
    """
    client = _client(get_settings().redis_url, os.getpid())
    keys = slot_keys(tenant_id)
    held = None
    try:
        for key in keys:
            lock = client.lock(key, timeout=hold_s, blocking=False, thread_local=False)
            if lock.acquire():
                held = lock
                break
        else:
            remaining_ms = [ms for ms in (client.pttl(key) for key in keys) if ms > 0]
            raise TenantBusy(tenant_id, min(remaining_ms) / 1000 if remaining_ms else 1.0)
    except RedisError as exc:
        log.warning("webhooks of tenant %s: Redis unavailable (%s); delivering without the per-tenant limit",
                    tenant_id, exc)
    try:
        yield
    finally:
        if held is not None:
            try:
                held.release()
            except (LockError, RedisError) as exc:  # expired (it freed itself) or Redis gone: the TTL frees it
                log.info("webhooks of tenant %s: slot not released (%s); it expires by itself", tenant_id, exc)


def busy_delay_s(busy_deferrals: int, retry_after_s: float) -> int:
    """SQS delay of a round put back for the ``busy_deferrals + 1``-th time (seconds, 1–900): the
    base delay doubled per put-back, at most ``webhook_tenant_busy_delay_max_s`` and at most until
    the running round's time limit frees its slot (``retry_after_s``)."""
    s = get_settings()
    doubled = s.webhook_tenant_busy_delay_s * 2 ** min(max(0, busy_deferrals), 20)
    return int(max(1, min(doubled, s.webhook_tenant_busy_delay_max_s, math.ceil(retry_after_s), SQS_MAX_DELAY_S)))
