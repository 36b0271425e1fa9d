"""``imposition impose``: run an engine alone, without the cluster.

    imposition impose input.pdf --layout layout.json -o plate.pdf [--engine pikepdf|pdftoolbox] [--preview DIR]

Prints one line: the plate file, sides, sheets, pages in, blanks, time and engine; then one line
``warning <code>: <message>`` per departure from what the layout asked (exit status 0: the plate was
written; a layout with ``"on_warning": "fail"`` makes the first one a failure). Exit status 2 for
a bad request (an unreadable layout file, a layout that breaks the specification: the message names
the field, the value and the limit), as ``imposition submit`` refuses it; exit status 1 with
``<code>: <message>`` when the job itself fails with a typed error (a bad PDF, a page that does not
fit, a limit), or when the plate file cannot be written (its folder must exist and be a folder:
none is created). ``"slug": true`` prints the slug with ``-`` for a job or tenant not given by
``--job-id`` / ``--tenant-id``, and says so on stderr. ``--preview DIR`` (an existing folder) also
writes a PNG of each side there, ``preview-<n>.png`` (one line each; a preview that fails is the
warning ``preview_failed``, exit status 0: the plate is written). The pikepdf engine also writes the
plan's CIP4 JDF Layout beside the plate (``plate.jdf`` for ``-o plate.pdf``; line ``jdf <path>``), for
a shop's workflow system (:mod:`imposition.engine.jdf`). Also runs as ``python -m imposition.engine.cli``.

Start-up: the engine's child process is started first (:func:`imposition.engine.isolation.prestart`), so its
interpreter and pikepdf load while this process reads its settings and validates the layout; the
command's own imports (pydantic, the settings, the engines) come after it. ``--no-prestart`` starts
the child only when the engine runs (one start after the other, as before). The process ends without
the interpreter's last garbage collection (:func:`skip_exit_collection`).
"""

from __future__ import annotations

import atexit
import gc
import os
from datetime import datetime, timezone
from pathlib import Path

import click

from .errors import ImpositionError, InvalidLayout
from .job import SlugInfo


def skip_exit_collection() -> None:
    """For a process's entry point only (it ends after the command): freeze every object at exit
    (``gc.freeze``), so the interpreter's last garbage collection has nothing to walk. That pass
    over what pydantic, the settings and click built costs ≈ 40 ms of CPU, a sixth of a small
    ``impose``; nothing of ours needs it (the commands close their files and children themselves)."""
    atexit.register(gc.freeze)


def skip_pydantic_plugin_scan() -> None:
    """For ``impose`` only, before pydantic builds its first model: no pydantic plugins
    (``PYDANTIC_DISABLE_PLUGINS=__all__`` unless the environment sets it). pydantic looks its plugins
    up in every installed distribution's entry points (≈ 8 ms of CPU over this service's ≈ 120
    distributions); none of them is a pydantic plugin, and the command uses none."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def check_output_path(path: Path, *, what: str) -> None:
    """Refuse to write ``what`` (``"the plate file"``) to ``path`` unless its folder exists and is a
    folder, and ``path`` itself is not a folder: :class:`click.ClickException` (exit status 1) naming
    the path and the reason. Nothing is created."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise click.ClickException(f"cannot write {what} {path}: the folder {parent} does not exist")
    if not parent.is_dir():
        raise click.ClickException(f"cannot write {what} {path}: {parent} is not a folder")
    if path.is_dir():
        raise click.ClickException(f"cannot write {what} {path}: it is a folder")


def layout_text(value: str) -> str:
    """The JSON text of a ``--layout`` option: the value itself when it starts with ``{``, else the
    contents of the file it names.

    Raises:
        click.BadParameter: the file cannot be read (exit status 2).
    """
    if value.lstrip().startswith("{"):
        return value
    try:
        return Path(value).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read layout file {value}: {exc}", param_hint="--layout") from None


