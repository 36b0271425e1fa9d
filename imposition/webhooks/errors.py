"""Errors of the webhooks package. One root, :class:`WebhookError`::

    WebhookError
    ├── WebhookVerificationError     tenant side: reject the request (answer 400)
    │   ├── MalformedSignature       signature or event-id header missing or unparsable, body not an event
    │   ├── InvalidSignature         no v1 signature matches: wrong secret or tampered body
    │   ├── StaleTimestamp           |now - t| exceeds the tolerance (old capture or skewed clock)
    │   └── ReplayedEvent            the same event id and timestamp were accepted before
    ├── ReplayStoreUnavailable       tenant side: the replay store cannot be reached (answer 503:
    │                                the sender delivers again later)
    └── WebhookConfigError           a webhook URL or secret that cannot be used (names the field)
        └── UnsafeWebhookDestination the URL's host is or resolves to a non-public address (SSRF guard)

No message of this package ever contains a secret.
"""

from __future__ import annotations


class WebhookError(Exception):
    """Root of every webhooks error."""


class WebhookVerificationError(WebhookError):
    """A received webhook failed verification; the receiver must not act on it."""


class MalformedSignature(WebhookVerificationError):
    """The ``Imposition-Signature`` or ``Imposition-Event-Id`` header is missing or unparsable, or the
    body is not a JSON event whose ``id`` equals the event-id header."""


class InvalidSignature(WebhookVerificationError):
    """No ``v1`` signature matches HMAC-SHA256(secret, "<t>.<body>")."""


class StaleTimestamp(WebhookVerificationError):
    """The signature's timestamp is further than the tolerance from now.

    Attributes:
        age_s: now − t, seconds (negative for a timestamp in the future).
        tolerance_s: the largest accepted ``|age_s|``.
    """

    def __init__(self, age_s: float, tolerance_s: float) -> None:
        super().__init__(f"signature timestamp is {age_s:.0f} s from now; tolerance is {tolerance_s:g} s")
        self.age_s = age_s
        self.tolerance_s = tolerance_s


class ReplayedEvent(WebhookVerificationError):
    """This exact signed request (event id and timestamp) was accepted before."""


class ReplayStoreUnavailable(WebhookError):
    """The replay store (Redis) could not be asked whether a request was accepted before; the
    request is neither accepted nor refused as a forgery (verification fails closed)."""


class WebhookConfigError(WebhookError, ValueError):
    """A webhook URL or secret that cannot be used."""


class UnsafeWebhookDestination(WebhookConfigError):
    """A webhook URL whose host is, or resolves to, a loopback, private, link-local, multicast,
    unspecified, reserved or otherwise non-public address (refused unless
    ``Settings.webhook_allow_private_addresses``; see :mod:`imposition.webhooks.destinations`)."""
