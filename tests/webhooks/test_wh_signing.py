"""Signing and verification (Stripe-style ``t=…,v1=…`` over "<t>.<body>"): every way a request can be bad."""

from __future__ import annotations

import json
import time

import pytest
import redis

from imposition.webhooks import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    InvalidSignature,
    MalformedSignature,
    MemoryReplayStore,
    RedisReplayStore,
    ReplayedEvent,
    StaleTimestamp,
    WebhookVerificationError,
    compute_signature,
    signed_headers,
    verify_webhook,
)

SECRET = "s3cr3t-" + "x" * 32
EVENT = {"id": "evt_job1", "type": "job.succeeded", "job_id": "job1", "tenant_id": "acme", "status": "succeeded"}
BODY = json.dumps(EVENT, sort_keys=True, separators=(",", ":")).encode()


def _verify(headers, body=BODY, secret=SECRET, **kwargs):
    return verify_webhook(headers, body, secret, replay_store=kwargs.pop("store", MemoryReplayStore()), **kwargs)


def test_a_signed_request_verifies_and_returns_the_event():
    headers = signed_headers(BODY, SECRET, "evt_job1")
    assert headers[SIGNATURE_HEADER].startswith("t=") and ",v1=" in headers[SIGNATURE_HEADER]
    assert _verify(headers) == EVENT
    # header names are case-insensitive; a str body is accepted as its UTF-8 bytes
    assert _verify({k.lower(): v for k, v in headers.items()}, body=BODY.decode()) == EVENT


def test_the_signature_is_hmac_sha256_over_timestamp_dot_body():
    import hashlib
    import hmac

    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert compute_signature(SECRET, 1_700_000_000, BODY) == expected
    headers = signed_headers(BODY, SECRET, "evt_job1", timestamp_s=1_700_000_000)
    assert headers[SIGNATURE_HEADER] == f"t=1700000000,v1={expected}"


def test_wrong_secret_is_rejected():
    with pytest.raises(InvalidSignature):
        _verify(signed_headers(BODY, "another-secret-" + "y" * 32, "evt_job1"))


def test_tampered_body_is_rejected():
    headers = signed_headers(BODY, SECRET, "evt_job1")
    tampered = BODY.replace(b'"succeeded"', b'"failed"')
    assert tampered != BODY
    with pytest.raises(InvalidSignature):
        _verify(headers, body=tampered)


def test_stale_and_future_timestamps_are_rejected():
    now = time.time()
    old = signed_headers(BODY, SECRET, "evt_job1", timestamp_s=int(now) - 301)
    with pytest.raises(StaleTimestamp) as stale:
        _verify(old, now_s=now)
    assert stale.value.age_s > 300 and stale.value.tolerance_s == 300
    future = signed_headers(BODY, SECRET, "evt_job1", timestamp_s=int(now) + 301)
    with pytest.raises(StaleTimestamp):
        _verify(future, now_s=now)
    # within the tolerance both ways
    assert _verify(signed_headers(BODY, SECRET, "evt_job1", timestamp_s=int(now) - 299), now_s=now)
    with pytest.raises(StaleTimestamp):
        _verify(signed_headers(BODY, SECRET, "evt_job1", timestamp_s=int(now) - 20), now_s=now, tolerance_s=10)


def test_a_replay_is_rejected_but_a_fresh_redelivery_is_accepted():
    store = MemoryReplayStore()
    now = time.time()
    captured = signed_headers(BODY, SECRET, "evt_job1", timestamp_s=int(now))
    assert _verify(captured, store=store, now_s=now)
    with pytest.raises(ReplayedEvent):
        _verify(captured, store=store, now_s=now + 5)
    # the service's next round signs the same event afresh: a new timestamp, accepted
    redelivered = signed_headers(BODY, SECRET, "evt_job1", timestamp_s=int(now) + 1)
    assert _verify(redelivered, store=store, now_s=now + 5)


def test_a_forged_request_does_not_poison_the_replay_store():
    store = MemoryReplayStore()
    now = int(time.time())
    forged = signed_headers(BODY, "wrong-secret-" + "z" * 32, "evt_job1", timestamp_s=now)
    with pytest.raises(InvalidSignature):
        _verify(forged, store=store)
    assert _verify(signed_headers(BODY, SECRET, "evt_job1", timestamp_s=now), store=store)


