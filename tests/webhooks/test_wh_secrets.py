"""Webhook secrets encrypted with KMS (imposition.webhooks.secrets): the tenants table holds only
ciphertext bound to its tenant; plaintext of old is read with a warning and migrated by the command.
Real moto KMS and DynamoDB over HTTP."""

from __future__ import annotations

import json
import logging
import secrets as random_secrets
import uuid

import pytest
from click.testing import CliRunner

from imposition.cli.main import main as cli
from imposition.common import aws
from imposition.common.settings import Settings
from imposition.webhooks.endpoints import endpoint_for, set_webhook
from imposition.webhooks.secrets import SecretUnavailable, encrypt
from leases.models import TenantItem
from leases.tenants import ensure_tenant

URL = "http://127.0.0.1:9/hook"


@pytest.fixture
def tenant(private_addresses) -> str:
    return f"sec-{uuid.uuid4().hex[:8]}"


def raw_item(tenant_id: str) -> dict:
    """The tenant's item as DynamoDB stores it (low-level client, every attribute)."""
    return aws.client("dynamodb").get_item(TableName=TenantItem.Meta.table_name, Key={"tenant_id": {"S": tenant_id}},
                                           ConsistentRead=True)["Item"]


def test_the_table_holds_only_ciphertext_and_the_notifier_reads_the_secret(tenant):
    secret = random_secrets.token_hex(32)
    set_webhook(tenant, URL, secret)
    stored = raw_item(tenant)
    assert secret not in json.dumps(stored, default=str) and "webhook_secret" not in stored
    assert stored["webhook_secret_ciphertext"]["B"]
    assert endpoint_for(tenant).secret == secret


def test_one_tenants_ciphertext_copied_onto_another_does_not_decrypt(tenant):
    set_webhook(tenant, URL, random_secrets.token_hex(32))
    thief = f"{tenant}-thief"
    set_webhook(thief, URL, random_secrets.token_hex(32))
    stolen = TenantItem.get(tenant, consistent_read=True).webhook_secret_ciphertext
    TenantItem(thief).update(actions=[TenantItem.webhook_secret_ciphertext.set(stolen)])
    with pytest.raises(SecretUnavailable, match=f"tenant '{thief}': KMS refused to decrypt"):
        endpoint_for(thief)


def test_a_plaintext_secret_of_old_is_read_with_a_warning_then_the_command_encrypts_it(tenant, caplog):
    secret = random_secrets.token_hex(32)
    ensure_tenant(tenant)
    TenantItem(tenant).update(actions=[TenantItem.webhook_url.set(URL), TenantItem.webhook_secret.set(secret)])
    with caplog.at_level(logging.WARNING, logger="imposition.webhooks.secrets"):
        assert endpoint_for(tenant).secret == secret
    assert "imposition tenant encrypt-webhook-secrets" in caplog.text and secret not in caplog.text

    done = CliRunner().invoke(cli, ["tenant", "encrypt-webhook-secrets"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert tenant in json.loads(done.output)["encrypted"]
    stored = raw_item(tenant)
    assert "webhook_secret" not in stored and secret not in json.dumps(stored, default=str)
    assert endpoint_for(tenant).secret == secret
    again = CliRunner().invoke(cli, ["tenant", "encrypt-webhook-secrets"], catch_exceptions=False)
    assert tenant not in json.loads(again.output)["encrypted"]  # nothing left in the clear


def test_a_key_kms_does_not_know_is_refused_naming_it(tenant):
    missing = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    with pytest.raises(SecretUnavailable, match="00000000-0000-0000-0000-000000000000.*refused to encrypt"):
        encrypt(tenant, random_secrets.token_hex(32), Settings(webhook_secret_kms_key_id=missing))
