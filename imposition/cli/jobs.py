"""Jobs for operators: ``imposition jobs list``, ``job show``, ``job download``, ``job cancel``,
``job retry``.

Reading: ``jobs list --tenant T`` queries the index ``by-tenant`` (:class:`leases.models.JobsByTenantIndex`,
newest first, ``--since`` as its sort-key condition, ``--status`` as a filter), page by page
(``Settings.jobs_list_page_size``), and stops after ``--limit`` rows: it never reads another
tenant's items and never scans the jobs table. Without ``--tenant`` it reads the tenants table (one
item per tenant) and queries each tenant the same way, merged newest first.

Writing: ``job cancel`` and ``job retry`` call :mod:`tasks.jobs`.

Times shown: every ``*_at`` value (epoch s) also as ``*_at_utc`` (ISO 8601, UTC), and the
durations ``waited_s`` (start − submission of its latest attempt) and ``ran_s`` (finish − start), in
seconds.
"""

from __future__ import annotations

import heapq
import itertools
import json
import operator
import logging
import re
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from functools import reduce
from pathlib import Path
from typing import Any

import click

from imposition.cli.failures import CommandFailed, Refused, ServiceUnavailable, reason
from imposition.cli.main import TENANT_ID
from imposition.engine.cli import check_output_path

log = logging.getLogger(__name__)

