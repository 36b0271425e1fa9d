"""``imposition tenant set-limits``: a tenant's admission overrides (added to the ``tenant`` group)."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

_LIMITS = ("rate_limit_per_min", "in_flight_cap", "idempotency_ttl_s")


@click.command("set-limits")
@click.argument("tenant_id")
@click.option("--rate-limit-per-min", type=click.IntRange(min=1), default=None,
              help="Jobs admitted in any 60 s window.")
@click.option("--in-flight-cap", type=click.IntRange(min=1), default=None,
              help="Submitted-but-unconfirmed jobs allowed at once.")
@click.option("--idempotency-ttl-s", type=click.IntRange(min=1), default=None,
              help="Seconds a token stays taken after its submission.")
@click.option("--default", "reset", multiple=True, type=click.Choice(_LIMITS),
              help="Remove this override (back to the default); repeatable.")
def set_limits_command(tenant_id: str, rate_limit_per_min: int | None, in_flight_cap: int | None,
                       idempotency_ttl_s: int | None, reset: tuple[str, ...]) -> None:
    """Set TENANT_ID's admission overrides and print its limits as they now are.

    Other submitting processes apply the change within Settings.admission_limits_cache_s.
    """
    from imposition.admission.limits import require_registered, set_limits

    if not reset and rate_limit_per_min is None and in_flight_cap is None and idempotency_ttl_s is None:
        raise click.UsageError("give at least one limit or --default NAME")
    require_registered(tenant_id)  # UnknownTenant: one refusal line, exit 2 (ServiceGroup)
    limits = set_limits(tenant_id, rate_limit_per_min=rate_limit_per_min, in_flight_cap=in_flight_cap,
                        idempotency_ttl_s=idempotency_ttl_s, reset=reset)
    click.echo(json.dumps({"tenant_id": tenant_id, **asdict(limits)}, indent=2, sort_keys=True))
