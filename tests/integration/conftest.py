"""Shared fixtures of the end-to-end tests: one clean stack and one real worker per module."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import reset_aws
from tests.support.processes import start_worker


@pytest.fixture(scope="module")
def imposition_worker(tmp_path_factory):
    """A clean local AWS stack and a real ``celery worker -Q imposition -c 8`` for the module."""
    reset_aws()
    worker = start_worker(tmp_path_factory.mktemp("worker"))
    yield worker
    worker.stop()


@pytest.fixture
def tenant_id() -> str:
    """A tenant id no other test uses."""
    return f"t-{uuid.uuid4().hex[:10]}"