@click.command("impose")
@click.argument("input_pdf", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--layout", "layout", required=True,
              help="Layout specification: a JSON file, or JSON text starting with '{'.")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Plate file to write; the pikepdf engine writes its JDF Layout beside it (<plate>.jdf).")
@click.option("--engine", type=click.Choice(["pikepdf", "pdftoolbox"]), default=None,
              help="Engine (default: settings.engine, IMPOSITION_ENGINE).")
@click.option("--time-limit-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Wall-clock limit in seconds (default: settings.engine_time_limit_s).")
@click.option("--job-id", default=None, help="Job id for the slug line.")
@click.option("--tenant-id", default=None, help="Tenant id for the slug line.")
@click.option("--preview", "preview_dir", default=None,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Existing folder for a PNG preview of each side (preview-<n>.png).")
@click.option("--prestart/--no-prestart", default=True,
              help="Start the engine's child before this command's own start-up (default), or when it runs.")
def impose_command(
    input_pdf: Path, layout: str, output: Path, engine: str | None, time_limit_s: float | None,
    job_id: str | None, tenant_id: str | None, preview_dir: Path | None, prestart: bool,
) -> None:
    """Impose INPUT_PDF per the layout and write the plate file."""
    from . import isolation

    if prestart:
        isolation.prestart()  # loads while the imports below run
    skip_pydantic_plugin_scan()
    try:
        _impose(input_pdf, layout, output, engine, time_limit_s, job_id, tenant_id, preview_dir)
    finally:
        isolation.drop_spare()  # a child the command did not get to use


def _impose(input_pdf: Path, layout: str, output: Path, engine: str | None, time_limit_s: float | None,
            job_id: str | None, tenant_id: str | None, preview_dir: Path | None) -> None:
    from imposition.common.settings import get_settings

    from .backends import get_engine
    from .spec import parse_layout

    settings = get_settings()
    if engine is not None:
        settings = settings.model_copy(update={"engine": engine})
    try:
        spec = parse_layout(layout_text(layout))
    except InvalidLayout as exc:
        raise click.BadParameter(f"{exc.code}: {exc}", param_hint="--layout") from None
    check_output_path(output, what="the plate file")  # exit 1; no folder is ever created
    if getattr(spec, "slug", False) and (job_id is None or tenant_id is None):
        click.echo("note: slug: true without --job-id and --tenant-id: the slug line reads "
                   f"'job {job_id or '-'} | tenant {tenant_id or '-'}'", err=True)
    slug = SlugInfo(job_id or "-", tenant_id or "-", datetime.now(timezone.utc).date().isoformat())
    try:
        report = get_engine(settings).impose(input_pdf, spec, output, slug=slug, time_limit_s=time_limit_s,
                                             preview_dir=preview_dir)
    except ImpositionError as exc:
        raise click.ClickException(f"{exc.code}: {exc}") from None
    except OSError as exc:  # the output cannot be written (or the input vanished meanwhile)
        writing = str(exc.filename or "").endswith(".partial") or str(exc.filename or "") == str(output)
        what = f"cannot write the plate file {output}" if writing else f"cannot read {exc.filename}"
        raise click.ClickException(f"{what}: {exc.strerror or exc}") from None
    click.echo(
        f"{output}: {_count(report.sides, 'side')} on {_count(report.sheets, 'sheet')} from "
        f"{_count(report.pages_in, 'page')} "
        f"({report.blank_pages} blank) in {report.duration_s:.2f} s with {report.engine}"
        + (f", {_count(len(report.warnings), 'warning')}" if report.warnings else "")
    )
    for preview in report.previews:
        click.echo(f"preview {preview}")
    if report.jdf is not None:
        click.echo(f"jdf {report.jdf}")
    for warning in report.warnings:
        click.echo(f"warning {warning.code}: {warning.message}")


def _count(n: int, noun: str) -> str:
    """``"1 sheet"``, ``"2 sheets"``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


if __name__ == "__main__":
    skip_exit_collection()
    impose_command()
