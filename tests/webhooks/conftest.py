"""Fixtures of the webhook tests: a real notifications worker, real receiver processes, final job items.

Project modules are imported inside fixtures and helpers only: this file may load before the
session's ``pytest_configure`` has set the environment (``pytest tests/webhooks``), and importing
``leases.models`` reads the settings.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.admission.conftest import new_tenant, redis_db  # noqa: F401 (fixtures)
from tests.admission.helpers import free_port  # noqa: F401 (re-exported for the tests)
from tests.support.processes import start_worker

#: Short delivery clocks for the notifications worker: 1 s rounds, 1 s SQS redelivery delay.
NOTIFIER_ENV = {
    "IMPOSITION_WEBHOOK_ATTEMPT_BUDGET_S": "1",
    "IMPOSITION_WEBHOOK_BACKOFF_INITIAL_S": "0.1",
    "IMPOSITION_WEBHOOK_BACKOFF_MAX_S": "0.3",
    "IMPOSITION_WEBHOOK_REDELIVERY_DELAY_S": "1",
    "IMPOSITION_WEBHOOK_CONNECT_TIMEOUT_S": "1",
    "IMPOSITION_WEBHOOK_READ_TIMEOUT_S": "3",
}


def hook_url(port: int, tenant_id: str) -> str:
    """``http://127.0.0.1:<port>/hooks/<tenant_id>``."""
    return f"http://127.0.0.1:{port}/hooks/{tenant_id}"


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]):
    """Serve ``handler`` on a free port of 127.0.0.1 in this process (a thread per request) for the
    block; yields ``http://127.0.0.1:<port>``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def start_receiver(tmp_path):
    """Start receivers (``port`` default: a free one; ``env``: extra environment); all are stopped
    after the test."""
    from devstack.stack import ReceiverProcess

    started: list[ReceiverProcess] = []

    def start(port: int | None = None, env: dict[str, str] | None = None) -> ReceiverProcess:
        receiver = ReceiverProcess(tmp_path / f"receiver-{len(started)}.log", port=port or 0, env=env)
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.stop()


@pytest.fixture(scope="module")
def notifier(tmp_path_factory):
    """A real ``celery -A tasks worker -Q notifications -c 2`` with short delivery clocks."""
    worker = start_worker(tmp_path_factory.mktemp("notifier"), queue="notifications", concurrency=2,
                          name="notifier", env=NOTIFIER_ENV)
    yield worker
    worker.stop()


@pytest.fixture
def settings_env(monkeypatch):
    """A function ``**{ENV_NAME: value}`` → None: this process re-reads its settings with those set;
    the session's settings come back after the test."""
    from imposition.common.settings import get_settings

    def set_env(**env: str) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        get_settings.cache_clear()

    yield set_env
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.fixture
def short_delivery_clocks(settings_env):
    """This process delivers with the notifier's short clocks (settings re-read), restored after."""
    settings_env(**NOTIFIER_ENV)


@pytest.fixture
def private_addresses(settings_env):
    """A function ``allowed: bool`` → None setting this process's ``webhook_allow_private_addresses``
    (the session allows them: its receivers listen on 127.0.0.1)."""
    return lambda allowed: settings_env(IMPOSITION_WEBHOOK_ALLOW_PRIVATE_ADDRESSES=str(allowed).lower())


@pytest.fixture
def webhook_secret() -> str:
    """A fresh signing secret (64 hex characters)."""
    return secrets.token_hex(32)


def finished_job(tenant_id: str, *, status: str = "succeeded") -> str:
    """Write a finished job item of ``tenant_id`` (as a worker commits it); return its id."""
    from leases.models import JobItem

    job_id = uuid.uuid4().hex
    now = time.time()
    JobItem(job_id, tenant_id=tenant_id, token=f"tok-{job_id}", max_attempts=3, layout={"layout": "n_up"},
            input_key=f"tenants/{tenant_id}/jobs/{job_id}/input.pdf", submitted_at=now - 3, started_at=now - 2,
            finished_at=now, attempts=1, status=status,
            output_key=f"tenants/{tenant_id}/jobs/{job_id}/plate.pdf" if status == "succeeded" else None,
            error="boom" if status == "failed" else None, error_code="Boom" if status == "failed" else None,
            ).save()
    return job_id


def job_item(job_id: str):
    """The job item, read consistently."""
    from leases.models import JobItem

    return JobItem.get(job_id, consistent_read=True)
