"""Signing and verifying webhook requests, the way payment providers sign theirs (Stripe's scheme).

Every request carries two headers::

    Imposition-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
    Imposition-Event-Id:  <the event's id, also the "id" field of the JSON body>

Signing the timestamp together with the body means a captured request cannot be re-sent with a
fresh timestamp; the receiver rejects timestamps further than ``tolerance_s`` from its clock (300 s,
Stripe's default) and remembers each accepted (event id, timestamp) for that long, so a replay
within the tolerance is rejected too. By default it remembers them in Redis (``Settings.redis_url``,
:class:`RedisReplayStore`), shared by every receiving process, so a replay sent to another process
is refused as well (``IMPOSITION_WEBHOOK_REPLAY_STORE=memory``: this process only). Several ``v1=`` entries may appear (secret rotation); one
match is enough. Comparisons use :func:`hmac.compare_digest` (constant time).

A legitimate redelivery of the same event carries a new timestamp and signature, so it verifies;
the tenant recognises it by its event id (and :func:`admission.confirm` is idempotent).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Protocol

from imposition.webhooks.errors import (
    InvalidSignature,
    MalformedSignature,
    ReplayedEvent,
    ReplayStoreUnavailable,
    StaleTimestamp,
)

SIGNATURE_HEADER = "Imposition-Signature"
EVENT_ID_HEADER = "Imposition-Event-Id"
#: The signature scheme's name in the header (HMAC-SHA256 over "<t>.<body>").
SCHEME = "v1"
#: Stripe's default tolerance between the signature timestamp and the receiver's clock, seconds.
DEFAULT_TOLERANCE_S = 300
#: Longest accepted ``t=`` value, digits (unix seconds have 10 until the year 2286).
MAX_TIMESTAMP_DIGITS = 12


def compute_signature(secret: str, timestamp_s: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``"<timestamp_s>.<body>"`` under ``secret`` (RFC 2104 HMAC, FIPS 180-4 SHA-256)."""
    return hmac.new(secret.encode(), str(int(timestamp_s)).encode() + b"." + body, hashlib.sha256).hexdigest()


def signed_headers(body: bytes, secret: str, event_id: str, *, timestamp_s: int | None = None) -> dict[str, str]:
    """The headers of one delivery of ``body``: content type, signature (now, or ``timestamp_s``), event id.

    Raises:
        ValueError: an empty secret.
    """
    if not secret:
        raise ValueError("secret: must be non-empty")
    t = int(time.time() if timestamp_s is None else timestamp_s)
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: f"t={t},{SCHEME}={compute_signature(secret, t, body)}",
        EVENT_ID_HEADER: event_id,
    }


class Headers(Protocol):
    """Request headers as a verifier reads them: ``items()`` gives ``(name, value)`` pairs, a name
    repeated when the request repeats it (a mapping, or :class:`email.message.Message` as
    :mod:`http.server` gives them)."""

    def items(self) -> Iterable[tuple[str, str]]:
        """Every header as a ``(name, value)`` pair."""


class ReplayStore(Protocol):
    """Where a verifier remembers accepted requests for the tolerance window."""

    def remember(self, key: str, ttl_s: float) -> bool:
        """Record ``key`` for ``ttl_s`` seconds; return False if it was already recorded (a replay)."""


class MemoryReplayStore:
    """A process-local :class:`ReplayStore` (one receiver process). Thread-safe."""

    def __init__(self) -> None:
        self._expires: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, key: str, ttl_s: float) -> bool:
        """See :meth:`ReplayStore.remember`."""
        now = time.monotonic()
        with self._lock:
            while self._expires and next(iter(self._expires.values())) <= now:
                self._expires.popitem(last=False)
            expires = self._expires.get(key)
            if expires is not None and expires > now:
                return False
            self._expires[key] = now + ttl_s
            return True


