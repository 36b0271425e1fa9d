"""Secrets sealed with KMS: the one home of how the service keeps a secret it must read back.

A secret is encrypted (``kms:Encrypt``) under ``Settings.webhook_secret_kms_key_id`` with an
encryption context that says whose secret it is; only the ciphertext is stored. A ciphertext
decrypts only under the context it was sealed with, so one kind of secret never opens as another.

==========================================  ==================================  ==================================
secret                                      context                             stored in
==========================================  ==================================  ==================================
a tenant's webhook signing secret           ``{"tenant_id": <tenant>}``         the tenants table
(:mod:`imposition.webhooks.secrets`)
Flower's login                              :data:`FLOWER_LOGIN_CONTEXT`        ``Settings.flower_login_ciphertext``
(:mod:`imposition.observability.flower`)                                        (the processes' environment file)
==========================================  ==================================  ==================================

KMS ``Encrypt`` takes at most :data:`MAX_SECRET_BYTES` of plaintext (KMS API reference, ``Encrypt``).
"""

from __future__ import annotations

from imposition.common import aws
from imposition.common.settings import Settings, get_settings

#: KMS ``Encrypt`` takes at most 4,096 bytes of plaintext.
MAX_SECRET_BYTES = 4096
#: The encryption context of Flower's login: never a tenant's (``tenant_id``) context.
FLOWER_LOGIN_CONTEXT = {"purpose": "flower-login"}


def seal(plaintext: str, context: dict[str, str], s: Settings | None = None) -> bytes:
    """``plaintext`` encrypted under the service's key and ``context`` (a KMS ciphertext blob).

    Raises:
        ValueError: ``plaintext`` is longer than :data:`MAX_SECRET_BYTES` in UTF-8.
        botocore.exceptions.ClientError: KMS refused (no such key, no ``kms:Encrypt``).
        botocore.exceptions.BotoCoreError: KMS could not be reached.
    """
    s = s or get_settings()
    data = plaintext.encode()
    if len(data) > MAX_SECRET_BYTES:
        raise ValueError(f"{len(data)} bytes is more than the {MAX_SECRET_BYTES} KMS encrypts")
    answer = aws.client("kms").encrypt(KeyId=s.webhook_secret_kms_key_id, Plaintext=data, EncryptionContext=context)
    return answer["CiphertextBlob"]


def unseal(ciphertext: bytes, context: dict[str, str]) -> str:
    """The plaintext ``ciphertext`` holds under ``context`` (KMS finds the key in the blob).

    Raises:
        botocore.exceptions.ClientError: KMS refused (no ``kms:Decrypt``, another context, a disabled key).
        botocore.exceptions.BotoCoreError: KMS could not be reached.
    """
    answer = aws.client("kms").decrypt(CiphertextBlob=bytes(ciphertext), EncryptionContext=context)
    return answer["Plaintext"].decode()
