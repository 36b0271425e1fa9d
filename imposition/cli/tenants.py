"""Tenants for operators: ``imposition tenant create``, ``tenant list`` and ``tenant show``.

``tenant create`` registers a tenant with its whole configuration in one conditional write
(:func:`leases.tenants.create_tenant`); a submission for a tenant never registered is refused
(``unknown_tenant``) unless ``Settings.auto_register_tenants`` is on.

Both read the tenants table (one item per tenant: cap, burst cap, admission overrides, webhook URL,
and the counters ``in_flight``, ``queued``, ``waiting``, all from the same item, so they agree with
each other); ``tenant show`` adds the tenant's live leases and its admission in-flight count from
Redis (admitted, not yet confirmed). The webhook secret is never shown: only whether one is set.
"""

from __future__ import annotations

import json

import click

from imposition.cli.main import TENANT_ID


def tenant_view(item, default_cap: int) -> dict:
    """The operator's view of one tenant item (see module docstring); no secret, only ``webhook_secret_set``."""
    from imposition.admission.limits import limits_for

    limits = limits_for(item.tenant_id)
    cap = item.effective_cap(default_cap)
    return {
        "tenant_id": item.tenant_id,
        "cap": cap,
        "cap_source": "override" if item.cap is not None else "default",
        "burst_cap": int(item.burst_cap) if item.burst_cap is not None else cap,
        "rate_limit_per_min": limits.rate_limit_per_min,
        "admission_in_flight_cap": limits.in_flight_cap,
        "idempotency_ttl_s": limits.idempotency_ttl_s,
        "webhook_url": item.webhook_url,
        "webhook_secret_set": bool(item.webhook_secret_ciphertext or item.webhook_secret),
        "in_flight": int(item.in_flight or 0),
        "queued": int(item.queued or 0),
        "waiting": int(item.waiting or 0),
    }


@click.command("create")
@click.argument("tenant_id", type=TENANT_ID)
@click.option("--cap", type=click.IntRange(min=0), default=None, help="Cap override (default: Settings.default_cap).")
@click.option("--burst", "burst_cap", type=click.IntRange(min=0), default=None,
              help="Borrowing: leases it may hold while the cluster has slots above its reserve (>= the cap).")
@click.option("--rate-limit-per-min", type=click.IntRange(min=1), default=None, help="Jobs admitted in any 60 s window.")
@click.option("--in-flight-cap", type=click.IntRange(min=1), default=None,
              help="Submitted-but-unconfirmed jobs allowed at once (admission).")
@click.option("--webhook", "webhook_url", default=None, help="Webhook URL (needs --secret-env).")
@click.option("--secret-env", metavar="VAR", default=None,
              help="Environment variable holding the webhook's signing secret (>= 32 characters).")
def tenant_create(tenant_id: str, cap: int | None, burst_cap: int | None, rate_limit_per_min: int | None,
                  in_flight_cap: int | None, webhook_url: str | None, secret_env: str | None) -> None:
    """Register TENANT_ID (lower case) with its tier, admission limits and webhook, then print it
    as ``tenant show`` does (never the secret). Exit status 2: a value out of range, a bad webhook,
    or the tenant exists already (nothing changed)."""
    from leases.tenants import TenantExists, create_tenant
    from imposition.webhooks.cli import secret_from_env
    from imposition.webhooks.endpoints import checked_webhook
    from imposition.webhooks.errors import WebhookConfigError
    from imposition.webhooks.secrets import encrypt

    ciphertext = None
    if webhook_url is not None:
        secret = secret_from_env(secret_env)
        try:
            ciphertext = encrypt(tenant_id, checked_webhook(webhook_url, secret))
        except (WebhookConfigError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="--webhook") from exc
    elif secret_env is not None:
        raise click.UsageError("--secret-env needs --webhook URL")
    try:
        create_tenant(tenant_id, cap=cap, burst_cap=burst_cap, rate_limit_per_min=rate_limit_per_min,
                      admission_in_flight_cap=in_flight_cap, webhook_url=webhook_url,
                      webhook_secret_ciphertext=ciphertext)
    except TenantExists as exc:
        raise click.UsageError(str(exc)) from exc
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--burst" if "burst_cap" in str(exc) else "--cap") from exc
    click.echo(f"registered tenant {tenant_id}", err=True)
    _show(tenant_id)


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array instead of the table.")
def tenant_list(as_json: bool) -> None:
    """Every tenant: cap, burst, rate limit per minute, admission in-flight cap, webhook URL, and
    leases in flight, jobs queued and waiting."""
    from leases.models import TenantItem
    from imposition.cli.jobs import table
    from imposition.common.settings import get_settings

    default_cap = get_settings().default_cap
    views = sorted((tenant_view(item, default_cap) for item in TenantItem.scan()), key=lambda v: v["tenant_id"])
    if as_json:
        click.echo(json.dumps(views, indent=2, sort_keys=True))
        return
    header = ["tenant", "cap", "burst", "rate/min", "adm_cap", "in_flight", "queued", "waiting", "webhook"]
    rows = [[v["tenant_id"], v["cap"], v["burst_cap"], v["rate_limit_per_min"], v["admission_in_flight_cap"],
             v["in_flight"], v["queued"], v["waiting"], v["webhook_url"] or "-"] for v in views]
    click.echo(table(header, rows) if rows else "no tenants")


@click.command("show")
@click.argument("tenant_id", type=TENANT_ID)
def tenant_show(tenant_id: str) -> None:
    """Print a tenant as JSON: cap (and whether it is an override), burst, admission limits, webhook
    URL (the secret never: ``webhook_secret_set``), in flight, queued, waiting, live leases, and
    ``admission_in_flight`` (admitted, unconfirmed; ``null`` if Redis cannot be reached).

    Exit status 2: no such tenant (``Error: unknown_tenant: ...``, as every command says it)."""
    from imposition.cli.main import require_known_tenant

    require_known_tenant(tenant_id)
    _show(tenant_id)


def _show(tenant_id: str) -> None:
    """Print ``tenant show``'s JSON of ``tenant_id``."""
    from imposition import admission
    from leases.tenants import describe_tenant
    from leases.waiting import read_tenant
    from imposition.common.settings import get_settings

    shown = describe_tenant(tenant_id)
    if not shown["known"]:
        raise click.ClickException(f"no such tenant: {tenant_id} (never registered; `imposition tenant create` "
                                   "registers one)")
    item = read_tenant(tenant_id)
    if item is not None:
        shown.update(tenant_view(item, get_settings().default_cap))
    try:
        shown["admission_in_flight"] = admission.in_flight(tenant_id)
    except admission.AdmissionUnavailable:
        shown["admission_in_flight"] = None
    click.echo(json.dumps(shown, indent=2, sort_keys=True))
