"""``imposition``: the operator's and integrator's command line.

Commands: ``provision``, ``render-template``, ``deploy`` (:mod:`imposition.cli.stack`), ``submit``,
``impose`` (the engine alone), ``jobs list``, ``job show``, ``job download``, ``job cancel``, ``job retry`` (:mod:`imposition.cli.jobs`), ``dlq list|redrive|purge``
(:mod:`imposition.cli.dlq`), ``tenant create``, ``tenant list``, ``tenant show`` (:mod:`imposition.cli.tenants`), ``tenant set-cap``,
``tenant set-limits`` (admission), ``tenant set-webhook`` (webhooks), ``audit`` (leases), ``status``
and ``capacity-report`` (observability; its ``--what-if`` and ``simulate``: capacity). Commands owned by other packages are
named in :data:`LAZY_COMMANDS` and imported only when run (click's "lazily loading subcommands"
pattern), so ``imposition impose`` does not import the service stack.

Exit status of every command (docs/operations.md, "Exit codes", the table a test runs): 0 ok; 1
the command's own failure (no such job, drift left by ``audit``); 2 a refused or malformed request
(an unknown tenant, ``unknown_tenant: ...`` in every command; a usage error; a refused submission);
3 a service the command needs is unreachable (AWS endpoint, Redis, missing AWS credentials) or
lacks a queue, table or bucket that ``imposition provision`` creates. Every failure is one line,
``Error: <what was wrong, the field, the limit>`` (:mod:`imposition.cli.failures`), never a traceback.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from imposition.cli.failures import (
    CommandFailed,
    ConfigurationError,
    Refused,
    ServiceUnavailable,
    UsageFirst,
    reason,
    usage_first,
    warn,
)
from imposition.engine.cli import layout_text, skip_exit_collection
from imposition.common.tenancy import TenancyError, shown_value, validate_job_id, validate_tenant_id

if TYPE_CHECKING:  # the click.Choice of --on-duplicate; tasks.submission itself is imported when run
    from tasks.submission import OnDuplicate


#: Modules of an optional extra (pyproject.toml) → the extra: a worker node installs neither.
OPTIONAL_MODULES = {"simpy": "capacity", "matplotlib": "capacity"}


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
            try:
                return getattr(importlib.import_module(module), attribute)
            except ModuleNotFoundError as exc:
                if exc.name not in OPTIONAL_MODULES:
                    raise
                return _needs_extra(cmd_name, exc.name)
        return super().get_command(ctx, cmd_name)


def _needs_extra(cmd_name: str, module: str) -> click.Command:
    """A stand-in for a command whose optional dependency is not installed: it says which extra to install."""
    hint = f"this command needs {module}: pip install 'fair-imposition[{OPTIONAL_MODULES[module]}]'"

    @click.command(cmd_name, help=f"(not installed) {hint}", context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        raise click.ClickException(hint)

    return command


class IdentifierParam(click.ParamType):
    """An identifier that ``validate`` (a :mod:`imposition.common.tenancy` validator) accepts; else a usage
    error (exit 2) naming the parameter, the value and the rule."""

    def __init__(self, name: str, validate) -> None:
        self.name = name
        self.validate = validate

    def convert(self, value, param, ctx):
        try:
            return self.validate(value)
        except TenancyError as exc:
            self.fail(str(exc), param, ctx)


TENANT_ID = IdentifierParam("tenant_id", validate_tenant_id)
JOB_ID = IdentifierParam("job_id", validate_job_id)


#: AWS error codes of a queue, table or bucket that does not exist (was never provisioned, or the
#: endpoint restarted empty): DynamoDB; SQS (query protocol, JSON protocol); S3.
NOT_PROVISIONED_CODES = frozenset({
    "ResourceNotFoundException",
    "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist",
    "NoSuchBucket",
})


def unreachable_service(exc: BaseException) -> str | None:
    """One line saying which service could not be used and what to check, if ``exc`` or an error
    it wraps (``__cause__``, PynamoDB's ``cause``, ``__context__``) is a connection failure, a
    timeout, missing AWS credentials or an AWS error naming a resource that does not exist
    (:data:`NOT_PROVISIONED_CODES`); else None (the error is something else: let it show)."""
    from botocore.exceptions import ClientError  # noqa: PLC0415 (error path only)
    from botocore.exceptions import ConnectionError as AwsConnectionError  # noqa: PLC0415 - error path only
    from botocore.exceptions import HTTPClientError, NoCredentialsError, PartialCredentialsError  # noqa: PLC0415 - error path only
    from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeout  # noqa: PLC0415 - error path only

    from imposition.common.settings import get_settings  # noqa: PLC0415 - error path only

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (NoCredentialsError, PartialCredentialsError)):
            return (f"AWS credentials missing or incomplete ({current}): set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
        if isinstance(current, (AwsConnectionError, HTTPClientError)):
            endpoint = current.kwargs.get("endpoint_url") or get_settings().aws_endpoint_url or "AWS"
            return (f"cannot reach the AWS endpoint {endpoint} ({type(current).__name__}): is the stack "
                    "running (`make run`)? check AWS_ENDPOINT_URL and the network, then retry")
        if isinstance(current, ClientError) and current.response.get("Error", {}).get("Code") in NOT_PROVISIONED_CODES:
            message = " ".join(str(current).split())  # PynamoDB's names the table
            return (f"not provisioned: {message}; run `imposition provision` (or check the "
                    "IMPOSITION_*_QUEUE, *_TABLE and IMPOSITION_BUCKET names), then retry")
        if isinstance(current, (RedisConnectionError, RedisTimeout)):
            return (f"cannot reach Redis ({current}): is Redis running? check IMPOSITION_REDIS_URL and "
                    "IMPOSITION_EVENTS_URL, then retry")
        current = current.__cause__ or getattr(current, "cause", None) or current.__context__
    return None


def settings_problem(exc: BaseException) -> str | None:
    """One line per invalid setting (``IMPOSITION_<FIELD>=<value>: <what is wrong> (<the field's
    description>)``) if ``exc`` is the validation error of :class:`imposition.common.settings.Settings`."""
    from pydantic import ValidationError

    from imposition.common.settings import Settings

    if not isinstance(exc, ValidationError) or exc.title != Settings.__name__:
        return None
    prefix = Settings.model_config.get("env_prefix", "")
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "?"
        info = Settings.model_fields.get(field)
        hint = f" ({info.description})" if info is not None and info.description else ""
        lines.append(f"{prefix}{field.upper()}={shown_value(error.get('input'))}: {error['msg']}{hint}")
    return "invalid configuration: " + "; ".join(lines)


def require_known_tenant(tenant_id: str) -> None:
    """For a command that reads a tenant (``tenant show``, ``jobs list --tenant``): refuse one that
    is not registered, whatever ``Settings.auto_register_tenants`` says (reading registers nothing).

    Raises:
        imposition.admission.UnknownTenant: not registered (shown by :class:`ServiceGroup` as
            ``Error: unknown_tenant: ...``, exit 2).
    """
    from imposition.admission.errors import UnknownTenant  # noqa: PLC0415 (imported when run)
    from imposition.admission.limits import forget_cached_limits, limits_for  # noqa: PLC0415

    forget_cached_limits(tenant_id)
    if not limits_for(tenant_id).registered:
        raise UnknownTenant(tenant_id)


class ServiceGroup(LazyGroup):
    """The top-level group: every command under it (lazy ones included) reports an unreachable
    service as :class:`ServiceUnavailable` (exit 3), an unknown tenant
    (:class:`imposition.admission.UnknownTenant`) as :class:`Refused` (one line, exit 2) and a
    malformed identifier (:class:`imposition.common.tenancy.TenancyError`) or an invalid setting
    (:class:`ConfigurationError`) as exit 2, instead of a traceback. Usage errors show their
    message first (:class:`UsageFirst`)."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise usage_first(exc) from exc

    def invoke(self, ctx: click.Context):
        from imposition.admission.errors import UnknownTenant  # noqa: PLC0415 (a module with no imports)

        try:
            return super().invoke(ctx)
        except TenancyError as exc:
            raise UsageFirst(str(exc)) from exc
        except UnknownTenant as exc:
            raise Refused(str(exc)) from exc
        except click.UsageError as exc:
            raise usage_first(exc) from exc
        except click.ClickException:
            raise
        except ModuleNotFoundError as exc:  # matplotlib, imported when the report is drawn
            if exc.name not in OPTIONAL_MODULES:
                raise
            raise click.ClickException(f"this command needs {exc.name}: pip install "
                                       f"'fair-imposition[{OPTIONAL_MODULES[exc.name]}]'") from exc
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            problem = settings_problem(exc)
            if problem is None:
                raise
            raise ConfigurationError(problem) from exc
        except Exception as exc:
            problem = unreachable_service(exc)
            if problem is None:
                raise
            raise ServiceUnavailable(problem) from exc


#: Subcommands defined by other packages: group name → {command name → "module:attribute"}.
LAZY_COMMANDS = {
    "imposition": {
        "impose": "imposition.engine.cli:impose_command",
        "jobs": "imposition.cli.jobs:jobs_group",
        "dlq": "imposition.cli.dlq:dlq_group",
        "audit": "imposition.cli.audit:audit_command",
        "status": "imposition.observability.status:status_command",
        "capacity-report": "imposition.capacity.cli:capacity_report_command",
        "simulate": "imposition.capacity.cli:simulate_command",
        "capacity-envelope": "imposition.capacity.envelope:capacity_envelope_command",
        "render-template": "imposition.cli.stack:render_template_command",
        "deploy": "imposition.cli.stack:deploy_command",
        "process": "imposition.cli.process:process_group",
    },
    "job": {
        "show": "imposition.cli.jobs:job_show",
        "download": "imposition.cli.jobs:job_download",
        "cancel": "imposition.cli.jobs:job_cancel",
        "retry": "imposition.cli.jobs:job_retry",
    },
    "tenant": {
        "create": "imposition.cli.tenants:tenant_create",
        "list": "imposition.cli.tenants:tenant_list",
        "show": "imposition.cli.tenants:tenant_show",
        "set-limits": "imposition.admission.cli:set_limits_command",
        "set-webhook": "imposition.webhooks.cli:set_webhook_command",
        "encrypt-webhook-secrets": "imposition.webhooks.cli:encrypt_secrets_command",
    },
}


@click.group(cls=ServiceGroup, lazy_subcommands=LAZY_COMMANDS["imposition"])
@click.version_option(package_name="fair-imposition", prog_name="imposition",
                      message="%(prog)s %(version)s")  # the installed distribution's version
def main() -> None:
    """Fair, multi-tenant PDF imposition service."""


@main.command()
def provision() -> None:
    """Apply the template's queues with dead-letter queues, tables and bucket (the local stack's path;
    on AWS: imposition deploy). Idempotent."""
    from imposition.cli.provision import provision as do_provision

    report = do_provision()
    for kind, items in (("queue", report.queues), ("table", report.tables), ("bucket", report.bucket),
                        ("key", report.keys)):
        for name, state in items.items():
            click.echo(f"{kind:6} {name:32} {state}")


@main.command()
@click.option("--tenant", "tenant_id", required=True, type=TENANT_ID, help="Canonical tenant id.")
@click.option("--token", required=True, help="Idempotency token of this job (your own, unique per job).")
@click.option("--layout", "layout_option", required=True,
              help="Layout specification: a JSON file, or JSON text starting with '{'.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None,
              help="Attempt budget, up to Settings.max_attempts_limit (default: Settings.max_attempts).")
@click.option("--on-duplicate", type=click.Choice(["raise", "return"]), default="raise", show_default=True,
              help="A token already submitted: refuse (exit 2), or print the job id that holds it.")
@click.option("--wait", "wait", is_flag=True,
              help="After printing the job id, wait until the job ends and say how (exit 1 if it failed).")
@click.option("--wait-timeout", "wait_timeout_s", type=click.FloatRange(min=0), default=600.0, show_default=True,
              help="Seconds --wait waits at most.")
@click.argument("input_pdf", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def submit(tenant_id: str, token: str, layout_option: str, max_attempts: int | None, on_duplicate: OnDuplicate,
           wait: bool, wait_timeout_s: float, input_pdf: Path) -> None:
    """Upload INPUT_PDF under the tenant's prefix, submit it, and print the job id. With --wait, then
    wait for the job's end and say it on stderr (its plate, or its typed error).

    Exit status 1 (--wait): the job failed, was cancelled, or had not ended in time; 2: refused
    (tenancy: a malformed or upper-case tenant id, an unknown tenant; layout; an input that is
    empty, not a PDF, damaged, encrypted, without pages or over max_input_bytes: nothing uploaded;
    admission: duplicate, rate limit, in-flight cap); 3: admission unavailable (Redis unreachable;
    nothing was published).
    """
    from imposition.admission import AdmissionRefused, AdmissionUnavailable, UnknownTenant
    from imposition.engine import ImpositionError
    from tasks.submission import submit as do_submit

    layout = layout_text(layout_option)  # JSON text: parse_layout reads and validates it
    try:  # submit() checks the file at the door (before admission and upload), naming it
        job_id = do_submit(input_pdf, tenant_id=tenant_id, token=token, layout=layout, max_attempts=max_attempts,
                           on_duplicate=on_duplicate)
    except UnknownTenant:  # ServiceGroup's one refusal line, as every command says it
        raise
    except (ValueError, LookupError, AdmissionRefused, ImpositionError) as exc:  # typed refusals
        raise Refused(reason(exc)) from exc
    except AdmissionUnavailable as exc:
        raise ServiceUnavailable(reason(exc)) from exc
    click.echo(job_id)
    if wait:
        _wait_for_job(job_id, wait_timeout_s)


def _wait_for_job(job_id: str, timeout_s: float) -> None:
    """Wait for ``job_id`` through its result (the jobs table) and say how it ended, on stderr.

    Raises:
        CommandFailed: it failed or was cancelled (its typed error), or it had not ended in time.
    """
    from celery.exceptions import TaskRevokedError, TimeoutError as ResultTimeout  # noqa: PLC0415 (when run)

    from imposition import client  # noqa: PLC0415
    from imposition.engine.errors import ImpositionError  # noqa: PLC0415

    result = client.result(job_id)
    try:
        plate = result.get(timeout=timeout_s, interval=0.5)
    except ResultTimeout:
        raise CommandFailed(f"job {job_id} had not ended after --wait-timeout={timeout_s:g} s: it is "
                            f"{(result.info or {}).get('status', 'pending')}; `imposition job show {job_id}`") from None
    except (ImpositionError, TaskRevokedError, client.JobFailed, client.SubmissionRequired) as exc:  # the job's own
        raise CommandFailed(f"job {job_id} failed: {reason(exc)}") from exc
    click.echo(f"job {job_id} succeeded: {plate['sheets']} sheet(s), {plate['sides']} side(s); plate "
               f"{plate['plate_key']} (`imposition job download {job_id}`)", err=True)


@main.group(cls=LazyGroup, lazy_subcommands=LAZY_COMMANDS["job"])
def job() -> None:
    """Inspect, download, cancel and retry jobs."""


@main.group(cls=LazyGroup, lazy_subcommands=LAZY_COMMANDS["tenant"])
def tenant() -> None:
    """Tenant tiers and state."""


@tenant.command("set-cap", context_settings={"ignore_unknown_options": True})
@click.argument("tenant_id", type=TENANT_ID)
@click.argument("cap", required=False, type=click.IntRange(min=0))  # "-1" is CAP, not an option
@click.option("--default", "use_default", is_flag=True, help="Remove the override (back to the default cap).")
@click.option("--burst", "burst_cap", type=click.IntRange(min=0), default=None,
              help="Borrowing: leases the tenant may hold while the cluster has slots above its reserve "
                   "(from CAP to max_cap; equal to CAP, or absent: no borrowing).")
def tenant_set_cap(tenant_id: str, cap: int | None, use_default: bool, burst_cap: int | None) -> None:
    """Set TENANT_ID's cap (tier override); applies to the next lease, no restart needed.

    CAP is 0 to Settings.max_cap (1000 by default); 0 pauses the tenant until its cap is raised.
    Lowering a cap below the tenant's current in-flight count stops nothing that runs; the tenant
    is admitted again once its in-flight count drops below the new cap. Raising it wakes as many
    of the tenant's waiting jobs as the new room allows, at once. A cap (or burst) above the
    cluster's live slots is accepted with a warning naming them: the slots bind until nodes join.
    """
    from leases import waiting
    from leases.tenants import set_cap
    from leases import signals
    from tasks.messages import publish_job

    from imposition.admission.limits import require_registered

    if (cap is None) == (not use_default):
        raise click.UsageError("give either CAP or --default")
    require_registered(tenant_id)  # UnknownTenant: one refusal line, exit 2 (ServiceGroup)
    try:
        set_cap(tenant_id, None if use_default else cap, burst_cap=burst_cap)
    except ValueError as exc:  # the tenant id is valid already: the cap or burst is out of range
        raise click.BadParameter(str(exc), param_hint="--burst" if "burst_cap" in str(exc) else "CAP") from exc
    woken = waiting.wake(tenant_id, publish=publish_job, reason="cap_change",
                         on_woken=lambda job: signals.job_woken.send(sender=None, job=job, reason="cap_change"))
    if woken:
        click.echo(f"woke {len(woken)} waiting job(s) of {tenant_id}", err=True)
    _warn_above_live_slots(tenant_id, cap, burst_cap)
    from leases.tenants import describe_tenant

    click.echo(json.dumps(describe_tenant(tenant_id), indent=2, sort_keys=True))


def _warn_above_live_slots(tenant_id: str, cap: int | None, burst_cap: int | None) -> None:
    """Warn when a cap or burst just set exceeds the cluster's live slots (they bind first)."""
    from leases import nodes  # noqa: PLC0415 (imported when run)

    live = nodes.live_nodes()
    slots = nodes.slots_total(live)
    over = [f"{name} {value}" for name, value in (("cap", cap), ("burst", burst_cap)) if value is not None and value > slots]
    if over:
        where = (", ".join(f"{node} {n}" for node, n in sorted(live.items())) if live
                 else "no node registered: capacity_nodes × slots_per_node")
        warn(f"{' and '.join(over)} of {tenant_id} is above the cluster's {slots} live slots ({where}): "
             f"{tenant_id} holds at most {slots} leases until nodes join")


def run() -> None:
    """The ``imposition`` console script (pyproject.toml): :func:`main` in a process of its own, which
    ends without a last garbage collection (:func:`imposition.engine.cli.skip_exit_collection`)."""
    skip_exit_collection()
    main()


if __name__ == "__main__":
    run()
