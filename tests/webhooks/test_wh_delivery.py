"""Webhook delivery through the real notifications worker to real receiver processes (moto, Redis db 13)."""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request

import pytest

from imposition import admission
from imposition.common.settings import get_settings
from tests.support.processes import wait_for
from tests.webhooks.conftest import finished_job, free_port, hook_url, job_item
from imposition.webhooks import delivery, signed_headers
from imposition.webhooks.endpoints import endpoint_for, set_webhook
from imposition.webhooks.events import encode, event_id, job_event
from imposition.webhooks.redaction import REDACTED
from imposition.webhooks.tasks import publish_delivery


def _admitted_finished_job(tenant_id: str, *, status: str = "succeeded") -> str:
    """A finished job that its tenant's admission counts as in flight (as a real submission leaves it)."""
    job_id = finished_job(tenant_id, status=status)
    admission.reserve(tenant_id, f"tok-{job_id}", job_id)
    return job_id


def test_endpoint_down_then_up_delivers_once(notifier, redis_db, new_tenant, webhook_secret, start_receiver):
    tenant = new_tenant()
    port = free_port()  # nothing listens here yet
    set_webhook(tenant, hook_url(port, tenant), webhook_secret)
    job_id = _admitted_finished_job(tenant)
    assert admission.in_flight(tenant) == 1

    publish_delivery(tenant, job_id, first_round_at=time.time())
    wait_for(lambda: job_item(job_id).webhook_status == delivery.RETRYING, 30, what="a failed first round")
    failed = job_item(job_id)
    assert failed.webhook_attempts >= 2  # tenacity retried inside the round
    assert "ConnectionError" in failed.webhook_error and webhook_secret not in failed.webhook_error

    receiver = start_receiver(port)
    wait_for(lambda: job_item(job_id).webhook_status == delivery.DELIVERED, 30, what="delivery once the endpoint is up")
    done = job_item(job_id)
    assert done.webhook_delivered_at >= failed.finished_at
    assert done.webhook_error is None
    assert done.webhook_attempts > failed.webhook_attempts
    counts = receiver.tenant_counts(tenant)
    assert counts["jobs"] == {job_id: 1} and counts["confirmed"] == 1 and counts["rejected"] == 0
    assert admission.in_flight(tenant) == 0


def test_a_failed_job_is_reported_with_its_error(notifier, redis_db, new_tenant, webhook_secret, start_receiver):
    receiver = start_receiver()
    tenant = new_tenant()
    set_webhook(tenant, receiver.url(tenant), webhook_secret)
    job_id = _admitted_finished_job(tenant, status="failed")
    publish_delivery(tenant, job_id)
    wait_for(lambda: job_item(job_id).webhook_status == delivery.DELIVERED, 30, what="delivery")
    assert receiver.tenant_counts(tenant)["jobs"] == {job_id: 1}
    assert admission.in_flight(tenant) == 0


def test_delivery_gives_up_at_the_overall_deadline(notifier, redis_db, new_tenant, webhook_secret):
    tenant = new_tenant()
    set_webhook(tenant, hook_url(free_port(), tenant), webhook_secret)  # never up
    job_id = _admitted_finished_job(tenant)
    # the first round started almost the whole give-up deadline ago: the next round would start too late
    publish_delivery(tenant, job_id, first_round_at=time.time() - get_settings().webhook_give_up_after_s + 0.5)
    wait_for(lambda: job_item(job_id).webhook_status == delivery.GAVE_UP, 30, what="give up")
    assert job_item(job_id).webhook_attempts >= 1
    assert admission.in_flight(tenant) == 1  # never confirmed: counts until the tenant confirms or it expires


def test_a_tenant_without_endpoint_is_confirmed_on_its_behalf(notifier, redis_db, new_tenant):
    tenant = new_tenant()
    job_id = _admitted_finished_job(tenant)
    publish_delivery(tenant, job_id)
    wait_for(lambda: job_item(job_id).webhook_status == delivery.NO_ENDPOINT, 30, what="no-endpoint round")
    assert admission.in_flight(tenant) == 0


def _post(url: str, body: bytes, headers: dict) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _receiver_and_admitted_job(start_receiver, tenant: str, secret: str):
    """A receiver with ``tenant``'s webhook pointed at it, and an admitted finished job of ``tenant``:
    (receiver, tenant, job id, the job's event body)."""
    receiver = start_receiver()
    set_webhook(tenant, receiver.url(tenant), secret)
    job_id = _admitted_finished_job(tenant)
    return receiver, tenant, job_id, encode(job_event(job_item(job_id)))


