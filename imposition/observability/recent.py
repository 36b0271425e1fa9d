"""Recent per-tenant event counts in Redis, for ``imposition status`` with no worker running.

Prometheus counters live in the workers' memory (and their multiprocess files); an operator's
``imposition status`` must work from a laptop with no worker up. So the two events the status
screen counts over the last hour, cap defers and lease recoveries, are also counted here, in time
buckets of ``Settings.recent_bucket_s`` seconds::

    <namespace>:recent:<tenant>:<event>:<bucket start, epoch s>   INCR, EXPIRE window + bucket

(built by :func:`imposition.common.redis_keys.redis_key`, like every Redis key of the service)

in the events side-channel Redis (``Settings.events_url``: a monitoring store, never the admission
database). A sum over a window reads the window's buckets with one ``MGET`` per tenant. Writes are
best effort: a Redis failure is logged and never fails the job that caused the event.
"""

from __future__ import annotations

import functools
import logging
import os
import time

import redis

from imposition.common.redis_keys import KeyKind, redis_key
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)

#: Events counted here, each with the kind of its keys.
_EVENT_KINDS = {"cap_defer": KeyKind.RECENT_CAP_DEFER, "lease_recovered": KeyKind.RECENT_LEASE_RECOVERED}
EVENTS = tuple(_EVENT_KINDS)


@functools.lru_cache(maxsize=None)
def _client(url: str, pid: int) -> redis.Redis:
    timeout_s = get_settings().events_redis_timeout_s
    return redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)


def client() -> redis.Redis | None:
    """This process's client of the events Redis, or None when ``events_url`` is empty."""
    url = get_settings().events_url
    return _client(url, os.getpid()) if url else None


def _key(event: str, tenant_id: str, bucket_start: int) -> str:
    return redis_key(_EVENT_KINDS[event], tenant_id, bucket_start)


def _bucket_start(t: float, bucket_s: int) -> int:
    return int(t // bucket_s) * bucket_s


def record(event: str, tenant_id: str, *, now: float | None = None, count: int = 1) -> None:
    """Count ``count`` occurrences of ``event`` for ``tenant_id`` at ``now`` (epoch s). Best effort.

    Raises:
        ValueError: ``event`` is not one of :data:`EVENTS`.
    """
    if event not in EVENTS:
        raise ValueError(f"event={event!r}: must be one of {EVENTS}")
    r = client()
    if r is None:
        return
    s = get_settings()
    t = time.time() if now is None else now
    key = _key(event, tenant_id, _bucket_start(t, s.recent_bucket_s))
    try:
        with r.pipeline(transaction=False) as pipe:
            pipe.incrby(key, count)
            pipe.expire(key, int(s.status_window_s + 2 * s.recent_bucket_s))
            pipe.execute()
    except redis.RedisError as exc:
        log.warning("could not count %s of tenant %s in Redis: %s", event, tenant_id, exc)


def window_count(event: str, tenant_id: str, *, window_s: float, now: float | None = None) -> int:
    """Occurrences of ``event`` for ``tenant_id`` in the buckets overlapping ``(now − window_s, now]``.

    Bucket granularity: the count may include up to one bucket (``recent_bucket_s``) before the
    window's start. Returns 0 when ``events_url`` is empty.

    Raises:
        redis.RedisError: Redis did not answer.
    """
    r = client()
    if r is None:
        return 0
    bucket_s = get_settings().recent_bucket_s
    t = time.time() if now is None else now
    first, last = _bucket_start(t - window_s, bucket_s), _bucket_start(t, bucket_s)
    keys = [_key(event, tenant_id, b) for b in range(first, last + 1, bucket_s)]
    return sum(int(v) for v in r.mget(keys) if v is not None)

