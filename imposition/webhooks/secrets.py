"""Tenants' webhook signing secrets, encrypted with KMS: the tenants table holds only ciphertext.

A secret is sealed with KMS (:mod:`imposition.common.secrets`: ``Settings.webhook_secret_kms_key_id``)
under the encryption context ``{"tenant_id": <tenant>}`` (so one tenant's ciphertext copied onto
another's item does not decrypt), and stored as ``TenantItem.webhook_secret_ciphertext``. Whoever may read the
tenants table, but not ``kms:Decrypt`` with that key, cannot sign a webhook: only the notifier (to
sign) and the operator (to verify, ``imposition tenant``) need Decrypt. KMS encrypts up to 4,096
bytes directly (KMS ``Encrypt`` API reference); a secret is far shorter
(:data:`imposition.common.secrets.MAX_SECRET_BYTES`).

Decrypted secrets are cached per process by ciphertext (a new secret is a new ciphertext), so a
delivery round costs no KMS call after the tenant's first.

Secrets written in the clear before this (``TenantItem.webhook_secret``) are still read, with a
warning naming the migration: ``imposition tenant encrypt-webhook-secrets`` (:func:`migrate_plaintext`)
encrypts each one and removes the plaintext, on condition that it did not change meanwhile.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

from botocore.exceptions import ClientError
from pynamodb.exceptions import UpdateError

from imposition.common import aws, secrets
from imposition.common.settings import Settings, get_settings
from imposition.webhooks.errors import WebhookConfigError
from leases.models import TenantItem

log = logging.getLogger(__name__)

_CONTEXT_KEY = "tenant_id"


class SecretUnavailable(WebhookConfigError):
    """KMS refused to encrypt or decrypt a tenant's secret (the key is missing or disabled, the
    process's role lacks the permission, the ciphertext belongs to another tenant or key); the
    message names the tenant, the key and KMS's answer."""


def _context(tenant_id: str) -> dict[str, str]:
    return {_CONTEXT_KEY: tenant_id}


def encrypt(tenant_id: str, secret: str, s: Settings | None = None) -> bytes:
    """``secret`` encrypted for ``tenant_id`` (KMS ciphertext blob).

    Raises:
        WebhookConfigError: the secret is longer than KMS encrypts (4,096 bytes in UTF-8).
        SecretUnavailable: KMS refused (names the key and its answer).
    """
    s = s or get_settings()
    try:
        return secrets.seal(secret, _context(tenant_id), s)
    except ValueError as exc:
        raise WebhookConfigError(f"webhook secret: {exc}") from None
    except ClientError as exc:
        raise SecretUnavailable(f"tenant {tenant_id!r}: KMS key {s.webhook_secret_kms_key_id!r} refused to encrypt "
                                f"its webhook secret: {exc.response.get('Error', {}).get('Code')}: {exc}") from exc


def decrypt(tenant_id: str, ciphertext: bytes) -> str:
    """The secret ``ciphertext`` holds for ``tenant_id`` (cached per process).

    Raises:
        SecretUnavailable: KMS refused (no permission, another tenant's ciphertext, a disabled key).
        botocore.exceptions.BotoCoreError: KMS could not be reached (a delivery round comes back later).
    """
    return _decrypt(tenant_id, bytes(ciphertext))


@functools.lru_cache(maxsize=4096)
def _decrypt(tenant_id: str, ciphertext: bytes) -> str:
    try:
        return secrets.unseal(ciphertext, _context(tenant_id))
    except ClientError as exc:
        raise SecretUnavailable(f"tenant {tenant_id!r}: KMS refused to decrypt its webhook secret: "
                                f"{exc.response.get('Error', {}).get('Code')}: {exc}") from exc


def secret_of(item: TenantItem) -> str | None:
    """The tenant's signing secret from its item: decrypted, or (legacy) the plaintext with a
    warning naming the migration; None when it has none.

    Raises:
        SecretUnavailable, botocore.exceptions.BotoCoreError: as :func:`decrypt`.
    """
    if item.webhook_secret_ciphertext:
        return decrypt(item.tenant_id, item.webhook_secret_ciphertext)
    if item.webhook_secret:
        _warn_plaintext(item.tenant_id)
        return item.webhook_secret
    return None


@functools.lru_cache(maxsize=1024)
def _warn_plaintext(tenant_id: str) -> None:
    log.warning("tenant %s: its webhook secret is stored in the clear in the tenants table; run "
                "`imposition tenant encrypt-webhook-secrets` to encrypt it with KMS", tenant_id)


def ensure_key(s: Settings | None = None) -> str:
    """Create the KMS key of ``Settings.webhook_secret_kms_key_id`` if it is an alias that names no
    key yet (``imposition provision`` on the local stack; in AWS the template declares it); returns
    ``"created"`` or ``"exists"``. A key id or ARN must exist already.

    Raises:
        SecretUnavailable: a key id or ARN that KMS does not know.
        botocore.exceptions.ClientError: KMS refused otherwise (permissions).
    """
    s = s or get_settings()
    kms = aws.client("kms")
    key = s.webhook_secret_kms_key_id
    try:
        kms.describe_key(KeyId=key)
        return "exists"
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NotFoundException":
            raise
        if not key.startswith("alias/"):
            raise SecretUnavailable(f"webhook_secret_kms_key_id={key!r}: no such KMS key") from exc
    created = kms.create_key(Description="imposition: tenants' webhook signing secrets",
                             KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"]["KeyId"]
    kms.create_alias(AliasName=key, TargetKeyId=created)
    return "created"


@dataclass
class Migration:
    """What :func:`migrate_plaintext` did: tenant ids encrypted, and those left (changed meanwhile)."""

    encrypted: list[str] = field(default_factory=list)
    changed_meanwhile: list[str] = field(default_factory=list)


def migrate_plaintext(s: Settings | None = None) -> Migration:
    """Encrypt every secret still stored in the clear and remove the plaintext, each on condition
    that the plaintext is unchanged (a concurrent ``set-webhook`` wins). Safe to run again.

    Raises:
        SecretUnavailable: KMS refused to encrypt.
        pynamodb.exceptions.PynamoDBException: DynamoDB failed.
    """
    report = Migration()
    for item in TenantItem.scan(TenantItem.webhook_secret.exists()):
        ciphertext = encrypt(item.tenant_id, item.webhook_secret, s)
        try:
            item.update(actions=[TenantItem.webhook_secret_ciphertext.set(ciphertext), TenantItem.webhook_secret.remove()],
                        condition=TenantItem.webhook_secret == item.webhook_secret)
        except UpdateError as exc:
            if exc.cause_response_code != "ConditionalCheckFailedException":
                raise
            report.changed_meanwhile.append(item.tenant_id)
            continue
        report.encrypted.append(item.tenant_id)
    return report

