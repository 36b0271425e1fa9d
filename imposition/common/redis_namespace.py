"""Deleting one Redis key namespace: how a run that shares a Redis cleans up after itself.

Every Redis key the service writes starts with ``<Settings.redis_key_namespace>:`` (admission's
tokens, rate logs and in-flight sets, the recent-event counts). ``make run``, ``make test`` and
``make soak`` each take a namespace of their own and delete only that one, never a whole database,
so runs on one machine (a developer's and CI's) share the Redis at 127.0.0.1:6379 without meeting.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

#: Keys deleted per ``DEL`` call while a namespace is forgotten.
_DELETE_BATCH = 1000


def forget(namespace: str, urls: Iterable[str], *, connect_timeout_s: float = 2.0) -> int:
    """Delete every key ``<namespace>:*`` from each Redis in ``urls`` (duplicates counted once);
    returns how many keys were deleted.

    Uses ``SCAN`` (never ``KEYS``), so a large database is not blocked.

    Raises:
        ValueError: ``namespace`` is empty or holds ``:`` or a glob character (it would match other
            runs' keys, or part of another namespace).
        redis.RedisError: a Redis did not answer.
    """
    if not namespace or any(c in namespace for c in "*?[]\\:"):
        raise ValueError(f"redis_key_namespace {namespace!r}: must be non-empty, without ':' or glob characters")
    deleted = 0
    for url in dict.fromkeys(urls):
        with redis.Redis.from_url(url, socket_connect_timeout=connect_timeout_s) as client:
            batch: list[bytes] = []
            for key in client.scan_iter(match=f"{namespace}:*", count=_DELETE_BATCH):
                batch.append(key)
                if len(batch) >= _DELETE_BATCH:
                    deleted += client.delete(*batch)
                    batch.clear()
            if batch:
                deleted += client.delete(*batch)
    return deleted
