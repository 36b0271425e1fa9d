"""Fair notifications (issue 16): one tenant's hanging endpoint delays another tenant's webhooks by
at most one delivery timeout.

A real notifications worker with two slots and ``webhook_tenant_concurrency`` 1. Tenant ``hang``
has four finished jobs whose endpoint reads each request and never answers (each round ends at the
read timeout); once its first round hangs, tenant ``ok`` finishes a job. Without the per-tenant
limit, ``hang``'s second round takes the other slot too and ``ok`` waits for a hung round to end;
with it, ``hang`` never has more than one request open, its other rounds are put back, and ``ok``'s
webhook arrives while ``hang``'s first round is still hanging, so within one delivery timeout.
"""

from __future__ import annotations

import select
import socket
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler

import pytest

from tests.conftest import reset_aws
from tests.support.processes import start_worker, wait_for
from tests.webhooks.conftest import finished_job, job_item, serving

#: A round ends at the 8 s read timeout of its one POST (the attempt budget is spent by then);
#: the time limits (soft 0.5 + 0.5 + 8 + 0.5 = 9.5 s, hard 11.5 s) stay below the session's 13 s
#: visibility timeout.
NOTIFIER_ENV = {
    "IMPOSITION_WEBHOOK_ATTEMPT_BUDGET_S": "0.5",
    "IMPOSITION_WEBHOOK_BACKOFF_INITIAL_S": "0.1",
    "IMPOSITION_WEBHOOK_BACKOFF_MAX_S": "0.3",
    "IMPOSITION_WEBHOOK_REDELIVERY_DELAY_S": "1",
    "IMPOSITION_WEBHOOK_CONNECT_TIMEOUT_S": "0.5",
    "IMPOSITION_WEBHOOK_READ_TIMEOUT_S": "8",
    "IMPOSITION_WEBHOOK_ROUND_OVERHEAD_S": "0.5",
    "IMPOSITION_WEBHOOK_HARD_LIMIT_GRACE_S": "2",
    "IMPOSITION_WEBHOOK_TENANT_CONCURRENCY": "1",
}
SECRET = "fairness-webhook-secret-0123456789abcdef"


class _Endpoint(BaseHTTPRequestHandler):
    """``/ok/<tenant>`` answers 204 at once and notes how many ``/hang/`` requests were open and
    made so far; ``/hang/<tenant>`` reads the request and never answers; it counts as open until the
    client hangs up (or the server stops)."""

    stop = threading.Event()
    lock = threading.Lock()
    calls: Counter[str] = Counter()
    open_now: Counter[str] = Counter()
    most_open: Counter[str] = Counter()
    #: ok path → (hang requests made, hang requests open) when it arrived.
    seen_at_ok: dict[str, tuple[int, int]] = {}

    def log_message(self, *args: object) -> None:
        pass

    #: the connections of the ``/hang/`` requests still open, by kind
    open_conns: dict[str, set[socket.socket]] = {}

    @staticmethod
    def _client_gone(conn: socket.socket, wait_s: float = 0.0) -> bool:
        """True once the client closed ``conn`` (its read timeout ended the POST)."""
        readable, _, _ = select.select([conn], [], [], wait_s)
        try:
            return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind = self.path.split("/")[1]
        with self.lock:
            self.calls[kind] += 1
            if kind == "ok":
                self.seen_at_ok[self.path] = (self.calls["hang"], self.open_now["hang"])
            else:
                # A request counts as open beside this one only while its client is still connected:
                # the thread that serves it notices a hang-up up to a poll later, so ask here.
                still = {c for c in self.open_conns.get(kind, set()) if not self._client_gone(c, 0.2)}
                self.open_conns[kind] = still | {self.connection}
                self.open_now[kind] += 1
                self.most_open[kind] = max(self.most_open[kind], len(self.open_conns[kind]))
        if kind == "ok":
            self.send_response(204)
            self.end_headers()
            return
        try:
            while not self.stop.wait(0.05) and not self._client_gone(self.connection):
                pass
        finally:
            with self.lock:
                self.open_now[kind] -= 1
                self.open_conns[kind].discard(self.connection)


@pytest.fixture(scope="module")
def endpoint():
    with serving(_Endpoint) as url:
        yield url
        _Endpoint.stop.set()


@pytest.fixture(scope="module")
def notifier(endpoint, tmp_path_factory):
    reset_aws()
    worker = start_worker(tmp_path_factory.mktemp("fair-webhooks"), queue="notifications", concurrency=2,
                          name="fair-notifier", env=NOTIFIER_ENV)
    yield worker
    _Endpoint.stop.set()  # hung requests end at once, so the warm shutdown does not wait out a round
    worker.stop()


