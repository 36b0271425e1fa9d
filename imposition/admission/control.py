"""The admission checks, run atomically in Redis by one Lua script per call (docs/design.md §2, layer 3).

One reservation (:meth:`Admission.reserve`), in this order, all inside one ``EVALSHA`` (one atomic step: a refused submission
leaves no partial state; racing submitters of one token see exactly one winner)::

    1. idempotency   GET  token key              taken → DuplicateSubmission(existing job id)
    1b. job id       EXISTS job key              taken (by any tenant) → DuplicateJobId
    2. rate limit    sliding-window log: ZREMRANGEBYSCORE (older than 60 s), ZCARD
                                                 >= limit → RateLimited(retry_after_s)
    3. in-flight cap ZREMRANGEBYSCORE (older than the expiry), ZCARD
                                                 >= cap → InFlightLimitReached
    4. record        SET token key = job id (PX idempotency TTL); ZADD rate log; ZADD in-flight set;
                     SET job key = tenant (so ``confirm(job_id)`` finds the tenant)

A retried job (``imposition job retry``) passes :meth:`Admission.readmit`: steps 2–4 without the
token. "In flight" is admitted and not yet confirmed (:meth:`Admission.confirm`, or
:meth:`Admission.abandon` when the submission failed after admission; both idempotent); an entry
older than ``admission_in_flight_expiry_s`` stops counting. Times are Redis's ``TIME`` in integer
microseconds (tests pass ``now_s``). The keys: :func:`token_key`, :func:`rate_key`,
:func:`in_flight_key`, :func:`job_key`. This is the fast check; the durable one is the token's claim
(:mod:`imposition.admission.claims`). Why a sliding-window log, the expiry and the two records: docs/design.md,
"Admission state lives in Redis".
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from typing import cast

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from imposition.admission.errors import (
    AdmissionUnavailable,
    DuplicateJobId,
    DuplicateSubmission,
    InFlightLimitReached,
    RateLimited,
)
from imposition.admission.limits import TenantLimits, limits_for
from imposition.common.redis_keys import KeyKind, redis_key
from imposition.common.settings import get_settings
from imposition.common.tenancy import validate_job_id, validate_tenant_id


#: The rate limit counts admissions per minute (the unit of ``rate_limit_per_min``).
RATE_WINDOW_US = 60 * 1_000_000
_US_PER_S = 1_000_000

# The limits and the record, shared by reserve and readmit. KEYS: rate, in_flight, job (the last
# three).  ARGV: job_id, tenant_id, now_us ('' = Redis TIME), token TTL ms, rate limit, rate window
# µs, in-flight cap, in-flight expiry µs. Returns nil and whether the job was counted already when
# recorded, else the refusal. A job already in the in-flight set (readmit of an unconfirmed job) is
# not counted twice.
_LIMITS_LUA = """
local function limits_then_record(rate_key, in_flight_key, job_key)
  local now
  if ARGV[3] == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  else
    now = tonumber(ARGV[3])
  end
  local limit, window = tonumber(ARGV[5]), tonumber(ARGV[6])
  redis.call('ZREMRANGEBYSCORE', rate_key, '-inf', now - window)
  local used = redis.call('ZCARD', rate_key)
  if used >= limit then
    local blocking = redis.call('ZRANGE', rate_key, used - limit, used - limit, 'WITHSCORES')
    return {'rate_limited', tostring(tonumber(blocking[2]) + window - now), tostring(used)}
  end
  local cap, expiry = tonumber(ARGV[7]), tonumber(ARGV[8])
  redis.call('ZREMRANGEBYSCORE', in_flight_key, '-inf', now - expiry)
  local in_flight = redis.call('ZCARD', in_flight_key)
  local counted = redis.call('ZSCORE', in_flight_key, ARGV[1])
  if not counted and in_flight >= cap then
    return {'in_flight', tostring(in_flight)}
  end
  redis.call('ZADD', rate_key, now, ARGV[1])
  redis.call('PEXPIRE', rate_key, math.ceil(window / 1000))
  redis.call('ZADD', in_flight_key, now, ARGV[1])
  redis.call('PEXPIRE', in_flight_key, math.ceil(expiry / 1000))
  redis.call('SET', job_key, ARGV[2], 'PX', math.ceil(expiry / 1000))
  return nil, counted
