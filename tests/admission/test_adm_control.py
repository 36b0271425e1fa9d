"""Admission checks against real Redis (database 13): idempotency, rate limit, in-flight cap, fail closed.

Time-dependent checks pass ``now_s`` (the script otherwise uses Redis's clock), so boundaries are
exact and no test sleeps.
"""

from __future__ import annotations

import pytest
import redis

from imposition import admission
from imposition.admission import (
    AdmissionRefused,
    AdmissionUnavailable,
    DuplicateSubmission,
    InFlightLimitReached,
    RateLimited,
    set_limits,
)
from imposition.admission.control import in_flight_key, job_key, rate_key, token_key
from imposition.common.settings import get_settings
from tests.admission.helpers import free_port, race_duplicates
from tests.conftest import REDIS_NAMESPACE

T0 = 1_800_000_000.0  # an arbitrary fixed "now", epoch seconds


def test_duplicate_token_is_refused_with_the_existing_job_id(redis_db, new_tenant):
    tenant = new_tenant()
    assert admission.reserve(tenant, "order-1", "job-a") == 1
    with pytest.raises(DuplicateSubmission) as refused:
        admission.reserve(tenant, "order-1", "job-b")
    assert refused.value.job_id == "job-a"
    assert refused.value.tenant_id == tenant
    # still refused after the job was confirmed (a completed job keeps its token for the TTL)
    assert admission.confirm("job-a") is True
    with pytest.raises(DuplicateSubmission):
        admission.reserve(tenant, "order-1", "job-c")
    # the same token of another tenant is another key
    assert admission.reserve(new_tenant(), "order-1", "job-d") == 1


def test_token_lives_for_the_idempotency_ttl(redis_db, new_tenant):
    tenant = new_tenant()
    admission.reserve(tenant, "order-ttl", "job-ttl")
    ttl_ms = redis_db.pttl(token_key(tenant, "order-ttl"))
    assert get_settings().idempotency_ttl_s == 48 * 3600
    assert 48 * 3600 * 1000 - 10_000 < ttl_ms <= 48 * 3600 * 1000


def test_one_token_from_20_threads_admits_exactly_one(redis_db, new_tenant):
    tenant = new_tenant()

    def reserve(thread: int, i: int) -> str:
        job_id = f"job-{thread}-{i}"
        admission.reserve(tenant, "same-token", job_id)
        return job_id

    admitted, refused = race_duplicates(reserve)
    assert len(admitted) == 1 and len(refused) == 999
    assert set(refused) == set(admitted)
    assert admission.in_flight(tenant) == 1
    assert redis_db.zcard(rate_key(tenant)) == 1


def test_rate_limit_at_its_exact_boundary_and_recovery(redis_db, new_tenant):
    tenant, other = new_tenant("a"), new_tenant("b")
    assert get_settings().rate_limit_per_min == 100
    for i in range(100):  # one every 10 ms from T0
        admission.reserve(tenant, f"tok-{i}", f"job-{i}", now_s=T0 + i / 100)
    with pytest.raises(RateLimited) as refused:
        admission.reserve(tenant, "tok-100", "job-100", now_s=T0 + 1)
    assert refused.value.retry_after_s == pytest.approx(59.0)  # job-0 leaves the window at T0 + 60
    assert refused.value.limit == 100
    # another tenant's limit is untouched
    assert admission.reserve(other, "tok-0", "other-0", now_s=T0 + 1) == 1
    with pytest.raises(RateLimited) as refused:
        admission.reserve(tenant, "tok-100", "job-100", now_s=T0 + 59.999_999)
    assert refused.value.retry_after_s == pytest.approx(1e-6)
    admission.reserve(tenant, "tok-100", "job-100", now_s=T0 + 60)  # job-0's minute is over
    with pytest.raises(RateLimited) as refused:  # and job-1's is not
        admission.reserve(tenant, "tok-101", "job-101", now_s=T0 + 60)
    assert refused.value.retry_after_s == pytest.approx(0.01)
    admission.reserve(tenant, "tok-101", "job-101", now_s=T0 + 60.01)


def test_rate_limit_on_redis_clock(redis_db, new_tenant):
    tenant = new_tenant()
    for i in range(100):
        admission.reserve(tenant, f"tok-{i}", f"job-{i}")
    with pytest.raises(RateLimited) as refused:
        admission.reserve(tenant, "tok-x", "job-x")
    assert 0 < refused.value.retry_after_s <= 60


def test_a_refusal_leaves_no_partial_state(redis_db, new_tenant):
    tenant = new_tenant()
    set_limits(tenant, rate_limit_per_min=2, in_flight_cap=1)
    admission.reserve(tenant, "tok-1", "job-1", now_s=T0)
    with pytest.raises(InFlightLimitReached):
        admission.reserve(tenant, "tok-2", "job-2", now_s=T0 + 1)
    assert redis_db.get(token_key(tenant, "tok-2")) is None
    assert redis_db.zrange(rate_key(tenant), 0, -1) == ["job-1"]
    assert admission.confirm("job-1")
    admission.reserve(tenant, "tok-2", "job-2", now_s=T0 + 2)
    assert admission.confirm("job-2")
    with pytest.raises(RateLimited):
        admission.reserve(tenant, "tok-3", "job-3", now_s=T0 + 3)
    assert redis_db.get(token_key(tenant, "tok-3")) is None
    assert redis_db.zcard(in_flight_key(tenant)) == 0
    assert redis_db.get(job_key("job-3")) is None


