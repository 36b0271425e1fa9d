"""Fixtures of the operator-command tests: a clean stack per test, the admission namespace emptied,
and ``imposition audit`` clean after each test (every transition moved the counters it had to)."""

from __future__ import annotations

import pytest

from tests.admission.conftest import new_tenant, redis_db, registration_required  # noqa: F401 (fixtures)


@pytest.fixture(autouse=True)
def audited(fresh_aws, redis_db):  # noqa: F811 - the fixture imported above, used by name
    from leases.audit import audit

    yield
    report = audit()
    assert report.clean, "audit after the test found drift:\n" + report.describe()