end
"""

# KEYS: token, rate, in_flight, job.  ARGV as _LIMITS_LUA.
_RESERVE_LUA = _LIMITS_LUA + """
local existing = redis.call('GET', KEYS[1])
if existing then
  return {'duplicate', existing}
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {'job_taken'}
end
local refused = limits_then_record(KEYS[2], KEYS[3], KEYS[4])
if refused then
  return refused
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
return {'admitted', ARGV[1], tostring(redis.call('ZCARD', KEYS[3]))}
"""

# KEYS: rate, in_flight, job.  ARGV as _LIMITS_LUA (token TTL unused). An existing job run again
# (``job retry``): the rate limit and the in-flight cap, no token and no job-id check.
_READMIT_LUA = _LIMITS_LUA + """
local refused, counted = limits_then_record(KEYS[1], KEYS[2], KEYS[3])
if refused then
  return refused
end
return {'admitted', ARGV[1], tostring(redis.call('ZCARD', KEYS[2])), counted and '1' or '0'}
"""

# KEYS: rate, in_flight, job.  ARGV: job_id, tenant_id, '1' if the readmission added the in-flight
# entry.  Undo a readmission (the retry did not commit).
_UNREADMIT_LUA = """
local undone = redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[3] == '1' then
  undone = undone + redis.call('ZREM', KEYS[2], ARGV[1])
  if redis.call('GET', KEYS[3]) == ARGV[2] then
    redis.call('DEL', KEYS[3])
  end
end
return undone
"""

# KEYS: token, rate, in_flight, job.  ARGV: job_id, tenant_id.  Undo one admission of job_id only.
_ABANDON_LUA = """
local undone = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  undone = undone + redis.call('DEL', KEYS[1])
end
undone = undone + redis.call('ZREM', KEYS[2], ARGV[1])
undone = undone + redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('GET', KEYS[4]) == ARGV[2] then
  redis.call('DEL', KEYS[4])
