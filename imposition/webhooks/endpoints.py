"""A tenant's webhook endpoint: URL and secret, kept on its item in the tenants table, the secret
encrypted with KMS (:mod:`imposition.webhooks.secrets`: the table holds only its ciphertext).

The secret is written by ``imposition tenant set-webhook T URL --secret-env VAR`` (read from an
environment variable, so it never appears on a command line or in shell history), read only by
the delivery task (to sign) and the demo receiver (to verify), and never printed or logged:
:class:`WebhookEndpoint` hides it from ``repr``, ``imposition tenant show`` does not print it, and
the SDK's debug logs of the tenants item are withheld (:mod:`imposition.webhooks.redaction`).

A URL is accepted only if its host is and resolves to public addresses (the SSRF guard of
:mod:`imposition.webhooks.destinations`, which checks again at every connection of a delivery), unless
``Settings.webhook_allow_private_addresses`` is set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pynamodb.exceptions import DoesNotExist
from pynamodb.expressions.update import Action

from leases.models import TenantItem
from imposition.common.tenancy import shown_value, validate_tenant_id
from imposition.webhooks import redaction, secrets
from imposition.webhooks.destinations import check_destination
from imposition.webhooks.errors import WebhookConfigError

redaction.install()  # this module reads and writes secrets through the SDK

#: Shortest accepted secret, characters: 128 bits of hex (an HMAC key shorter than its output
#: weakens it, RFC 2104 §3; SHA-256's output is 32 bytes, we accept 16 bytes of entropy in hex).
MIN_SECRET_LEN = 32


@dataclass(frozen=True)
class WebhookEndpoint:
    """Where and how to deliver one tenant's events. ``secret`` never shows in ``repr``."""

    tenant_id: str
    url: str
    secret: str = field(repr=False)


def check_url(url: str) -> str:
    """Return ``url`` if it is an absolute ``http``/``https`` URL with a host and a valid port (if any).

    Raises:
        WebhookConfigError: it is not.
    """
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookConfigError(f"webhook_url={shown_value(url)}: must be an absolute http(s) URL with a host")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError as exc:
        raise WebhookConfigError(f"webhook_url={shown_value(url)}: {exc}") from None
    return url


def loggable_url(url: str) -> str:
    """``url`` without its query, fragment and user info (those may carry a tenant's credentials)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"


def endpoint_for(tenant_id: str) -> WebhookEndpoint | None:
    """``tenant_id``'s endpoint, or None when it has no webhook URL or secret (consistent read).

    Raises:
        imposition.webhooks.secrets.SecretUnavailable: KMS refused to decrypt the secret.
        botocore.exceptions.BotoCoreError: KMS could not be reached.
    """
    validate_tenant_id(tenant_id)
    try:
        item = TenantItem.get(tenant_id, consistent_read=True)
    except DoesNotExist:
        return None
    if not item.webhook_url:
        return None
    secret = secrets.secret_of(item)
    if not secret:
        return None
    return WebhookEndpoint(tenant_id, item.webhook_url, secret)


def checked_webhook(url: str, secret: str | None) -> str:
    """Check a webhook URL, its destination and its secret as :func:`set_webhook` does (also for
    ``imposition tenant create``); returns the secret.

    Raises:
        WebhookConfigError, UnsafeWebhookDestination: see :func:`set_webhook`.
    """
    check_destination(check_url(url))
    if not secret or len(secret) < MIN_SECRET_LEN:
        raise WebhookConfigError(f"webhook secret: must be at least {MIN_SECRET_LEN} characters")
    return secret


def set_webhook(tenant_id: str, url: str | None, secret: str | None) -> None:
    """Set ``tenant_id``'s webhook URL and secret (stored encrypted; a plaintext one of old is
    removed); ``url=None`` removes both.

    Raises:
        imposition.common.tenancy.InvalidTenantId: not a canonical tenant id.
        WebhookConfigError: a bad URL, a host that does not resolve, or a secret shorter than
            ``MIN_SECRET_LEN`` characters.
        UnsafeWebhookDestination: the URL's host is or resolves to a non-public address
            (:mod:`imposition.webhooks.destinations`; allowed by ``Settings.webhook_allow_private_addresses``).
        imposition.webhooks.secrets.SecretUnavailable: KMS refused to encrypt the secret.
    """
    from leases.tenants import ensure_tenant  # noqa: PLC0415 (keeps this module light to import)

    validate_tenant_id(tenant_id)
    actions: list[Action]
    if url is None:
        actions = [TenantItem.webhook_url.remove(), TenantItem.webhook_secret_ciphertext.remove()]
    else:
        ciphertext = secrets.encrypt(tenant_id, checked_webhook(url, secret))
        actions = [TenantItem.webhook_url.set(url), TenantItem.webhook_secret_ciphertext.set(ciphertext)]
    ensure_tenant(tenant_id)
    TenantItem(tenant_id).update(actions=[*actions, TenantItem.webhook_secret.remove(),
                                          TenantItem.updated_at.set(time.time())])
