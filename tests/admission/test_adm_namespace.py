"""Runs sharing one Redis: each deletes only its own key namespace (imposition.common.redis_namespace)."""

from __future__ import annotations

import uuid

import pytest
import redis

from imposition import admission
from imposition.admission.control import token_key
from imposition.common import redis_namespace
from imposition.common.settings import get_settings
from tests.conftest import REDIS_NAMESPACE


def test_admission_keys_live_under_the_configured_namespace(redis_db, new_tenant):
    tenant = new_tenant()
    admission.reserve(tenant, "tok", "job-1")
    keys = redis_db.keys(f"{REDIS_NAMESPACE}:*")
    assert token_key(tenant, "tok") in keys
    assert keys and all(k.startswith(f"{REDIS_NAMESPACE}:admission:") for k in keys)


def test_forget_deletes_its_namespace_and_nothing_else(redis_db):
    url = get_settings().redis_url
    other = f"imposition-other-{uuid.uuid4().hex[:8]}"  # another run sharing this Redis
    prefix_alike = f"{REDIS_NAMESPACE}x"  # a namespace that merely starts like ours
    try:
        for i in range(2_500):  # more than one SCAN/DEL batch
            redis_db.set(f"{REDIS_NAMESPACE}:k:{i}", 1)
        redis_db.set(f"{other}:admission:t:rate", 1)
        redis_db.set(f"{prefix_alike}:admission:t:rate", 1)
        assert redis_namespace.forget(REDIS_NAMESPACE, [url, url]) == 2_500
        assert redis_db.keys(f"{REDIS_NAMESPACE}:*") == []
        assert redis_db.get(f"{other}:admission:t:rate") == "1"
        assert redis_db.get(f"{prefix_alike}:admission:t:rate") == "1"
    finally:
        redis_db.delete(f"{other}:admission:t:rate", f"{prefix_alike}:admission:t:rate")


@pytest.mark.parametrize("namespace", ["", "*", "imposition*", "a?b", "a[b]", "imposition:admission"])
def test_forget_refuses_a_namespace_that_would_match_other_runs(namespace):
    with pytest.raises(ValueError, match="redis_key_namespace"):
        redis_namespace.forget(namespace, [get_settings().redis_url])


def test_forget_reports_an_unreachable_redis():
    with pytest.raises(redis.ConnectionError):
        redis_namespace.forget(REDIS_NAMESPACE, ["redis://127.0.0.1:1/0"], connect_timeout_s=0.5)


@pytest.mark.parametrize("value", ["a:b", "*", "", "x" * 65])
def test_an_invalid_namespace_is_one_line_naming_the_variable_exit_2(value, monkeypatch):
    from click.testing import CliRunner

    from imposition.cli.main import main as cli
    from devstack.stack import REPO

    monkeypatch.setenv("IMPOSITION_REDIS_KEY_NAMESPACE", value)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["impose", str(REPO / "samples/a5_8p.pdf"),
                                          "--layout", str(REPO / "samples/layouts/n_up_2x2_sra3.json"),
                                          "-o", "/nonexistent/never-written.pdf"])
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert "IMPOSITION_REDIS_KEY_NAMESPACE" in result.output and "1–64 characters" in result.output
    assert "Traceback" not in result.output
