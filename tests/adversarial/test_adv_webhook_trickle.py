"""A tenant's webhook endpoint that answers one byte at a time must not starve other tenants.

requests' read timeout bounds each socket read, not the response: an endpoint that sends a header
line one byte per second never trips it, and tenacity's ``stop_after_delay`` is only checked between
attempts, so one POST held a notifications slot for as long as the endpoint liked (http.client's
limits: 100 header lines or 64 KiB per line, at the endpoint's pace). Two such tenants filled the
``-c 2`` notifications worker and every other tenant's webhook waited; those tenants never got to
confirm, so their admission in-flight counts kept growing towards the cap.

A round must end within its budget plus the timeouts, whatever the endpoint does (Celery's time
limits of the delivery task, :func:`imposition.webhooks.delivery.round_time_limits`), and the round ended that
way is a failed round like any other: recorded, and re-published.

The deliveries are published directly for finished job items (as ``job_finished`` publishes them),
so no imposition worker is needed.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler

import pytest

from tests.conftest import reset_aws
from tests.support.processes import start_worker, wait_for
from tests.webhooks.conftest import finished_job, job_item, serving

#: Short delivery clocks; the read timeout (2 s) is longer than the trickle's pace (1 byte/s), and
#: the round's time limits (soft 0.5 + 0.5 + 2 + 0.5 = 3.5 s, hard 5.5 s) stay below the session's
#: 13 s visibility timeout.
NOTIFIER_ENV = {
    "IMPOSITION_WEBHOOK_ATTEMPT_BUDGET_S": "0.5",
    "IMPOSITION_WEBHOOK_BACKOFF_INITIAL_S": "0.1",
    "IMPOSITION_WEBHOOK_BACKOFF_MAX_S": "0.3",
    "IMPOSITION_WEBHOOK_REDELIVERY_DELAY_S": "1",
    "IMPOSITION_WEBHOOK_CONNECT_TIMEOUT_S": "0.5",
    "IMPOSITION_WEBHOOK_READ_TIMEOUT_S": "2",
    "IMPOSITION_WEBHOOK_ROUND_OVERHEAD_S": "0.5",
    "IMPOSITION_WEBHOOK_HARD_LIMIT_GRACE_S": "2",
}
#: Longest a trickling answer goes on (s): far beyond any sane round, ended early by the fixture.
TRICKLE_FOR_S = 600
SECRET = "adversarial-webhook-secret-0123456789abcdef"


class _Endpoint(BaseHTTPRequestHandler):
    """``/ok/...`` answers 204 at once; ``/trickle/...`` sends a status line, then one header byte
    per second (each byte well inside the read timeout) until the server stops."""

    stop = threading.Event()
    calls: Counter[str] = Counter()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.calls[self.path] += 1
        if self.path.startswith("/ok/"):
            self.send_response(204)
            self.end_headers()
            return
        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        deadline = time.monotonic() + TRICKLE_FOR_S
        while not self.stop.wait(1) and time.monotonic() < deadline:
            try:
                self.wfile.write(b"a")
                self.wfile.flush()
            except OSError:
                return


@pytest.fixture(scope="module")
def endpoint():
    with serving(_Endpoint) as url:
        yield url


@pytest.fixture(scope="module")
def notifier(endpoint, tmp_path_factory):
    reset_aws()
    worker = start_worker(tmp_path_factory.mktemp("adv-webhooks"), queue="notifications", concurrency=2,
                          name="adv-notifier", env=NOTIFIER_ENV)
    yield worker
    _Endpoint.stop.set()  # trickles end at once, so the worker's warm shutdown does not wait out a round
    worker.stop()


def _limits():
    """The round time limits the notifier derives from its settings."""
    from imposition.common.settings import Settings
    from imposition.webhooks.delivery import round_time_limits

    return round_time_limits(Settings(**{k.removeprefix("IMPOSITION_").lower(): v for k, v in NOTIFIER_ENV.items()}))


def test_two_trickling_endpoints_do_not_hold_back_another_tenants_webhook(endpoint, notifier):
    from imposition.webhooks.endpoints import set_webhook
    from imposition.webhooks.tasks import publish_delivery

    run = uuid.uuid4().hex[:6]
    slow = {f"slow{n}-{run}": None for n in (1, 2)}
    for tenant in slow:
        set_webhook(tenant, f"{endpoint}/trickle/{tenant}", SECRET)
        slow[tenant] = finished_job(tenant)
        publish_delivery(tenant, slow[tenant], first_round_at=time.time())
    wait_for(lambda: all(_Endpoint.calls[f"/trickle/{t}"] for t in slow), 30,
             what="both trickling endpoints to be called (both notifier slots busy)")

    healthy = f"healthy-{run}"
    set_webhook(healthy, f"{endpoint}/ok/{healthy}", SECRET)
    job_id = finished_job(healthy)
    publish_delivery(healthy, job_id, first_round_at=time.time())
    wait_for(lambda: job_item(job_id).webhook_status == "delivered", 30,
             what="the healthy tenant's webhook to be delivered while the others trickle")

    # each trickled round ended at its soft time limit as a failed round, and was published again
    wait_for(lambda: all(_Endpoint.calls[f"/trickle/{t}"] >= 2 for t in slow), 30,
             what="a second round for each trickling endpoint")
    for job in slow.values():
        item = job_item(job)
        assert item.webhook_status == "retrying"
        assert f"round time limit of {_limits().soft_s:g} s reached" in item.webhook_error
