"""The publishers' ``task-sent`` over the side channel: Celery's own fields, and never a failed publish."""

from __future__ import annotations

import logging
import os
import uuid

import pytest

from imposition.observability import events
from imposition.common.settings import get_settings
from tasks.celery_app import app
from tasks.submission import submit
from tests.observability.support import CASES, N_UP, final_job
from tests.support.processes import start_worker


def test_task_sent_carries_the_fields_celery_itself_would_send():
    kwargs = {"tenant_id": "acme", "job_id": "j-1"}
    message = app.amqp.as_task_v2("j-1", "imposition.impose", (), kwargs, retries=2, create_sent_event=True,
                                  root_id="r", parent_id="p")
    ours = events.task_sent_fields(message.headers, "imposition", "imposition")
    celerys = {**message.sent_event, "queue": "imposition", "exchange": "imposition", "routing_key": "imposition"}
    assert ours == celerys
    assert "'tenant_id': 'acme'" in ours["kwargs"]


@pytest.fixture
def unreachable_events_redis(monkeypatch):
    """The events URL points at a port nothing listens on (1 on loopback)."""
    monkeypatch.setenv("IMPOSITION_EVENTS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("IMPOSITION_EVENTS_REDIS_TIMEOUT_S", "0.5")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_an_unreachable_events_channel_is_logged_and_never_fails_the_publish(unreachable_events_redis, caplog):
    def publish(job_id: str) -> None:
        message = app.amqp.as_task_v2(job_id, "imposition.impose", (), {"tenant_id": "acme", "job_id": job_id})
        events.send_task_sent(sender="imposition.impose", headers=message.headers, exchange="imposition",
                              routing_key="imposition")

    with caplog.at_level(logging.WARNING, logger="imposition.observability.events"):
        publish("j-2")
        publish("j-3")  # within events_retry_after_s: skipped without another connection attempt
    assert "task-sent event of j-2 not sent" in caplog.text
    assert "j-3" not in caplog.text
    assert ("redis://127.0.0.1:1/0", os.getpid()) not in events._dispatchers, \
        "the broken connection must be dropped, so a later publish reconnects"


def test_a_worker_whose_events_redis_is_down_still_runs_jobs(tmp_path):
    worker = start_worker(tmp_path, concurrency=1, name="no-events",
                          env={"IMPOSITION_EVENTS_URL": "redis://127.0.0.1:1/0", "IMPOSITION_EVENTS_CONNECT_RETRIES": "0"})
    try:
        job = final_job(submit(CASES / "a5_8p.pdf", tenant_id=f"t-{uuid.uuid4().hex[:10]}", token="no-events",
                               layout=N_UP))
        # the worker ran it to the end: a missing monitoring channel neither held it back nor failed it
        assert (job.status, int(job.attempts)) == ("succeeded", 1), job.error
        assert "127.0.0.1:1/0 unreachable" in worker.log() and "monitoring events are dropped" in worker.log()
    finally:
        worker.stop()