STATUSES = ("queued", "waiting", "running", "succeeded", "failed")
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def utc(t: float | None) -> str | None:
    """``t`` (epoch s) as ISO 8601 in UTC with milliseconds (``2026-01-31T09:15:02.455Z``), or None."""
    if t is None:
        return None
    return datetime.fromtimestamp(float(t), timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(max(0.0, float(end) - float(start)), 3)


def job_view(job) -> dict[str, Any]:
    """A job item for people and machines: every attribute (numbers as numbers, ``layout``,
    ``warnings`` and ``history`` as JSON values, not text; ``infra_lost_attempts`` and
    ``lost_attempts`` as lists), each ``*_at`` also as ``*_at_utc``, and
    ``waited_s``, ``ran_s``."""
    shown: dict[str, Any] = {}
    for name in type(job).get_attributes():
        value = getattr(job, name)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 and not name.endswith("_at"):
            value = int(value)
        if isinstance(value, set):  # infra_lost_attempts
            value = sorted(int(v) for v in value)
        if isinstance(value, list):  # lost_attempts: PynamoDB maps
            value = [v.as_dict() if hasattr(v, "as_dict") else v for v in value]
        shown[name] = value
        if name.endswith("_at"):
            shown[f"{name}_utc"] = utc(value)
    shown["waited_s"] = _seconds(job.submitted_at, job.started_at)
    shown["ran_s"] = _seconds(job.started_at, job.finished_at)
    return shown


class DurationParam(click.ParamType):
    """A duration such as ``90s``, ``30m``, ``2h``, ``7d`` (a bare number is seconds); in seconds."""

    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return float(value)
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if match is None:
            self.fail(f"{value!r} is not a duration (a number and s, m, h or d: 90s, 30m, 2h, 7d)", param, ctx)
        return float(match.group(1)) * _UNITS_S[match.group(2) or "s"]


def tenant_jobs(tenant_id: str, *, status: str | None = None, since_at: float | None = None,
                token: str | None = None, file_name: str | None = None) -> Iterator:
    """``tenant_id``'s job items, newest submission first, through the ``by-tenant`` index
    (paginated, ``Settings.jobs_list_page_size`` items per page); ``since_at`` (epoch s) bounds
    the submission time from below; ``status``, ``token`` (the idempotency token) and ``file_name``
    (as submitted) filter: DynamoDB applies a filter after reading, so a filtered listing reads the
    tenant's partition back to ``since_at`` (give ``--since`` on a long history)."""
    from leases.models import JobItem
    from imposition.common.settings import get_settings

    filters = []
    if status is not None:
        filters.append(JobItem.status == status)
    if token is not None:
        filters.append(JobItem.token == token)
    if file_name is not None:
        filters.append(JobItem.file_name == file_name)
    return JobItem.by_tenant.query(
        tenant_id,
        range_key_condition=None if since_at is None else JobItem.submitted_at >= since_at,
        filter_condition=reduce(operator.and_, filters) if filters else None,
        scan_index_forward=False,
        page_size=get_settings().jobs_list_page_size,
    )


def list_jobs(*, tenant_id: str | None = None, status: str | None = None, since_at: float | None = None,
              limit: int | None = None, token: str | None = None, file_name: str | None = None) -> list:
    """Job items, newest submission first, at most ``limit`` (default ``Settings.jobs_list_limit``).

    With ``tenant_id``: that tenant's index partition only. Without: every tenant of the tenants
    table, each queried the same way, merged (reads stop once ``limit`` rows are out)."""
    from leases.models import TenantItem
    from imposition.common.settings import get_settings

    limit = get_settings().jobs_list_limit if limit is None else limit
    tenants = [tenant_id] if tenant_id is not None else sorted(t.tenant_id for t in TenantItem.scan())
    streams = [tenant_jobs(t, status=status, since_at=since_at, token=token, file_name=file_name) for t in tenants]
    merged = heapq.merge(*streams, key=lambda job: -float(job.submitted_at))
    return list(itertools.islice(merged, limit))


def _row(job) -> list[str]:
    view = job_view(job)

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    return [job.job_id, job.tenant_id, job.status, utc(job.submitted_at) or "-", seconds(view["waited_s"]),
            seconds(view["ran_s"]), "-" if job.sheets is None else str(int(job.sheets)), job.error_code or "-",
            job.file_name or "-"]


def table(header: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    return "\n".join("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip()
                     for line in [header, *rows])


@click.group("jobs")
def jobs_group() -> None:
    """List jobs."""


@jobs_group.command("list")
@click.option("--tenant", "tenant_id", type=TENANT_ID, default=None, help="Only this tenant (its index partition).")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only jobs in this status.")
@click.option("--since", "since_s", type=DurationParam(), default=None,
              help="Only jobs submitted in this last duration (90s, 30m, 2h, 7d).")
@click.option("--token", default=None, help="Only the job(s) submitted with this idempotency token (e.g. an order number).")
@click.option("--file", "file_name", default=None, help="Only jobs whose input file had this name when submitted.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Most rows (default: Settings.jobs_list_limit, 50).")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of job views (raw and UTC times).")
def jobs_list(tenant_id: str | None, status: str | None, since_s: float | None, token: str | None,
              file_name: str | None, limit: int | None, as_json: bool) -> None:
    """Jobs, newest first: job, tenant, status, submitted (UTC), waited and ran (s), sheets, error
    code, file name. ``--token`` and ``--file`` find a job by what a shop knows of it.

    Exit status 2: an unknown tenant (``Error: unknown_tenant: ...``), a malformed option."""
    from imposition.cli.main import require_known_tenant

    if tenant_id is not None:
        require_known_tenant(tenant_id)
    since_at = None if since_s is None else time.time() - since_s
    jobs = list_jobs(tenant_id=tenant_id, status=status, since_at=since_at, limit=limit, token=token,
                     file_name=file_name)
    if as_json:
        click.echo(json.dumps([job_view(job) for job in jobs], indent=2, sort_keys=True, default=str))
        return
    header = ["job", "tenant", "status", "submitted", "waited_s", "ran_s", "sheets", "error", "file"]
    click.echo(table(header, [_row(job) for job in jobs]) if jobs else
               "no jobs " + searched(tenant_id=tenant_id, status=status, since_s=since_s, token=token,
                                     file_name=file_name))


def searched(*, tenant_id: str | None, status: str | None, since_s: float | None, token: str | None,
             file_name: str | None) -> str:
    """What an empty ``jobs list`` looked for, in words: ``of tenant acme with token 'x', submitted
    in the last 2h``; a file name without an extension gets the hint that names match exactly."""
    from leases.models import TenantItem

    if tenant_id is not None:
        parts = [f"of tenant {tenant_id}"]
    else:
        tenants = sorted(t.tenant_id for t in TenantItem.scan(attributes_to_get=["tenant_id"]))
        parts = [f"of any of the {len(tenants)} tenants ({', '.join(tenants[:8])}{', …' if len(tenants) > 8 else ''})"
                 if tenants else "(no tenant is registered)"]
    if status is not None:
        parts.append(f"in status {status}")
    if token is not None:
        parts.append(f"with token {token!r}")
    if file_name is not None:
        parts.append(f"with file name {file_name!r}" + ("" if "." in file_name else
                     " (names match exactly as submitted, extension included: "
                     f"{file_name + '.pdf'!r}?)"))
    parts.append("submitted at any time" if since_s is None else f"submitted in the last {_duration(since_s)}")
    return ", ".join(parts)


def _duration(seconds: float) -> str:
    """``90s``, ``30m``, ``2h``, ``7d``: ``seconds`` in the largest unit that divides it, as --since takes it."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def job_by_ref(job_ref: str, *, tenant_id: str | None = None):
    """The job named by ``job_ref``, its id or the idempotency token it was submitted with
    (:func:`find_job`).

    Raises:
        CommandFailed: no such job (exit status 1).
        click.UsageError: the token names several jobs, or ``job_ref`` is empty.
    """
    if not job_ref.strip():
        raise click.BadParameter("must be a job id or an idempotency token, not empty", param_hint="JOB_ID_OR_TOKEN")
    job = find_job(job_ref, tenant_id=tenant_id)
    if job is None:
        raise CommandFailed(f"no job with id or token {job_ref!r}")
    return job


def find_job(job_id_or_token: str, *, tenant_id: str | None = None):
    """The job whose id, else whose idempotency token, is ``job_id_or_token`` (a token within
    ``tenant_id`` if given, else within every tenant); None if none.

    Raises:
        click.UsageError: the token names more than one job (two tenants, or one reused after its
            idempotency TTL): their ids and tenants named, to pick one.
    """
    from pynamodb.exceptions import DoesNotExist

    from leases.models import JobItem
    from imposition.common.tenancy import TenancyError, validate_job_id

    try:
        return JobItem.get(validate_job_id(job_id_or_token), consistent_read=True)
    except (TenancyError, DoesNotExist):
        pass
    found = list_jobs(tenant_id=tenant_id, token=job_id_or_token, limit=10)
    if len(found) > 1:
        raise click.UsageError(f"token {job_id_or_token!r} names {len(found)} jobs ("
                               + ", ".join(f"{j.job_id} of {j.tenant_id}" for j in found)
                               + "): give the job id, or --tenant")
    return found[0] if found else None


@click.command("show")
@click.argument("job_ref", metavar="JOB_ID_OR_TOKEN")
@click.option("--tenant", "tenant_id", type=TENANT_ID, default=None,
              help="Look a token up in this tenant only.")
@click.option("--json", "as_json", is_flag=True, help="Accepted for symmetry: the output is JSON anyway.")
def job_show(job_ref: str, tenant_id: str | None, as_json: bool) -> None:
    """Print a job, named by its id or by the idempotency token it was submitted with, as JSON:
    every attribute (``layout``, ``warnings`` ``[{"code", "message"}]`` and ``history`` as JSON
    values), each time also as ``<name>_utc`` (ISO 8601), ``waited_s``, ``ran_s``.

    Exit status 1: no such job; 2: an unknown tenant, a token that names several jobs."""
    from imposition.cli.main import require_known_tenant

    if tenant_id is not None:
        require_known_tenant(tenant_id)
    job = job_by_ref(job_ref, tenant_id=tenant_id)
    click.echo(json.dumps(job_view(job), indent=2, sort_keys=True, default=str))


#: Where ``job download`` writes without ``-o``: ``out/<tenant>/<job id>.pdf`` under the current
#: folder, as ``make run`` writes its plates (the folders are created).
DOWNLOAD_DIR = Path("out")

_JOB_REF = click.argument("job_ref", metavar="JOB_ID_OR_TOKEN")


@click.command("download")
@_JOB_REF
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File to write, in an existing folder (default: out/<tenant>/<job id>.pdf, folders created).")
@click.option("--previews", "previews_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Existing folder for the plate's PNG previews (<job id>-preview-<n>.png).")
@click.option("--jdf", "with_jdf", is_flag=True, help="Also the plate's JDF Layout, beside it (<plate>.jdf).")
def job_download(job_ref: str, output: Path | None, previews_dir: Path | None, with_jdf: bool) -> None:
    """Download the plate file of a succeeded job (named by its id or its token), with
    ``--previews`` its PNG previews (one per side, as ``job show`` names them in
    ``preview_keys``), with ``--jdf`` its JDF Layout (``jdf_key``). Each file written is named with
    its full path.

    Exit status 1: no such job, the job has no plate (not succeeded), the plate or a preview object
    is missing, ``--previews`` of a job that has none, ``--jdf`` of a job that has none, or the file
    cannot be written (an ``-o`` folder that does not exist or is not a folder)."""
    from imposition.engine.backends.base import jdf_beside
    from tasks import storage

    job = job_by_ref(job_ref)
    job_id = job.job_id
    if job.status != "succeeded" or not job.output_key:
        raise CommandFailed(f"job {job_id} has no plate: it is {job.status}"
                            + (f" ({job.error_code})" if job.error_code else ""))
    preview_keys = list(job.preview_keys or [])
    if previews_dir is not None and not preview_keys:
        warned = [w["code"] for w in job.warnings or [] if w.get("code") == "preview_failed"]
        raise CommandFailed(f"job {job_id} has no previews" + (" (preview_failed: see job show)" if warned else ""))
    if with_jdf and not job.jdf_key:
        raise CommandFailed(f"job {job_id} has no JDF Layout (its engine writes none)")
    if output is None:
        output = DOWNLOAD_DIR / job.tenant_id / f"{job_id}.pdf"
        output.parent.mkdir(parents=True, exist_ok=True)
    check_output_path(output, what="the plate file")
    downloads = [(job.output_key, output, "plate")]
    if with_jdf:
        downloads.append((job.jdf_key, jdf_beside(output), "JDF Layout"))
    if previews_dir is not None:
        downloads += [(key, previews_dir / f"{job_id}-{key.rsplit('/', 1)[-1]}", "preview") for key in preview_keys]
    for key, path, what in downloads:
        try:
            storage.download_object(key, path)
        except storage.StorageError as exc:
            raise CommandFailed(str(exc)) from exc
        click.echo(f"wrote the {what} of job {job_id} ({job.tenant_id}) to {path.resolve()} "
                   f"({path.stat().st_size} bytes)")


@click.command("cancel")
@_JOB_REF
def job_cancel(job_ref: str) -> None:
    """Cancel a queued or waiting job (named by its id or its token): it ends failed with error code
    ``cancelled``, its tenant's counters and admission in-flight count go down, and its tenant's
    webhook is sent.

    Exit status 1: no such job; 2: the job is running or finished (nothing changed)."""
    from pynamodb.exceptions import DoesNotExist

    from leases.errors import WrongJobStatus
    from tasks.jobs import cancel

    job_id = job_by_ref(job_ref).job_id
    try:
        job = cancel(job_id)
    except DoesNotExist:  # gone meanwhile (its retention ended)
        raise CommandFailed(f"no job with id {job_id!r}") from None
    except WrongJobStatus as exc:
        raise Refused(reason(exc)) from exc
    click.echo(f"cancelled job {job_id} of {job.tenant_id}")


@click.command("retry")
@_JOB_REF
@click.option("--max-attempts", type=click.IntRange(min=1), default=None,
              help="New attempt budget, up to Settings.max_attempts_limit (default: Settings.max_attempts).")
def job_retry(job_ref: str, max_attempts: int | None) -> None:
    """Run a failed job (named by its id or its token) again: same job id, a new attempt budget,
    the failed run kept in its ``history``; queued and published if its tenant has room, else waiting.

    Admission applies as to a submission: the tenant's rate limit and in-flight cap.

    Exit status 1: no such job; 2: the job is not failed (or was never submitted), the budget is
    out of range, or admission refused it (rate limit, in-flight cap: the typed reason); 3: Redis
    unreachable."""
    from pynamodb.exceptions import DoesNotExist

    from imposition import admission

    from leases.errors import WrongJobStatus
    from tasks.jobs import retry

    job_id = job_by_ref(job_ref).job_id
    try:
        outcome = retry(job_id, max_attempts=max_attempts)
    except DoesNotExist:  # gone meanwhile (its retention ended)
        raise CommandFailed(f"no job with id {job_id!r}") from None
    except (WrongJobStatus, ValueError, admission.AdmissionRefused) as exc:
        raise Refused(reason(exc)) from exc
    except admission.AdmissionUnavailable as exc:
        raise ServiceUnavailable(reason(exc)) from exc
    click.echo(f"retrying job {job_id} of {outcome.job.tenant_id}: {outcome.status}")