def test_in_flight_cap_and_its_release_by_confirmation(redis_db, new_tenant):
    tenant, other = new_tenant("a"), new_tenant("b")
    assert set_limits(tenant, in_flight_cap=3).in_flight_cap == 3
    for i in range(3):
        admission.reserve(tenant, f"tok-{i}", f"job-{i}")
    with pytest.raises(InFlightLimitReached) as refused:
        admission.reserve(tenant, "tok-3", "job-3")
    assert (refused.value.in_flight, refused.value.cap) == (3, 3)
    assert admission.confirm("job-0", tenant_id=other) is False  # not the other tenant's to confirm
    assert admission.in_flight(tenant) == 3
    assert admission.confirm("job-0") is True
    assert admission.confirm("job-0") is False  # idempotent
    assert admission.confirm("never-admitted") is False
    assert admission.in_flight(tenant) == 2
    admission.reserve(tenant, "tok-3", "job-3")
    assert admission.in_flight(tenant) == 3


def test_an_unconfirmed_job_stops_counting_after_the_in_flight_expiry(redis_db, new_tenant):
    tenant = new_tenant()
    set_limits(tenant, in_flight_cap=1)
    expiry_s = get_settings().admission_in_flight_expiry_s
    admission.reserve(tenant, "tok-1", "job-1", now_s=T0)
    with pytest.raises(InFlightLimitReached):
        admission.reserve(tenant, "tok-2", "job-2", now_s=T0 + expiry_s - 1)
    assert admission.get_admission().in_flight(tenant, now_s=T0 + expiry_s) == 0
    admission.reserve(tenant, "tok-2", "job-2", now_s=T0 + expiry_s)


def test_overrides_apply_per_tenant_and_reset_to_the_default(redis_db, new_tenant):
    tenant, other = new_tenant("a"), new_tenant("b")
    limits = set_limits(tenant, rate_limit_per_min=2, idempotency_ttl_s=60)
    assert (limits.rate_limit_per_min, limits.idempotency_ttl_s) == (2, 60)
    admission.reserve(tenant, "tok-1", "job-1", now_s=T0)
    admission.reserve(tenant, "tok-2", "job-2", now_s=T0)
    assert 0 < redis_db.pttl(token_key(tenant, "tok-1")) <= 60_000
    with pytest.raises(RateLimited) as refused:
        admission.reserve(tenant, "tok-3", "job-3", now_s=T0)
    assert refused.value.limit == 2
    for i in range(3):
        admission.reserve(other, f"tok-{i}", f"other-{i}", now_s=T0)
    assert set_limits(tenant, reset=("rate_limit_per_min",)).rate_limit_per_min == 100
    admission.reserve(tenant, "tok-3", "job-3", now_s=T0)


def test_abandon_frees_the_token_and_both_counts(redis_db, new_tenant):
    tenant = new_tenant()
    admission.reserve(tenant, "tok", "job-1")
    assert admission.abandon(tenant, "tok", "job-1") is True
    assert admission.abandon(tenant, "tok", "job-1") is False
    assert redis_db.keys(f"{REDIS_NAMESPACE}:*") == []
    assert admission.reserve(tenant, "tok", "job-2") == 1
    # abandoning another job id never frees a token that now names job-2
    admission.abandon(tenant, "tok", "job-1")
    with pytest.raises(DuplicateSubmission):
        admission.reserve(tenant, "tok", "job-3")


def test_every_refusal_shares_one_root(redis_db, new_tenant):
    assert issubclass(DuplicateSubmission, AdmissionRefused)
    assert issubclass(RateLimited, AdmissionRefused)
    assert issubclass(InFlightLimitReached, AdmissionRefused)
    assert issubclass(AdmissionRefused, admission.AdmissionError)
    assert issubclass(AdmissionUnavailable, admission.AdmissionError)
    with pytest.raises(ValueError):
        admission.reserve(new_tenant(), "", "job")
    with pytest.raises(ValueError):
        admission.reserve(new_tenant(), "x" * (get_settings().idempotency_token_max_len + 1), "job")


def test_redis_stopped_fails_closed(own_redis, new_tenant):
    server, _ = own_redis
    tenant = new_tenant()
    assert admission.reserve(tenant, "tok-1", "job-1") == 1
    server.stop()
    with pytest.raises(AdmissionUnavailable) as down:
        admission.reserve(tenant, "tok-2", "job-2")
    assert isinstance(down.value.__cause__, redis.RedisError)
    with pytest.raises(AdmissionUnavailable):
        admission.confirm("job-1")
    with pytest.raises(AdmissionUnavailable):
        admission.in_flight(tenant)


def test_nothing_listening_fails_closed(new_tenant, admission_redis_at):
    admission_redis_at(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(AdmissionUnavailable):
        admission.reserve(new_tenant(), "tok", "job")