def test_replays_are_caught_across_stores_sharing_one_redis():
    from imposition.common.settings import get_settings

    client = redis.Redis.from_url(get_settings().redis_url)
    prefix = f"{get_settings().redis_key_namespace}:webhooks:_:replay"  # this session's keys only
    client.delete(*client.keys(f"{prefix}:*") or ["-"])
    try:
        first, second = RedisReplayStore(client), RedisReplayStore(client)  # two receivers, one Redis
        headers = signed_headers(BODY, SECRET, "evt_job1")
        assert _verify(headers, store=first)
        with pytest.raises(ReplayedEvent):
            _verify(headers, store=second)
        ttl_ms = client.pttl(client.keys(f"{prefix}:*")[0])
        assert 0 < ttl_ms <= 302_000
    finally:
        client.delete(*client.keys(f"{prefix}:*") or ["-"])
        client.close()


def test_malformed_headers_and_bodies_are_rejected():
    good = signed_headers(BODY, SECRET, "evt_job1")
    with pytest.raises(MalformedSignature):
        _verify({EVENT_ID_HEADER: "evt_job1"})
    with pytest.raises(MalformedSignature):
        _verify({**good, SIGNATURE_HEADER: "v1=abc"})
    with pytest.raises(MalformedSignature):
        _verify({**good, SIGNATURE_HEADER: "t=soon,v1=abc"})
    with pytest.raises(MalformedSignature):  # the event-id header must name the signed body's id
        _verify({**good, EVENT_ID_HEADER: "evt_other"})
    not_json = b"hello"
    with pytest.raises(MalformedSignature):
        _verify(signed_headers(not_json, SECRET, "evt_job1"), body=not_json)
    assert all(issubclass(e, WebhookVerificationError)
               for e in (MalformedSignature, InvalidSignature, StaleTimestamp, ReplayedEvent))


def test_one_matching_signature_of_several_is_enough():
    t = int(time.time())
    header = f"t={t},v1={compute_signature('old-secret-' + 'o' * 32, t, BODY)},v1={compute_signature(SECRET, t, BODY)}"
    assert _verify({SIGNATURE_HEADER: header, EVENT_ID_HEADER: "evt_job1"}) == EVENT


def _twice(name: str, value: str):
    """Headers as http.server parses them (an ``email.message.Message``), with ``name`` sent twice."""
    from email.message import Message

    message = Message()
    for key, item in signed_headers(BODY, SECRET, "evt_job1").items():
        message[key] = item
    message[name] = value
    return message


def _good() -> dict:
    return signed_headers(BODY, SECRET, "evt_job1")


ODD_REQUESTS = {
    "non-ASCII v1": lambda: ({**_good(), SIGNATURE_HEADER: f"t={int(time.time())},v1=é"}, BODY),
    "non-ASCII digits in t": lambda: ({**_good(), SIGNATURE_HEADER: "t=\u0661\u0667\u0660\u0660,v1=ab"}, BODY),
    "a 5000-digit t": lambda: ({**_good(), SIGNATURE_HEADER: "t=" + "9" * 5000 + ",v1=ab"}, BODY),
    "list-valued signature": lambda: ({**_good(), SIGNATURE_HEADER: [_good()[SIGNATURE_HEADER]]}, BODY),
    "list-valued event id": lambda: ({**_good(), EVENT_ID_HEADER: ["evt_job1"]}, BODY),
    "signature sent twice": lambda: (_twice(SIGNATURE_HEADER, _good()[SIGNATURE_HEADER]), BODY),
    "non-ASCII bytes header": lambda: ({**_good(), EVENT_ID_HEADER: "evt_\xe9".encode("latin-1")}, BODY),
    "headers not a mapping": lambda: (None, BODY),
    "None body": lambda: (_good(), None),
    "int body": lambda: (_good(), 10**12),  # bytes(10**12) would have allocated a terabyte
    "lone-surrogate body": lambda: (_good(), '{"id": "evt_job1", "x": "\ud800"}'),
    "list body": lambda: (_good(), [BODY]),
}


@pytest.mark.parametrize("case", sorted(ODD_REQUESTS))
def test_odd_headers_and_bodies_raise_malformed_signature_and_nothing_else(case):
    headers, body = ODD_REQUESTS[case]()
    with pytest.raises(MalformedSignature):
        _verify(headers, body=body)


def test_bytes_headers_and_bytes_like_bodies_verify():
    """Frameworks that hand over raw header bytes (ASGI) or a memoryview body are served too."""
    raw = {k.encode(): v.encode() for k, v in signed_headers(BODY, SECRET, "evt_job1").items()}
    assert _verify(raw, body=memoryview(BODY)) == EVENT