def test_the_receiver_rejects_forgeries_and_replays(redis_db, new_tenant, webhook_secret, start_receiver):
    receiver, tenant, job_id, body = _receiver_and_admitted_job(start_receiver, new_tenant(), webhook_secret)
    forged = signed_headers(body, "not-the-secret-" + "f" * 32, event_id(job_id))
    assert _post(receiver.url(tenant), body, forged) == 400
    stale = signed_headers(body, webhook_secret, event_id(job_id), timestamp_s=int(time.time()) - 3600)
    assert _post(receiver.url(tenant), body, stale) == 400
    assert admission.in_flight(tenant) == 1
    genuine = signed_headers(body, webhook_secret, event_id(job_id))
    assert _post(receiver.url(tenant), body, genuine) == 200
    assert _post(receiver.url(tenant), body, genuine) == 400  # the same request again: a replay
    counts = receiver.tenant_counts(tenant)
    assert (counts["accepted"], counts["confirmed"], counts["rejected"]) == (1, 1, 3)
    assert admission.in_flight(tenant) == 0
    # a request for another tenant's hook, signed with this tenant's secret, is rejected there
    other = new_tenant()
    set_webhook(other, receiver.url(other), "other-secret-" + "9" * 32)
    assert _post(receiver.url(other), body, signed_headers(body, webhook_secret, event_id(job_id))) == 400