def test_a_hanging_tenant_holds_one_slot_and_another_tenants_webhook_arrives_within_one_round(endpoint, notifier):
    from imposition.webhooks.endpoints import set_webhook
    from imposition.webhooks.tasks import publish_delivery

    run = uuid.uuid4().hex[:6]
    hang, ok = f"hang-{run}", f"ok-{run}"
    set_webhook(hang, f"{endpoint}/hang/{hang}", SECRET)
    set_webhook(ok, f"{endpoint}/ok/{ok}", SECRET)
    hung_jobs = [finished_job(hang) for _ in range(4)]
    for job_id in hung_jobs:
        publish_delivery(hang, job_id, first_round_at=time.time())
    wait_for(lambda: _Endpoint.calls["hang"] >= 1, 30, what="the hanging tenant's first round to start")

    job_id = finished_job(ok)
    published_at = time.time()
    publish_delivery(ok, job_id, first_round_at=published_at)
    wait_for(lambda: job_item(job_id).webhook_status == "delivered", 30, what="the other tenant's webhook")

    made, still_open = _Endpoint.seen_at_ok[f"/ok/{ok}"]
    print(f"\nother tenant's webhook delivered {job_item(job_id).webhook_delivered_at - published_at:.1f} s "
          f"after its job ended; the hanging round lasts 8 s")
    assert (made, still_open) == (1, 1), "it waited for a hung round to end"
    # the hanging tenant's other rounds were put back while its first one hung, never run beside it
    assert "put back" in notifier.log()
    wait_for(lambda: _Endpoint.calls["hang"] >= 2, 40, what="the hanging tenant's next round")
    assert _Endpoint.most_open["hang"] == 1
    assert all(job_item(j).webhook_status in ("pending", "retrying", None) for j in hung_jobs)


def test_delivery_slots_are_per_tenant_bounded_and_free_themselves(redis_db, settings_env):
    from imposition.webhooks import fairness

    settings_env(IMPOSITION_WEBHOOK_TENANT_CONCURRENCY="1")
    run = uuid.uuid4().hex[:6]
    busy, other = f"busy-{run}", f"other-{run}"
    with fairness.delivery_slot(busy, hold_s=30):
        with pytest.raises(fairness.TenantBusy) as refused:
            with fairness.delivery_slot(busy, hold_s=30):
                pass
        assert 0 < refused.value.retry_after_s <= 30
        with fairness.delivery_slot(other, hold_s=30):  # another tenant's slots are its own
            pass
    with fairness.delivery_slot(busy, hold_s=30):  # released at the end of the block
        pass
    # a holder that never releases (a child killed mid-round) holds it for hold_s at most
    redis_db.set(fairness.slot_keys(busy)[0], "killed-holder", px=300)
    with pytest.raises(fairness.TenantBusy):
        with fairness.delivery_slot(busy, hold_s=30):
            pass
    wait_for(lambda: redis_db.get(fairness.slot_keys(busy)[0]) is None, 10, what="the dead holder's slot to expire")
    with fairness.delivery_slot(busy, hold_s=30):
        pass


def test_with_redis_unreachable_a_round_goes_ahead_without_the_limit(settings_env):
    from tests.admission.helpers import free_port
    from imposition.webhooks import fairness

    settings_env(IMPOSITION_REDIS_URL=f"redis://127.0.0.1:{free_port()}/13")
    ran = []
    with fairness.delivery_slot(f"t-{uuid.uuid4().hex[:6]}", hold_s=30):
        ran.append(True)
    assert ran == [True]


def test_a_round_put_back_moves_its_outbox_entry_on_so_the_drain_sends_no_copy(redis_db, settings_env):
    from leases import outbox
    from imposition.webhooks import delivery, fairness
    from imposition.webhooks.endpoints import set_webhook

    settings_env(IMPOSITION_WEBHOOK_TENANT_CONCURRENCY="1")
    tenant = f"putback-{uuid.uuid4().hex[:6]}"
    set_webhook(tenant, f"http://127.0.0.1:9/{tenant}", SECRET)  # never reached: the round is put back
    job_id = finished_job(tenant)
    now = time.time()
    job_item(job_id).update(actions=[*outbox.intent_actions(now - 3600)])  # overdue: the drain's next pick

    with fairness.delivery_slot(tenant, hold_s=30):  # another round of the tenant is running
        report = delivery.deliver_round(job_id, tenant)

    assert report.status == delivery.BUSY and 0 < report.retry_after_s <= 30
    item = job_item(job_id)
    assert item.webhook_status == "pending" and item.outbox_partition == outbox.OUTBOX_PARTITION
    assert float(item.webhook_due_at) >= delivery.outbox_due_at(now)  # past the put-back round's end
    assert not [j for j in outbox.due(time.time()) if j.job_id == job_id]