class RedisReplayStore:
    """A :class:`ReplayStore` in Redis (``SET key NX PX``), shared by every receiver process.

    Keys are ``<namespace>:webhooks:_:replay:<key>`` (:func:`imposition.common.redis_keys.redis_key`).

    Args:
        client: a redis-py client.

    Raises (from :meth:`remember`):
        MalformedSignature: ``key`` holds a character outside ``[A-Za-z0-9._-]`` (event ids never do).
        ReplayStoreUnavailable: Redis could not be reached.
    """

    def __init__(self, client) -> None:
        self.client = client

    def remember(self, key: str, ttl_s: float) -> bool:
        """See :meth:`ReplayStore.remember`."""
        from redis.exceptions import RedisError  # noqa: PLC0415 (the verifier alone needs no Redis)

        from imposition.common.redis_keys import KeyKind, redis_key  # noqa: PLC0415

        try:
            name = redis_key(KeyKind.WEBHOOK_REPLAY, None, key)
        except ValueError:
            raise MalformedSignature(f"{EVENT_ID_HEADER}: only A-Z a-z 0-9 . _ - are accepted") from None
        try:
            return bool(self.client.set(name, 1, nx=True, px=max(1, int(ttl_s * 1000))))
        except RedisError as exc:
            raise ReplayStoreUnavailable(f"replay store unreachable: {type(exc).__name__}") from exc


_process_store = MemoryReplayStore()


@functools.lru_cache(maxsize=None)
def _redis_store(url: str, pid: int) -> RedisReplayStore:
    import redis  # noqa: PLC0415

    from imposition.common.settings import get_settings  # noqa: PLC0415

    timeout_s = get_settings().admission_redis_timeout_s
    return RedisReplayStore(redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s))


def default_replay_store() -> ReplayStore:
    """The replay store :func:`verify_webhook` uses when given none: Redis at ``Settings.redis_url``
    (one client per process), or this process's memory with ``Settings.webhook_replay_store = "memory"``."""
    from imposition.common.settings import get_settings  # noqa: PLC0415

    settings = get_settings()
    if settings.webhook_replay_store == "memory":
        return _process_store
    return _redis_store(settings.redis_url, os.getpid())


def _text(value: object) -> str | None:
    """``value`` as ASCII text (str, or bytes as some frameworks give them), or None if it is not."""
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
    return value if isinstance(value, str) and value.isascii() else None


def _header(headers: Headers, name: str) -> str | None:
    """The value of header ``name`` (names compared case-insensitively), or None if it is absent.

    Raises:
        MalformedSignature: ``headers`` has no ``items()``, the header appears more than once, or its
            value is not one ASCII string (a list, non-ASCII text).
    """
    lowered = name.lower()
    try:
        values = [value for key, value in headers.items() if (_text(key) or "").lower() == lowered]
    except (AttributeError, TypeError, ValueError):
        raise MalformedSignature(f"headers: need a mapping of names to values, got {type(headers).__name__}") from None
    if len(values) > 1:
        raise MalformedSignature(f"header {name} appears {len(values)} times; send it once")
    if not values:
        return None
    value = _text(values[0])
    if value is None:
        raise MalformedSignature(f"header {name}: must be one ASCII string, got {type(values[0]).__name__}"
                                 f"{' with non-ASCII characters' if isinstance(values[0], (str, bytes)) else ''}")
    return value


def _raw_body(body: object) -> bytes:
    """The bytes of ``body`` (bytes-like, or text as UTF-8).

    Raises:
        MalformedSignature: neither bytes nor text, or text that has no UTF-8 form (a lone surrogate).
    """
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        try:
            return body.encode()
        except UnicodeEncodeError:
            raise MalformedSignature("body: text with no UTF-8 form (a lone surrogate); pass the raw bytes") from None
    raise MalformedSignature(f"body: must be the raw request bytes, got {type(body).__name__}")


