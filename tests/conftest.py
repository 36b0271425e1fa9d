"""Test session set-up: a real local AWS endpoint (moto server processes), real Redis, short clocks.

Before any project module is imported (``pytest_configure``), this starts the two moto servers of
:class:`devstack.localaws.LocalAws` on free ports and points the environment at them, so every
process of the session (this one, and the celery workers the tests start) talks to them. Never
real AWS: the AWS credentials are fake.

Clocks are shortened for the session (lease TTL 9 s, heartbeat 1 s, sweep 2 s, defer 1 s) so that
crash recovery happens within seconds; their relations are the production ones.

Tenants: ``auto_register_tenants`` is on for the session (see ``SESSION_ENV``); the admission and
operator tests turn it off and register every tenant they use.

``-m unit`` (``make test-unit``) starts nothing: the unit tier (``tests/unit``) needs no server.

``make test`` runs the suite in parallel (pytest-xdist, ``--dist loadfile``: a file's tests stay in one
process, so its module fixtures start once). Each xdist process is a session of its own: its own moto
servers, Redis namespace, Prometheus multiprocess directory and logs (``.pytest_cache/<worker id>/``);
the controller starts nothing. Files are handed out in collection order (``--no-loadscope-reorder``,
``pyproject.toml``), except that the long ones, marked ``file_duration_s(N)``, come first, the longest
first (``pytest_collection_modifyitems``): a long file handed out last would run on alone at the end.

Redis: database 13 for admission control and 12 for monitoring events (never database 0, which
``make run`` uses). Every key the session writes lies under its own namespace,
``imposition-test-<random>`` (``IMPOSITION_REDIS_KEY_NAMESPACE``), and the tests delete only that
namespace, never a whole database: two test runs on one machine (a developer's and CI's) share the
Redis without meeting.
"""

from __future__ import annotations

import os
import urllib.request
import uuid
from pathlib import Path

import pytest

SESSION_ENV = {
    "IMPOSITION_LEASE_TTL_S": "9",
    "IMPOSITION_HEARTBEAT_INTERVAL_S": "1",
    "IMPOSITION_SWEEP_INTERVAL_S": "2",
    "IMPOSITION_DEFER_DELAY_S": "1",
    "IMPOSITION_VISIBILITY_MARGIN_S": "2",
    "IMPOSITION_RETRY_BACKOFF_BASE_S": "1",
    "IMPOSITION_SQS_WAIT_TIME_S": "1",
    "IMPOSITION_REDIS_URL": "redis://127.0.0.1:6379/13",
    "IMPOSITION_EVENTS_URL": "redis://127.0.0.1:6379/12",
    "IMPOSITION_ENGINE_TIME_LIMIT_S": "60",
    "IMPOSITION_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true",  # webhook receivers of the tests listen on 127.0.0.1
    "IMPOSITION_REDIS_KEY_NAMESPACE": f"imposition-test-{uuid.uuid4().hex[:12]}",
    # Suites about leases, workers, webhooks and faults submit for tenants they do not register first;
    # tests/admission and tests/ops turn it off and register theirs (``registration_required``).
    "IMPOSITION_AUTO_REGISTER_TENANTS": "true",
}
#: This session's Redis namespace: the only keys the tests ever delete.
REDIS_NAMESPACE = SESSION_ENV["IMPOSITION_REDIS_KEY_NAMESPACE"]

_local_aws = None


def unit_tier_only(config: pytest.Config) -> bool:
    """True when the session runs the unit tier alone (``-m unit``, ``make test-unit``): no server
    is started, and a test that needs one fails instead of finding it."""
    return config.getoption("markexpr", "") == "unit"


def xdist_controller(config: pytest.Config) -> bool:
    """True in the process that only hands tests to pytest-xdist's workers (``-n N``): it runs none."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def session_servers_skipped(config: pytest.Config) -> bool:
    """True when this process starts no server: the unit tier alone, or xdist's controller."""
    return unit_tier_only(config) or xdist_controller(config)


def pytest_configure(config: pytest.Config) -> None:
    global _local_aws
    from devstack.localaws import LocalAws

    os.environ.update(SESSION_ENV)
    if session_servers_skipped(config):
        return
    worker_id = getattr(config, "workerinput", {}).get("workerid", "main")
    log_dir = Path(config.rootpath, ".pytest_cache", worker_id)
    log_dir.mkdir(parents=True, exist_ok=True)
    # the workers' prometheus multiprocess files: this checkout's own, never another run's
    os.environ.setdefault("IMPOSITION_METRICS_DIR", str(log_dir / "metrics"))
    # moto's request recorder (tests.support.recording), off until a test starts it: this session's file
    os.environ["MOTO_RECORDER_FILEPATH"] = str(log_dir / "moto-recording.jsonl")
    _local_aws = LocalAws(log_path=log_dir / "moto.log").start()
    os.environ.update(_local_aws.env)
    from imposition.cli.provision import provision

    provision()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files marked ``file_duration_s(N)`` first, the longest first; the rest after them in collection
    order. The sort is stable, so a file's tests keep their order and stay together (the marker is a
    module's ``pytestmark``)."""
    def weight(item: pytest.Item) -> float:
        marker = item.get_closest_marker("file_duration_s")
        return -float(marker.args[0]) if marker else 0.0

    items.sort(key=weight)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the local AWS endpoint; delete this session's Redis keys from both databases."""
    if session_servers_skipped(config):
        return
    from imposition.common import redis_namespace

    try:
        redis_namespace.forget(REDIS_NAMESPACE, [SESSION_ENV["IMPOSITION_REDIS_URL"], SESSION_ENV["IMPOSITION_EVENTS_URL"]])
    finally:
        if _local_aws is not None:
            _local_aws.stop()


def reset_aws() -> None:
    """Empty every moto backend (queues, tables, bucket) and provision again; delete this session's
    admission keys too, since its tokens and in-flight sets name jobs of the old stack."""
    from imposition import admission
    from imposition.admission.limits import forget_cached_limits
    from imposition.common import aws
    from imposition.cli.provision import provision
    from imposition.common.settings import get_settings

    assert _local_aws is not None
    for server in (_local_aws.main, _local_aws.dynamodb):
        req = urllib.request.Request(f"{server.url}/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()
    aws.reset()
    provision()
    url = get_settings().redis_url
    assert url == SESSION_ENV["IMPOSITION_REDIS_URL"], f"tests only ever clean {SESSION_ENV['IMPOSITION_REDIS_URL']}, not {url}"
    forget_redis_keys(url)
    admission.reset()
    forget_cached_limits()


def forget_redis_keys(url: str) -> int:
    """Delete every key of this session's namespace from the Redis at ``url``; returns how many."""
    from imposition.common import redis_namespace
    from imposition.common.settings import get_settings

    assert get_settings().redis_key_namespace == REDIS_NAMESPACE, "a test changed the Redis namespace"
    return redis_namespace.forget(REDIS_NAMESPACE, [url])


@pytest.fixture
def fresh_aws():
    """A clean local AWS stack for this test: empty queues, tables and bucket, provisioned."""
    reset_aws()
    yield _local_aws


@pytest.fixture(scope="session")
def local_aws():
    """The session's :class:`devstack.localaws.LocalAws` (endpoints in ``.env``)."""
    return _local_aws
