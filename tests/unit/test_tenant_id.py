"""A tenant id is checked once, where it comes in, into a TenantId (imposition.common.tenancy): made only
by that check, trusted as it is below, and the string it is wherever it is written."""

from __future__ import annotations

import json
import pickle

import pytest

from imposition.common.tenancy import (
    InvalidTenantId,
    NonCanonicalTenantId,
    TenantId,
    message_group_id,
    tenant_prefix,
    validate_tenant_id,
)

pytestmark = pytest.mark.unit


def test_a_tenant_id_is_checked_when_made_and_trusted_after():
    tenant = validate_tenant_id("acme")
    assert isinstance(tenant, TenantId) and tenant == "acme"
    assert validate_tenant_id(tenant) is tenant  # trusted: returned as it is, not checked again
    assert (message_group_id(tenant), tenant_prefix(tenant)) == ("tenant-acme", "tenants/acme/")


@pytest.mark.parametrize("raw", ["ACME", "a:b", "", "-x", "x" * 122, None, 7])
def test_no_tenant_id_is_made_from_a_bad_value(raw):
    with pytest.raises(InvalidTenantId):
        TenantId(raw)
    with pytest.raises(InvalidTenantId):
        validate_tenant_id(raw)


def test_an_upper_case_spelling_names_the_canonical_one():
    with pytest.raises(NonCanonicalTenantId) as refused:
        TenantId("Globex")
    assert refused.value.canonical == "globex"


def test_a_tenant_id_is_written_as_the_string_it_is():
    tenant = TenantId("initech")
    assert json.dumps({"tenant_id": tenant}) == '{"tenant_id": "initech"}'  # a Celery message's body
    assert repr(tenant) == "'initech'" and f"{tenant}" == "initech"  # log lines and error messages
    assert type(str(tenant)) is str and pickle.loads(pickle.dumps(tenant)) == tenant
