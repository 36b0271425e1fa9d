"""Fixtures of the lease-layer tests: a clean stack per test, and the audit after each test.

These tests drive the lease layer for real (PynamoDB over HTTP to the session's single-threaded moto
DynamoDB server), from threads of the test process; nothing of ours is replaced. Project modules
are imported inside fixtures: this file is imported before the session's environment is set.
"""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def tenant_id() -> str:
    """A tenant id no other test uses."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def audited(fresh_aws):
    """A clean stack for each test, and ``imposition audit`` clean after it."""
    from leases.audit import audit

    yield
    report = audit()
    assert report.clean, "audit after the test found drift:\n" + report.describe()
