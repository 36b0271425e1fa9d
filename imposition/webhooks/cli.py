"""``imposition tenant set-webhook``: a tenant's webhook URL and secret (added to the ``tenant`` group)."""

from __future__ import annotations

import json
import os

import click


def secret_from_env(secret_env: str | None) -> str:
    """The webhook secret held by environment variable ``secret_env`` (required with a URL).

    Raises:
        click.UsageError: no ``--secret-env``, or the variable is unset or empty (exit 2).
    """
    if not secret_env:
        raise click.UsageError("--secret-env VAR is required with a webhook URL")
    secret = os.environ.get(secret_env)
    if not secret:
        raise click.UsageError(f"environment variable {secret_env} is unset or empty")
    return secret


@click.command("set-webhook")
@click.argument("tenant_id")
@click.argument("url", required=False)
@click.option("--secret-env", metavar="VAR",
              help="Name of the environment variable that holds the signing secret (>= 32 characters); "
                   "the secret itself never goes on the command line.")
@click.option("--remove", is_flag=True, help="Remove the tenant's webhook (URL and secret).")
def set_webhook_command(tenant_id: str, url: str | None, secret_env: str | None, remove: bool) -> None:
    """Set TENANT_ID's webhook URL and its HMAC-SHA256 signing secret; prints the URL, never the secret."""
    from imposition.webhooks.endpoints import set_webhook
    from imposition.webhooks.errors import WebhookConfigError

    if remove == bool(url):
        raise click.UsageError("give either URL (with --secret-env VAR) or --remove")
    from imposition.admission.limits import require_registered  # noqa: PLC0415

    require_registered(tenant_id)  # UnknownTenant: one refusal line, exit 2 (ServiceGroup)
    secret = secret_from_env(secret_env) if url else None
    try:
        set_webhook(tenant_id, url, secret)
    except (WebhookConfigError, ValueError) as exc:
        raise click.BadParameter(str(exc)) from exc
    click.echo(json.dumps({"tenant_id": tenant_id, "webhook_url": url, "secret_set": bool(secret)}, sort_keys=True))


@click.command("encrypt-webhook-secrets")
def encrypt_secrets_command() -> None:
    """Encrypt with KMS every webhook secret still stored in the clear in the tenants table, and
    remove the plaintext (imposition.webhooks.secrets). Prints the tenants done; safe to run again."""
    from imposition.webhooks.secrets import migrate_plaintext  # noqa: PLC0415

    report = migrate_plaintext()
    click.echo(json.dumps({"encrypted": report.encrypted, "changed_meanwhile": report.changed_meanwhile}))
