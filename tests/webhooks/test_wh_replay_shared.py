"""Replay protection across receiver processes (issue 16): ``verify_webhook`` remembers accepted
requests in Redis by default, so a captured request replayed to *another* process is refused too.

Two real ``python -m imposition.webhooks.receiver`` processes, neither given a replay store: the same signed
request is accepted by the first and refused by the second. With ``IMPOSITION_WEBHOOK_REPLAY_STORE
=memory`` (each process on its own) the second accepts it: what the default prevents. A receiver
whose Redis is unreachable answers 503 and confirms nothing (fail closed; the sender delivers again).
"""

from __future__ import annotations

import time

from imposition import admission
from tests.admission.helpers import free_port
from tests.webhooks.conftest import finished_job, job_item
from tests.webhooks.test_wh_delivery import _post
from imposition.webhooks import signed_headers
from imposition.webhooks.endpoints import set_webhook
from imposition.webhooks.events import encode, event_id, job_event


def _admitted_event(tenant: str) -> tuple[str, bytes]:
    """An admitted finished job of ``tenant`` (in flight until confirmed) and its event body."""
    job_id = finished_job(tenant)
    admission.reserve(tenant, f"tok-{job_id}", job_id)
    return job_id, encode(job_event(job_item(job_id)))


def _two_receivers(start_receiver, env: dict[str, str] | None = None):
    return start_receiver(env=env), start_receiver(env=env)


def test_a_request_accepted_by_one_receiver_is_refused_as_a_replay_by_another(
        redis_db, new_tenant, webhook_secret, start_receiver):
    first, second = _two_receivers(start_receiver)
    tenant = new_tenant()
    set_webhook(tenant, first.url(tenant), webhook_secret)  # both receivers read the same secret
    job_id, body = _admitted_event(tenant)
    captured = signed_headers(body, webhook_secret, event_id(job_id))

    assert _post(first.url(tenant), body, captured) == 200
    assert _post(second.url(tenant), body, captured) == 400  # the replay, sent to the other process
    assert first.tenant_counts(tenant)["accepted"] == 1
    assert (second.tenant_counts(tenant)["accepted"], second.tenant_counts(tenant)["rejected"]) == (0, 1)
    assert "ReplayedEvent" in second.process.log()
    # a legitimate redelivery (a later round) is signed afresh: accepted, confirming nothing twice
    later = signed_headers(body, webhook_secret, event_id(job_id), timestamp_s=int(time.time()) + 1)
    assert _post(second.url(tenant), body, later) == 200
    assert first.tenant_counts(tenant)["confirmed"] + second.tenant_counts(tenant)["confirmed"] == 1
    assert admission.in_flight(tenant) == 0


def test_with_a_memory_store_per_process_the_other_process_accepts_the_replay(
        redis_db, new_tenant, webhook_secret, start_receiver):
    first, second = _two_receivers(start_receiver, env={"IMPOSITION_WEBHOOK_REPLAY_STORE": "memory"})
    tenant = new_tenant()
    set_webhook(tenant, first.url(tenant), webhook_secret)
    job_id, body = _admitted_event(tenant)
    captured = signed_headers(body, webhook_secret, event_id(job_id))

    assert _post(first.url(tenant), body, captured) == 200
    assert _post(second.url(tenant), body, captured) == 200  # what the shared default refuses
    assert _post(second.url(tenant), body, captured) == 400  # each process still catches its own


def test_a_receiver_whose_replay_store_is_unreachable_answers_503_and_confirms_nothing(
        redis_db, new_tenant, webhook_secret, start_receiver):
    receiver = start_receiver(env={"IMPOSITION_REDIS_URL": f"redis://127.0.0.1:{free_port()}/13"})
    tenant = new_tenant()
    set_webhook(tenant, receiver.url(tenant), webhook_secret)
    job_id, body = _admitted_event(tenant)

    assert _post(receiver.url(tenant), body, signed_headers(body, webhook_secret, event_id(job_id))) == 503
    counts = receiver.tenant_counts(tenant)
    assert (counts["accepted"], counts["confirmed"]) == (0, 0)
    assert admission.in_flight(tenant) == 1