def _raw_post(port: int, path: str, headers: list[tuple[str, bytes]], body: bytes) -> int:
    """POST with exactly these header lines (repeats and non-ASCII bytes kept); the answer's status."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.putrequest("POST", path, skip_accept_encoding=True)
        for name, value in headers:
            connection.putheader(name, value)
        connection.endheaders(body)
        return connection.getresponse().status
    finally:
        connection.close()


def test_the_receiver_answers_400_to_odd_headers(redis_db, new_tenant, webhook_secret, start_receiver):
    receiver, tenant, job_id, body = _receiver_and_admitted_job(start_receiver, new_tenant(), webhook_secret)
    good = [(k, v.encode()) for k, v in signed_headers(body, webhook_secret, event_id(job_id)).items()]
    length = [("Content-Length", str(len(body)).encode())]
    path = f"/hooks/{tenant}"
    odd = {
        "non-ASCII v1": [*good[:1], ("Imposition-Signature", f"t={int(time.time())},v1=\xe9".encode("latin-1")),
                         *good[2:], *length],
        "signature twice": [*good, good[1], *length],
        "non-ASCII event id": [*good[:2], ("Imposition-Event-Id", b"evt_\xe9"), *length],
        "Content-Length not a number": [*good, ("Content-Length", b"abc")],
        "Content-Length negative": [*good, ("Content-Length", b"-1")],
        "Content-Length twice": [*good, *length, *length],
    }
    answers = {case: _raw_post(receiver.port, path, headers, body) for case, headers in odd.items()}
    assert answers == dict.fromkeys(odd, 400)
    assert _raw_post(receiver.port, path, [*good, *length], body) == 200  # still serving; the genuine one passes
    counts = receiver.tenant_counts(tenant)
    assert (counts["accepted"], counts["rejected"]) == (1, 3)  # the Content-Length cases never reach verification
    assert admission.in_flight(tenant) == 0


def test_the_secret_is_never_logged_nor_sent(redis_db, new_tenant, webhook_secret, start_receiver, caplog, notifier,
                                             short_delivery_clocks):
    receiver = start_receiver()
    tenant, down = new_tenant(), new_tenant()
    with caplog.at_level(logging.DEBUG):  # every logger, the AWS SDK's included, at DEBUG
        set_webhook(tenant, receiver.url(tenant), webhook_secret)
        set_webhook(down, hook_url(free_port(), down), webhook_secret)
        delivered = delivery.deliver_round(_admitted_finished_job(tenant), tenant)
        failed = delivery.deliver_round(_admitted_finished_job(down), down)
    assert delivered.status == delivery.DELIVERED and failed.status == "failed"
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "webhook of job" in logged and "Response body" in logged  # we did log, the SDK too
    assert REDACTED in logged  # the SDK's records of the tenants item were withheld
    assert webhook_secret not in logged
    via_worker = _admitted_finished_job(tenant)  # the same, in the notifications worker's process
    publish_delivery(tenant, via_worker)
    wait_for(lambda: job_item(via_worker).webhook_status == delivery.DELIVERED, 30, what="delivery by the worker")
    assert f"webhook of job {via_worker}" in notifier.log()  # its log does record deliveries
    assert webhook_secret not in receiver.process.log() and webhook_secret not in notifier.log()
    assert webhook_secret not in encode(job_event(job_item(finished_job(tenant)))).decode()
    assert webhook_secret not in repr(endpoint_for(tenant))


def test_round_time_limits_are_derived_from_the_settings():
    """Soft = attempt budget + connect + read timeouts + round overhead; hard = soft + grace. The task
    carries this process's limits, and a limit reached never acks the message (no event lost).
    tests/adversarial/test_adv_webhook_trickle.py shows a worker applying its own limits."""
    from imposition.common.settings import Settings
    from imposition.webhooks.delivery import RoundTimeLimits, round_time_limits
    from imposition.webhooks.tasks import deliver_webhook

    settings = Settings(webhook_attempt_budget_s=7, webhook_connect_timeout_s=2, webhook_read_timeout_s=3,
                        webhook_round_overhead_s=4, webhook_hard_limit_grace_s=5)
    assert round_time_limits(settings) == RoundTimeLimits(soft_s=16, hard_s=21)
    limits = round_time_limits()
    assert (deliver_webhook.soft_time_limit, deliver_webhook.time_limit) == (limits.soft_s, limits.hard_s)
    assert deliver_webhook.acks_late and not deliver_webhook.acks_on_failure and not deliver_webhook.acks_on_timeout


@pytest.mark.parametrize("url", ["ftp://example.com/x", "/relative", "http://", "http://example.com:99999/x"])
def test_bad_webhook_urls_are_refused(url, new_tenant, webhook_secret):
    from imposition.webhooks.errors import WebhookConfigError

    with pytest.raises(WebhookConfigError):
        set_webhook(new_tenant(), url, webhook_secret)


def test_events_carry_the_outcome_and_never_a_secret(new_tenant, webhook_secret):
    tenant = new_tenant()
    set_webhook(tenant, hook_url(8080, tenant), webhook_secret)  # the tenant has a secret to leak
    ok, failed = job_event(job_item(finished_job(tenant))), job_event(job_item(finished_job(tenant, status="failed")))
    assert ok["type"] == "job.succeeded" and ok["output_key"].endswith("/plate.pdf") and ok["error"] is None
    assert failed["type"] == "job.failed" and failed["output_key"] is None
    assert (failed["error"], failed["error_code"]) == ("boom", "Boom")
    for event in (ok, failed):
        assert event["id"] == event_id(event["job_id"]) and event["tenant_id"] == tenant
        assert event["finished_at"] >= event["started_at"] >= event["submitted_at"]
        assert "secret" not in encode(event).decode() and webhook_secret not in encode(event).decode()


def test_cli_set_webhook_takes_the_secret_from_the_environment(new_tenant, webhook_secret, monkeypatch):
    from click.testing import CliRunner

    from imposition.cli.main import main as cli

    tenant = new_tenant()
    monkeypatch.setenv("DEMO_WEBHOOK_SECRET", webhook_secret)
    url = hook_url(8080, tenant)
    result = CliRunner().invoke(cli, ["tenant", "set-webhook", tenant, url, "--secret-env", "DEMO_WEBHOOK_SECRET"])
    assert result.exit_code == 0, result.output
    assert webhook_secret not in result.output
    endpoint = endpoint_for(tenant)
    assert (endpoint.url, endpoint.secret) == (url, webhook_secret)
    short = CliRunner().invoke(cli, ["tenant", "set-webhook", tenant, url, "--secret-env", "NO_SUCH_VARIABLE_SET"])
    assert short.exit_code == 2 and "NO_SUCH_VARIABLE_SET" in short.output
    removed = CliRunner().invoke(cli, ["tenant", "set-webhook", tenant, "--remove"])
    assert removed.exit_code == 0 and endpoint_for(tenant) is None


def test_final_outcomes_and_sweeper_failures_queue_a_webhook_retries_do_not(notifier, redis_db, new_tenant,
                                                                             webhook_secret, start_receiver):
    from leases.models import LeaseItem
    from leases import signals

    receiver = start_receiver()
    tenant = new_tenant()
    set_webhook(tenant, receiver.url(tenant), webhook_secret)
    retrying, finished, swept = (_admitted_finished_job(tenant) for _ in range(3))
    # the signals exactly as FairTask and the sweeper task send them
    signals.job_finished.send(sender=None, job=job_item(retrying), outcome="retrying", error="transient")
    signals.job_finished.send(sender=None, job=job_item(finished), outcome="succeeded", error=None)
    lease = LeaseItem(swept, tenant_id=tenant, worker="gone/1", token="t", acquired_at=0, heartbeat_at=0, expires_at=1)
    signals.lease_recovered.send(sender=None, lease=lease, requeued=False)
    signals.lease_recovered.send(sender=None, lease=LeaseItem(retrying, tenant_id=tenant), requeued=True)
    wait_for(lambda: all(job_item(j).webhook_status == delivery.DELIVERED for j in (finished, swept)), 30,
             what="webhooks of the finished and the swept job")
    assert job_item(retrying).webhook_status is None
    assert receiver.tenant_counts(tenant)["jobs"] == {finished: 1, swept: 1}
    assert admission.in_flight(tenant) == 1  # only the job that is still retrying