def parse_signature_header(value: str) -> tuple[int, list[str]]:
    """``"t=…,v1=…[,v1=…]"`` → (timestamp, [v1 signatures]); unknown schemes are ignored.

    Raises:
        MalformedSignature: no ``t`` or no ``v1`` entry, a ``t`` that is not 1 to
            :data:`MAX_TIMESTAMP_DIGITS` ASCII digits, or non-ASCII text.
    """
    if not value.isascii():
        raise MalformedSignature(f"{SIGNATURE_HEADER}: must be ASCII")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in value.split(","):
        name, _, item = part.strip().partition("=")
        if name == "t":
            if not (item.isdigit() and len(item) <= MAX_TIMESTAMP_DIGITS):
                raise MalformedSignature(f"{SIGNATURE_HEADER}: t={item[:MAX_TIMESTAMP_DIGITS + 1]!r} is not "
                                         f"a unix time of at most {MAX_TIMESTAMP_DIGITS} digits")
            timestamp = int(item)
        elif name == SCHEME and item:
            signatures.append(item)
    if timestamp is None or not signatures:
        raise MalformedSignature(f"{SIGNATURE_HEADER}: needs t=<unix seconds> and {SCHEME}=<hex>")
    return timestamp, signatures


def verify_webhook(
    headers: Headers,
    body: bytes | str,
    secret: str,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    *,
    replay_store: ReplayStore | None = None,
    now_s: float | None = None,
) -> dict[str, Any]:
    """Verify one received webhook request and return its event (the parsed JSON body).

    Checks, in order: headers parse; a ``v1`` signature matches (constant-time compare); the
    timestamp is within ``tolerance_s`` of now (either direction); the body is a JSON object whose
    ``id`` equals the event-id header; this (event id, timestamp) was not accepted before (the
    replay store keeps it until the timestamp leaves the tolerance). Nothing is remembered for a
    request that fails an earlier check.

    Args:
        headers: the request headers (any mapping, or :class:`Headers`; names compared
            case-insensitively).
        body: the raw request body, exactly as received.
        secret: the tenant's webhook secret.
        tolerance_s: largest accepted ``|now - t|``, seconds (default 300, Stripe's).
        replay_store: where accepted requests are remembered (default :func:`default_replay_store`:
            Redis, shared by every receiving process, unless configured to ``memory``).
        now_s: epoch seconds to use as now (tests).

    Raises:
        MalformedSignature, InvalidSignature, StaleTimestamp, ReplayedEvent (all
        :class:`imposition.webhooks.errors.WebhookVerificationError`, whatever the headers and the body hold:
        a header sent twice or as a list, non-ASCII header text, a body that is neither bytes nor
        UTF-8-encodable text are all ``MalformedSignature``).
        ReplayStoreUnavailable: the replay store could not be reached (fail closed: answer 503).
    """
    raw = _raw_body(body)
    signature = _header(headers, SIGNATURE_HEADER)
    event_id = _header(headers, EVENT_ID_HEADER)
    if not signature or not event_id:
        raise MalformedSignature(f"headers {SIGNATURE_HEADER} and {EVENT_ID_HEADER} are required")
    timestamp, candidates = parse_signature_header(signature)
    expected = compute_signature(secret, timestamp, raw)
    if not any(hmac.compare_digest(expected.encode(), candidate.encode()) for candidate in candidates):
        raise InvalidSignature("no v1 signature matches the body under this secret")
    now = time.time() if now_s is None else now_s
    age_s = now - timestamp
    if abs(age_s) > tolerance_s:
        raise StaleTimestamp(age_s, tolerance_s)
    try:
        event = json.loads(raw)
    except (ValueError, RecursionError):
        raise MalformedSignature("body is not JSON") from None
    if not isinstance(event, dict) or event.get("id") != event_id:
        raise MalformedSignature(f"{EVENT_ID_HEADER} does not match the body's id")
    store = default_replay_store() if replay_store is None else replay_store
    if not store.remember(f"{event_id}.{timestamp}", ttl_s=timestamp + tolerance_s - now + 1):
        raise ReplayedEvent(f"event {event_id} signed at t={timestamp} was already accepted")
    return event
