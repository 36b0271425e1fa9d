"""Webhooks: a signed event to the tenant when its job ends; the tenant verifies it and confirms.

Service side: :mod:`imposition.webhooks.tasks` (the ``imposition.deliver_webhook`` task on the
``notifications`` queue, triggered by :data:`leases.signals.job_finished`, and the outbox drain
``imposition.drain_webhook_outbox``, the safety net: :mod:`leases.outbox`), :mod:`imposition.webhooks.delivery`
(one round of signed POSTs with tenacity), :mod:`imposition.webhooks.fairness` (per-tenant delivery slots),
:mod:`imposition.webhooks.endpoints` (URL and secret per tenant), :mod:`imposition.webhooks.destinations` (the SSRF
guard: public addresses only).
Tenant side: :func:`verify_webhook` and :func:`admission.confirm`; :mod:`imposition.webhooks.receiver` is a demo
receiver process (``python -m imposition.webhooks.receiver --port 0``).

Public API::

    verify_webhook(headers, body, secret, tolerance_s=300, *, replay_store=None, now_s=None) -> dict
    signed_headers(body, secret, event_id, *, timestamp_s=None) -> dict
    compute_signature(secret, timestamp_s, body) -> str
    MemoryReplayStore(), RedisReplayStore(client), default_replay_store() (Redis unless configured to memory)
    SIGNATURE_HEADER = "Imposition-Signature", EVENT_ID_HEADER = "Imposition-Event-Id"
    errors: WebhookError > WebhookVerificationError > MalformedSignature | InvalidSignature |
            StaleTimestamp | ReplayedEvent;  WebhookError > ReplayStoreUnavailable;
            WebhookError > WebhookConfigError > UnsafeWebhookDestination

This package's ``__init__`` imports no Celery or AWS code, so a tenant can use the verifier alone.
"""

from __future__ import annotations

from imposition.webhooks.errors import (
    InvalidSignature,
    MalformedSignature,
    ReplayedEvent,
    ReplayStoreUnavailable,
    StaleTimestamp,
    UnsafeWebhookDestination,
    WebhookConfigError,
    WebhookError,
    WebhookVerificationError,
)
from imposition.webhooks.signing import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    MemoryReplayStore,
    RedisReplayStore,
    ReplayStore,
    compute_signature,
    default_replay_store,
    signed_headers,
    verify_webhook,
)

__all__ = [
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "InvalidSignature",
    "MalformedSignature",
    "MemoryReplayStore",
    "RedisReplayStore",
    "ReplayStore",
    "ReplayStoreUnavailable",
    "ReplayedEvent",
    "StaleTimestamp",
    "UnsafeWebhookDestination",
    "WebhookConfigError",
    "WebhookError",
    "WebhookVerificationError",
    "compute_signature",
    "default_replay_store",
    "signed_headers",
    "verify_webhook",
]