end
return undone
"""

# KEYS: in_flight, job.  ARGV: job_id, tenant_id.  Returns 1 if the job was in flight, else 0.
_CONFIRM_LUA = """
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('DEL', KEYS[2])
end
return removed
"""


def token_hash(token: str) -> str:
    """SHA-256 hex (64 characters) of the UTF-8 ``token``: how a token is named in keys and claims
    (tokens are the caller's text, up to ``Settings.idempotency_token_max_len`` characters)."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_key(tenant_id: str, token: str) -> str:
    """Redis key of ``tenant_id``'s idempotency ``token``,
    ``<namespace>:admission:<tenant>:token:<sha256(token)>`` (:func:`imposition.common.redis_keys.redis_key`):
    the job id holding it, TTL the idempotency TTL."""
    return redis_key(KeyKind.TOKEN, tenant_id, token_hash(token))


def rate_key(tenant_id: str) -> str:
    """Redis key of ``tenant_id``'s rate-limit log, ``<namespace>:admission:<tenant>:rate``: a sorted
    set job id → admitted at (µs)."""
    return redis_key(KeyKind.RATE, tenant_id)


def in_flight_key(tenant_id: str) -> str:
    """Redis key of ``tenant_id``'s set of unconfirmed jobs,
    ``<namespace>:admission:<tenant>:in_flight``: a sorted set job id → admitted at (µs)."""
    return redis_key(KeyKind.IN_FLIGHT, tenant_id)


def job_key(job_id: str) -> str:
    """Redis key mapping an admitted job to its tenant (a key of no tenant: job ids are global),
    ``<namespace>:admission:_:job:<job id>`` (``_``: no tenant): the tenant id, TTL the in-flight expiry.

    Raises:
        imposition.common.tenancy.InvalidJobId: ``job_id`` is not canonical.
    """
    return redis_key(KeyKind.JOB, None, validate_job_id(job_id))


def _now_us(now_s: float | None) -> str:
    return "" if now_s is None else str(round(now_s * _US_PER_S))


class Admission:
    """Admission control against one Redis database.

    Args:
        client: a redis-py client with ``decode_responses=True`` (default: one for
            ``Settings.redis_url`` with ``Settings.admission_redis_timeout_s`` as connect and read
            timeout).
        limits: tenant id → :class:`TenantLimits` (default :func:`imposition.admission.limits.limits_for`,
            the configured overrides).

    Thread-safe (redis-py clients are); safe after ``fork()`` (redis-py pools reconnect).
    """

    def __init__(self, client: redis.Redis | None = None, *,
                 limits: Callable[[str], TenantLimits] = limits_for) -> None:
        if client is None:
            settings = get_settings()
            client = redis.Redis.from_url(
                settings.redis_url,
                socket_timeout=settings.admission_redis_timeout_s,
                socket_connect_timeout=settings.admission_redis_timeout_s,
                retry=Retry(NoBackoff(), settings.admission_redis_retries),
                decode_responses=True,
            )
        self.client = client
        self._limits = limits
        self._reserve = client.register_script(_RESERVE_LUA)
        self._readmit = client.register_script(_READMIT_LUA)
        self._unreadmit = client.register_script(_UNREADMIT_LUA)
        self._abandon = client.register_script(_ABANDON_LUA)
        self._confirm = client.register_script(_CONFIRM_LUA)

    def _run(self, script, keys: list[str], args: list[object], what: str):
        try:
            return script(keys=keys, args=args)
        except RedisError as exc:
            raise AdmissionUnavailable(f"admission {what}: Redis unavailable, nothing published ({exc})") from exc

    @staticmethod
    def _keys(tenant_id: str, token: str, job_id: str) -> list[str]:
        return [token_key(tenant_id, token), rate_key(tenant_id), in_flight_key(tenant_id), job_key(job_id)]

    def reserve(self, tenant_id: str, token: str, job_id: str, *, now_s: float | None = None) -> int:
        """Run the three checks for ``job_id`` and, if all pass, record it; return the tenant's
        in-flight count including this job.

        Args:
            tenant_id: canonical tenant id.
            token: the caller's idempotency token (1 to ``Settings.idempotency_token_max_len``
                characters).
            job_id: the id the job will have (stored under the token).
            now_s: epoch seconds to use instead of Redis's clock (tests control time with it).

        Raises:
            imposition.common.tenancy.InvalidTenantId: not a canonical tenant id.
            imposition.common.tenancy.InvalidJobId: not a canonical job id.
            ValueError: an empty or too long token.
            DuplicateSubmission: the token is taken (``.job_id`` is the job that holds it).
            DuplicateJobId: ``job_id`` is admitted already (for any tenant, within the in-flight
                expiry, unconfirmed); nothing was written.
            RateLimited: ``rate_limit_per_min`` admissions in the last 60 s (``.retry_after_s``).
            InFlightLimitReached: ``in_flight_cap`` unconfirmed jobs.
            AdmissionUnavailable: Redis or the tenant's limits unreachable (fail closed).
        """
        validate_tenant_id(tenant_id)
        max_len = get_settings().idempotency_token_max_len
        if not isinstance(token, str) or not token.strip() or len(token) > max_len:
            raise ValueError(f"token: must be a non-empty string of at most {max_len} characters "
                             "(the caller's idempotency token)")
        validate_job_id(job_id)
        return int(self._verdict(self._reserve, self._keys(tenant_id, token, job_id), tenant_id, job_id, now_s,
                                 "reserve")[2])

    def readmit(self, tenant_id: str, job_id: str, *, now_s: float | None = None) -> bool:
        """Admit an existing job of ``tenant_id`` again (``imposition job retry``): the rate limit and
        the in-flight cap as for a submission (a job still unconfirmed is not counted twice), no
        token or job-id check. Returns True if the job entered the in-flight count now (False: it
        was still unconfirmed). Undo with :meth:`unreadmit` if the retry does not commit.

        Raises:
            imposition.common.tenancy.InvalidTenantId, imposition.common.tenancy.InvalidJobId: malformed ids.
            RateLimited, InFlightLimitReached: refused; nothing was recorded.
            AdmissionUnavailable: Redis unreachable (fail closed).
        """
        validate_tenant_id(tenant_id)
        validate_job_id(job_id)
        keys = [rate_key(tenant_id), in_flight_key(tenant_id), job_key(job_id)]
        return self._verdict(self._readmit, keys, tenant_id, job_id, now_s, "readmit")[3] == "0"

    def unreadmit(self, tenant_id: str, job_id: str, *, added: bool) -> bool:
        """Undo :meth:`readmit` of ``job_id`` (its retry did not commit): its rate entry and, if
        ``added`` (what :meth:`readmit` returned), its in-flight entry; True if anything was undone.

        Raises:
            AdmissionUnavailable: Redis unreachable.
        """
        keys = [rate_key(validate_tenant_id(tenant_id)), in_flight_key(tenant_id), job_key(job_id)]
        return bool(self._run(self._unreadmit, keys, [job_id, tenant_id, "1" if added else "0"], "unreadmit"))

    def _verdict(self, script, keys: list[str], tenant_id: str, job_id: str, now_s: float | None, what: str) -> list:
        """Run ``script`` (reserve or readmit) with the tenant's limits; its ``admitted`` reply, or the
        refusal raised."""
        limits = self._limits(tenant_id)
        reply = self._run(script, keys, [
            job_id, tenant_id, _now_us(now_s), limits.idempotency_ttl_s * 1000, limits.rate_limit_per_min,
            RATE_WINDOW_US, limits.in_flight_cap, get_settings().admission_in_flight_expiry_s * _US_PER_S,
        ], what)
        verdict = reply[0]
        if verdict == "admitted":
            return reply
        if verdict == "duplicate":
            raise DuplicateSubmission(tenant_id, reply[1])
        if verdict == "job_taken":
            raise DuplicateJobId(tenant_id, job_id)
        if verdict == "rate_limited":
            raise RateLimited(tenant_id, int(float(reply[1])) / _US_PER_S, limits.rate_limit_per_min)
        raise InFlightLimitReached(tenant_id, int(reply[1]), limits.in_flight_cap)

    def abandon(self, tenant_id: str, token: str, job_id: str) -> bool:
        """Undo the admission of ``job_id`` (its submission failed after admission); idempotent.

        Frees the token (only if it still names ``job_id``), its rate-limit entry and its in-flight
        entry, so a failed submission never blocks a later retry. Returns True if anything was undone.

        Raises:
            AdmissionUnavailable: Redis unreachable (the token then stays taken until its TTL;
                the caller's retry is refused as a duplicate of a job that does not exist).
        """
        return bool(self._run(self._abandon, self._keys(tenant_id, token, job_id), [job_id, tenant_id], "abandon"))

    def confirm(self, job_id: str, *, tenant_id: str | None = None) -> bool:
        """The tenant confirms it was told ``job_id`` finished: lower its in-flight count by one.

        Idempotent: a second confirm of the same job, or a confirm of a job that is not in flight,
        does nothing and returns False. With ``tenant_id`` given, only that tenant's set is touched
        (one tenant cannot confirm another's job); without it, the tenant recorded at admission is used.

        Raises:
            AdmissionUnavailable: Redis unreachable.
        """
        try:
            validate_job_id(job_id)
        except ValueError:
            return False  # a malformed id was never admitted
        if tenant_id is None:
            try:
                # a str, not bytes: the client decodes responses (see ``client`` above)
                tenant_id = cast("str | None", self.client.get(job_key(job_id)))
            except RedisError as exc:
                raise AdmissionUnavailable(f"confirm of job {job_id}: Redis unavailable ({exc})") from exc
            if tenant_id is None:
                return False
        validate_tenant_id(tenant_id)
        keys = [in_flight_key(tenant_id), job_key(job_id)]
        return bool(self._run(self._confirm, keys, [job_id, tenant_id], "confirm"))

    def in_flight(self, tenant_id: str, *, now_s: float | None = None) -> int:
        """``tenant_id``'s admitted, unconfirmed jobs younger than the in-flight expiry.

        Raises:
            AdmissionUnavailable: Redis unreachable.
        """
        key = in_flight_key(validate_tenant_id(tenant_id))
        try:
            if now_s is None:
                seconds, micros = self.client.time()
                now_us = seconds * _US_PER_S + micros
            else:
                now_us = round(now_s * _US_PER_S)
            oldest_counted_us = now_us - get_settings().admission_in_flight_expiry_s * _US_PER_S
            return int(self.client.zcount(key, f"({oldest_counted_us}", "+inf"))
        except RedisError as exc:
            raise AdmissionUnavailable(f"tenant {tenant_id!r}: Redis unavailable ({exc})") from exc

    def remember_token(self, tenant_id: str, token: str, job_id: str, *, ttl_s: float) -> bool:
        """Put ``tenant_id``'s ``token`` back into the fast check as held by ``job_id`` for ``ttl_s``
        seconds, unless the token key exists already; returns True if it was written.

        Used after the durable claim refused a token that Redis had forgotten, so the next
        duplicate is refused here again without a DynamoDB write. Only the token key is written:
        the rate and in-flight entries of the original admission are not recreated.

        Raises:
            AdmissionUnavailable: Redis unreachable.
        """
        key = token_key(validate_tenant_id(tenant_id), token)
        try:
            return bool(self.client.set(key, validate_job_id(job_id), nx=True, px=max(1, round(ttl_s * 1000))))
        except RedisError as exc:
            raise AdmissionUnavailable(f"tenant {tenant_id!r}: Redis unavailable ({exc})") from exc

    def token_job(self, tenant_id: str, token: str) -> str | None:
        """The job id holding ``tenant_id``'s ``token``, or None if the token is free."""
        try:
            # a str, not bytes: the client decodes responses (see ``client`` above)
            return cast("str | None", self.client.get(token_key(validate_tenant_id(tenant_id), token)))
        except RedisError as exc:
            raise AdmissionUnavailable(f"tenant {tenant_id!r}: Redis unavailable ({exc})") from exc


@functools.lru_cache(maxsize=None)
def _admission_for(pid: int, redis_url: str) -> Admission:
    return Admission()


def get_admission() -> Admission:
    """The process's :class:`Admission` for ``Settings.redis_url`` (rebuilt after a fork or a
    settings change)."""
    return _admission_for(os.getpid(), get_settings().redis_url)


def reset() -> None:
    """Forget the process's Admission (tests that point ``IMPOSITION_REDIS_URL`` elsewhere)."""
    _admission_for.cache_clear()
