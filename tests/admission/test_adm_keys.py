"""Every Redis key comes from ``imposition.common.redis_keys.redis_key``: typed parts, one separator none may hold."""

from __future__ import annotations

import itertools

import pytest

from imposition import admission
from imposition.observability import recent
from imposition.webhooks import default_replay_store, fairness
from imposition.common.redis_keys import NO_TENANT, SEPARATOR, KeyKind, redis_key
from imposition.common.settings import get_settings
from imposition.common.tenancy import InvalidTenantId
from tests.conftest import REDIS_NAMESPACE

TENANTS = [None, "job", "rate", "a", "a.b", "a-b", "acme", "token", "in_flight", "0"]
IDS = ["rate", "in_flight", "job", "token", "_", "-", "a", "a.b", "0", "acme", "job-rate", "x" * 64]


def _parts(key: str) -> tuple[str, ...]:
    return tuple(key.split(SEPARATOR))


def test_no_two_typed_part_lists_give_the_same_key_and_each_key_splits_back_into_its_parts():
    seen: dict[str, tuple] = {}
    for kind, tenant in itertools.product(KeyKind, TENANTS):
        for key_id in (IDS if kind.takes_id else [None]):
            key = redis_key(kind, tenant, key_id)
            assert key not in seen, (key, seen.get(key), (kind, tenant, key_id))
            seen[key] = (kind, tenant, key_id)
            expected = (REDIS_NAMESPACE, kind.area, NO_TENANT if tenant is None else tenant, kind.kind_name)
            assert _parts(key) == expected + ((key_id,) if kind.takes_id else ())


@pytest.mark.parametrize("key_id", ["a:b", "", "*", "a b", "x\n", "tenants/acme", True, 1.5, None])
def test_an_id_that_could_break_the_layout_is_refused_with_a_short_message(key_id):
    with pytest.raises(ValueError) as refused:
        redis_key(KeyKind.JOB, None, key_id)
    assert len(str(refused.value)) < 200


def test_a_kind_without_an_id_refuses_one_and_no_tenant_may_be_the_no_tenant_marker():
    with pytest.raises(ValueError):
        redis_key(KeyKind.RATE, "acme", "x")
    for tenant in (NO_TENANT, "a:b", "", "x" * 200):
        with pytest.raises(InvalidTenantId):
            redis_key(KeyKind.RATE, tenant)


def test_every_key_the_service_writes_parses_as_a_known_kind(redis_db, new_tenant):
    import redis as redis_lib

    tenant = new_tenant()
    admission.reserve(tenant, "tok", "job-1")
    admission.reserve(tenant, "tok-2", "rate")
    admission.get_admission().remember_token(tenant, "tok-3", "job-3", ttl_s=60)
    recent.record("cap_defer", tenant)
    recent.record("lease_recovered", tenant)
    assert default_replay_store().remember(f"evt_{tenant}.1700000000", ttl_s=60)
    events = redis_lib.Redis.from_url(get_settings().events_url, decode_responses=True)
    try:
        with fairness.delivery_slot(tenant, hold_s=60):  # a webhook round's slot, held while the keys are read
            keys = redis_db.keys(f"{REDIS_NAMESPACE}:*") + events.keys(f"{REDIS_NAMESPACE}:*")
        kinds = {(k.area, k.kind_name): k for k in KeyKind}
        found = set()
        for key in keys:
            parts = _parts(key)
            kind = kinds[(parts[1], parts[3])]
            assert len(parts) == 4 + kind.takes_id, key
            assert redis_key(kind, None if parts[2] == NO_TENANT else parts[2], *parts[4:]) == key
            found.add(kind)
        assert found == set(KeyKind)
    finally:
        mine = events.keys(f"{REDIS_NAMESPACE}:recent:{tenant}:*")  # this test's counts only
        if mine:
            events.delete(*mine)
        events.close()
