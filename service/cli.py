"""``imposition``: the operator's and integrator's command line.

Commands: ``provision``, ``submit``, ``impose`` (the engine alone), ``job show``, ``tenant show``,
``tenant set-cap``, ``tenant set-limits`` (admission), ``tenant set-webhook`` (webhooks), ``audit``
(leases), ``status`` and ``capacity-report`` (observability). Commands owned by other packages are
named in :data:`LAZY_COMMANDS` and imported only when run (click's "lazily loading subcommands"
pattern), so ``imposition impose`` does not import the service stack.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import click


class LazyGroup(click.Group):
    """A click group whose extra subcommands are ``"module:attribute"`` paths, imported when used."""

    def __init__(self, *args, lazy_subcommands: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = lazy_subcommands or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            module, attribute = self.lazy_subcommands[cmd_name].split(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)


#: Subcommands defined by other packages: group name → {command name → "module:attribute"}.
LAZY_COMMANDS = {
    "imposition": {
        "impose": "imposition.cli:impose_command",
        "audit": "leases.cli:audit_command",
        "status": "observability.status:status_command",
        "capacity-report": "observability.capacity:capacity_report_command",
    },
    "tenant": {
        "set-limits": "admission.cli:set_limits_command",
        "set-webhook": "webhooks.cli:set_webhook_command",
    },
}


@click.group(cls=LazyGroup, lazy_subcommands=LAZY_COMMANDS["imposition"])
def main() -> None:
    """Fair, multi-tenant PDF imposition service."""


@main.command()
def provision() -> None:
    """Create (or converge) queues with dead-letter queues, tables and bucket. Idempotent."""
    from service.provision import provision as do_provision

    report = do_provision()
    for kind, items in (("queue", report.queues), ("table", report.tables), ("bucket", report.bucket)):
        for name, state in items.items():
            click.echo(f"{kind:6} {name:32} {state}")


@main.command()
@click.option("--tenant", "tenant_id", required=True, help="Canonical tenant id.")
@click.option("--token", required=True, help="Idempotency token of this job (your own, unique per job).")
@click.option("--layout", "layout_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Layout specification (JSON file).")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None, help="Attempt budget (default from settings).")
@click.option("--on-duplicate", type=click.Choice(["raise", "return"]), default="raise", show_default=True,
              help="A token already submitted: refuse (exit 2), or print the job id that holds it.")
@click.argument("input_pdf", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def submit(tenant_id: str, token: str, layout_path: Path, max_attempts: int | None, on_duplicate: str,
           input_pdf: Path) -> None:
    """Upload INPUT_PDF under the tenant's prefix, submit it, and print the job id.

    Exit status 2: refused (tenancy, layout, admission: duplicate, rate limit, in-flight cap);
    3: admission unavailable (Redis unreachable; nothing was published).
    """
    from admission import AdmissionRefused, AdmissionUnavailable
    from tasks.submission import submit as do_submit

    try:
        layout = json.loads(layout_path.read_text())
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{layout_path}: not JSON ({exc})", param_hint="--layout") from exc
    try:
        job_id = do_submit(input_pdf, tenant_id=tenant_id, token=token, layout=layout, max_attempts=max_attempts,
                           on_duplicate=on_duplicate)
    except (ValueError, LookupError, AdmissionRefused) as exc:  # typed refusals: tenancy, layout, admission
        click.echo(f"refused: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)
    except AdmissionUnavailable as exc:
        click.echo(f"unavailable: {exc}", err=True)
        sys.exit(3)
    click.echo(job_id)


@main.group()
def job() -> None:
    """Inspect jobs."""


@job.command("show")
@click.argument("job_id")
def job_show(job_id: str) -> None:
    """Print a job item as JSON."""
    from pynamodb.exceptions import DoesNotExist

    from leases.models import JobItem

    try:
        item = JobItem.get(job_id, consistent_read=True)
    except DoesNotExist:
        click.echo(f"no job {job_id!r}", err=True)
        sys.exit(1)
    click.echo(json.dumps(item.to_simple_dict(), indent=2, sort_keys=True, default=str))


@main.group(cls=LazyGroup, lazy_subcommands=LAZY_COMMANDS["tenant"])
def tenant() -> None:
    """Tenant tiers and state."""


@tenant.command("show")
@click.argument("tenant_id")
def tenant_show(tenant_id: str) -> None:
    """Print a tenant's cap (and whether it is an override), in-flight count and live leases."""
    from leases.tenants import describe_tenant

    click.echo(json.dumps(describe_tenant(tenant_id), indent=2, sort_keys=True))


@tenant.command("set-cap")
@click.argument("tenant_id")
@click.argument("cap", required=False, type=click.IntRange(min=0))
@click.option("--default", "use_default", is_flag=True, help="Remove the override (back to the default cap).")
def tenant_set_cap(tenant_id: str, cap: int | None, use_default: bool) -> None:
    """Set TENANT_ID's cap (tier override); applies to the next lease, no restart needed.

    Lowering a cap below the tenant's current in-flight count stops nothing that runs; the tenant
    is admitted again once its in-flight count drops below the new cap.
    """
    from leases.tenants import set_cap

    if (cap is None) == (not use_default):
        raise click.UsageError("give either CAP or --default")
    set_cap(tenant_id, None if use_default else cap)
    from leases.tenants import describe_tenant

    click.echo(json.dumps(describe_tenant(tenant_id), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
