"""``imposition audit``: the command-line face of :mod:`leases.audit` (registered by :mod:`imposition.cli.main`)."""

from __future__ import annotations

import sys

import click

from imposition.cli.main import TENANT_ID


@click.command("audit")
@click.option("--tenant", "tenant_ids", multiple=True, type=TENANT_ID,
              help="Audit only this tenant (repeatable; default: all; a tenant that is not registered: exit 2).")
@click.option("--repair", is_flag=True,
              help="Fix counter drift, orphan leases, stranded and lost jobs (safe while workers run).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def audit_command(tenant_ids: tuple[str, ...], repair: bool, as_json: bool) -> None:
    """Compare each tenant's in_flight with its live leases and job statuses, look for queued jobs
    no message could still bring; print the drift.

    Exit status 0: no drift (after repairs, with --repair); 1: drift remains; 2: a --tenant that is
    not a registered, canonical tenant id.
    """
    from imposition.cli.main import require_known_tenant
    from leases import audit
    from tasks.sweeper import visible_messages  # noqa: PLC0415 (the imposition queue's backlog)

    for tenant_id in tenant_ids:
        require_known_tenant(tenant_id)  # reading registers nothing: refused whatever auto-registration says

    if repair:
        from tasks.messages import publish_job  # noqa: PLC0415 (a stranded job is re-published)

        report = audit.repair(tenant_ids or None, publish=publish_job, backlog=visible_messages)
    else:
        report = audit.audit(tenant_ids or None, backlog=visible_messages)
    click.echo(report.to_json() if as_json else report.describe())
    sys.exit(0 if report.clean else 1)
