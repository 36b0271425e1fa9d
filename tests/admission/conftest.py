"""Fixtures of the admission tests: the session's admission Redis database (13), its namespace emptied per test."""

from __future__ import annotations

import uuid

import pytest
import redis

from tests.conftest import forget_redis_keys
from tests.admission.helpers import SAMPLE_PDF, free_port, input_key_of


@pytest.fixture
def redis_db():
    """A client of ``IMPOSITION_REDIS_URL`` (database 13 in tests); the session's namespace
    (``tests.conftest.REDIS_NAMESPACE``) is emptied before and after the test."""
    from imposition import admission
    from imposition.admission.limits import forget_cached_limits
    from imposition.common.settings import get_settings

    url = get_settings().redis_url
    assert url.endswith("/13"), f"admission tests use database 13, not {url}"
    client = redis.Redis.from_url(url, decode_responses=True)
    forget_redis_keys(url)
    admission.reset()
    forget_cached_limits()
    yield client
    forget_redis_keys(url)
    client.close()


@pytest.fixture(autouse=True)
def registration_required(monkeypatch):
    """Submissions for unregistered tenants are refused (``auto_register_tenants`` off, as in
    production): every tenant of these tests is registered, by :func:`new_tenant`."""
    from imposition.admission.limits import forget_cached_limits
    from imposition.common.settings import get_settings

    monkeypatch.setenv("IMPOSITION_AUTO_REGISTER_TENANTS", "false")
    get_settings.cache_clear()
    forget_cached_limits()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.fixture
def new_tenant():
    """A factory of fresh tenant ids, each registered (``tenant create``'s function) when made
    (tenant items are never shared between tests); ``register=False`` makes an id only."""
    from leases.tenants import create_tenant

    def make(name: str = "t", *, register: bool = True) -> str:
        tenant_id = f"{name}-{uuid.uuid4().hex[:10]}"
        if register:
            create_tenant(tenant_id)
        return tenant_id

    return make


@pytest.fixture
def uploaded(fresh_aws):
    """Upload the sample PDF under a tenant's prefix; returns a function tenant_id → input key."""
    from tasks import storage

    def upload(tenant_id: str) -> str:
        key = input_key_of(tenant_id)
        storage.upload(SAMPLE_PDF, key)
        return key

    return upload


@pytest.fixture
def admission_redis_at(monkeypatch):
    """A function url → None that makes this process's admission use another Redis for this test."""

    def point(url: str) -> None:
        monkeypatch.setenv("IMPOSITION_REDIS_URL", url)
        _forget_settings()

    yield point
    monkeypatch.undo()
    _forget_settings()


@pytest.fixture
def own_redis(tmp_path, admission_redis_at):
    """A private redis-server on a free port (never the shared one) that admission uses for this test.

    Yields (server process, port); the test may stop the server.
    """
    from devstack.stack import ManagedProcess

    port = free_port()
    server = ManagedProcess(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], tmp_path / "redis.log",
                            ready_marker="Ready to accept connections", ready_timeout_s=20)
    admission_redis_at(f"redis://127.0.0.1:{port}/0")
    yield server, port
    server.stop()


def _forget_settings() -> None:
    """Re-read settings and rebuild admission's Redis client on next use."""
    from imposition import admission
    from imposition.common.settings import get_settings

    get_settings.cache_clear()
    admission.reset()
