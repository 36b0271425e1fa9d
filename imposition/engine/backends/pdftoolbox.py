"""The licensed engine: callas pdfToolbox's command line, run as a limited subprocess.

Command (an argument list, never a shell string)::

    pdfToolbox [--licenseserver=<host[:port]> ... --timeout_licenseserver=<s>] <process plan> <input.pdf>
        --outputfile=<out> --setvariable=<key>:<value> ...

The executable, the process plan, site variables and the licence servers come from the settings
(``pdftoolbox_path``, ``pdftoolbox_process_plan``, ``pdftoolbox_variables``,
``pdftoolbox_licence_servers``, ``pdftoolbox_licence_wait_s``); the layout is passed as variables
(:func:`layout_variables`; every one is listed in docs/engine.md, "pdfToolbox") that the process
plan reads. Before the licence is spent, the input is inspected in the same limited child as the open
engine uses, so bad input fails with the same typed errors and the page limit holds. The native
binary runs under the same RLIMIT_AS and RLIMIT_CPU as the open engine's child
(:func:`imposition.engine.isolation.run_limited`).

Exit codes follow callas' table (pdfToolbox / pdfaPilot CLI, "Return codes"): below 100 the run
succeeded; 3 (hits of error severity) and 8 (error hits, a fixup failed) are typed departures
(:func:`departures_for_exit`: warnings, or the job's failure under ``on_warning: fail``); 100 and up are
typed errors (:func:`error_for_exit`, the table :data:`_EXIT_ERRORS`). A licence outage (100) and a bad
installation (101, 102, 104, 127) are :class:`~imposition.engine.errors.EngineUnavailable`: not the
job's failure, retried without charging an attempt; :func:`check_engine` is the node's check of both.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    DamagedPdf,
    EngineAborted,
    EngineConfigurationError,
    EngineCrashed,
    FixupFailed,
    ImpositionError,
    LicenceUnavailable,
    MemoryLimitExceeded,
    OutputNotSaved,
    PasswordRequired,
    PlateWarning,
    PreflightErrors,
    TimeLimitExceeded,
    departure_error,
    without_paths,
)
from ..folds import SECTIONS
from ..isolation import ChildExit, run_limited
from ..spec import LayoutSpec, PerfectBound, parse_layout
from .base import OUT_OF_MEMORY_SIGNS, Engine, EngineJob, Placed

if TYPE_CHECKING:
    from imposition.common.settings import Settings

#: Exit codes below this are success (callas: "All return codes below 100 indicate a successful operation").
SUCCESS_BELOW = 100
#: The trampoline's exit code when the executable cannot be run.
CANNOT_EXECUTE = 127
#: Exit code of an abnormal termination (SIGABRT), which callas names for out of memory.
ABNORMAL_TERMINATION = 134

#: Successful exit codes that are departures (callas: 3 "at least one hit with severity error, no
#: fixups executed"; 8 "at least one hit with severity error, fixups have been executed; fixup failed").
#: The others below 100 (0 no hit; 1, 2 hits of severity info or warning; 5, 6, 7 the same with fixups
#: executed) are plain success.
_EXIT_DEPARTURES: dict[int, tuple[type[PreflightErrors] | type[FixupFailed], str]] = {
    3: (PreflightErrors, "the process plan found hits of error severity"),
    8: (FixupFailed, "the process plan found hits of error severity and a fixup failed"),
}

#: Exit code → (error, meaning), from callas' table. Any other code of 100 or more, or a signal, is
#: :class:`EngineCrashed` (retried, charged). 104 is never the input's damage: the engine opened the
#: input in its own inspection just before, so a file pdfToolbox cannot open is its process plan's,
#: its runlist's or its work folder's (the node's installation).
_EXIT_ERRORS: dict[int, tuple[type[ImpositionError], str]] = {
    100: (LicenceUnavailable, "not serialized: no valid licence (none on this node, expired, or none from "
                              "the licence servers within pdftoolbox_licence_wait_s)"),
    101: (EngineConfigurationError, "command line parameter error"),
    102: (EngineConfigurationError, "command line syntax error (illegal command)"),
    103: (EngineCrashed, "unknown error (internal error)"),
    104: (EngineConfigurationError, "a file could not be opened (not the input, which the engine had just read)"),
    105: (PasswordRequired, "an encrypted PDF file could not be opened for writing"),
    106: (OutputNotSaved, "a file could not be saved"),
    107: (DamagedPdf, "the file is damaged and needs repair"),
    127: (EngineConfigurationError, "the executable could not be run"),
    130: (EngineAborted, "processing aborted (cancelled)"),
    132: (EngineCrashed, "illegal instruction"),
    ABNORMAL_TERMINATION: (EngineAborted, "abnormal termination (e.g. out of memory)"),
    136: (EngineCrashed, "floating point exception"),
}


def error_for_exit(returncode: int, log_tail: str) -> ImpositionError | None:
    """The typed error for a pdfToolbox exit status (:data:`_EXIT_ERRORS`), or None for success
    (0–99). An abnormal termination (134) whose log says it ran out of memory is
    :class:`MemoryLimitExceeded`: the binary runs under ``engine_memory_limit_bytes``."""
    if 0 <= returncode < SUCCESS_BELOW:
        return None
    detail = log_tail.strip()[-300:]
    if returncode == ABNORMAL_TERMINATION and any(sign in log_tail for sign in OUT_OF_MEMORY_SIGNS):
        return MemoryLimitExceeded(f"pdfToolbox exit code {returncode}: it ran out of its memory budget "
                                   f"(engine_memory_limit_bytes): {detail}")
    if returncode in _EXIT_ERRORS:
        cls, meaning = _EXIT_ERRORS[returncode]
        return cls(f"pdfToolbox exit code {returncode}: {meaning}: {detail}")
    how = f"was killed by signal {-returncode}" if returncode < 0 else f"ended with unknown exit code {returncode}"
    return EngineCrashed(f"pdfToolbox {how}: {detail}")


def departures_for_exit(returncode: int, log_tail: str) -> list[PlateWarning]:
    """The typed warnings a successful exit status carries (:data:`_EXIT_DEPARTURES`): ``preflight_errors``
    for 3, ``fixup_failed`` for 8; none for the others."""
    if returncode not in _EXIT_DEPARTURES:
        return []
    cls, meaning = _EXIT_DEPARTURES[returncode]
    return [PlateWarning(cls.code, f"pdfToolbox exit code {returncode}: {meaning}: {log_tail.strip()[-300:]}")]


def licence_options(settings: "Settings", wait_s: float | None = None) -> list[str]:
    """pdfToolbox's licence-server options: ``--licenseserver=<server>`` for each of
    ``settings.pdftoolbox_licence_servers`` (failover, in order) and ``--timeout_licenseserver=<s>``,
    the wait for a licence (``wait_s``, default ``settings.pdftoolbox_licence_wait_s``, whole seconds
    rounded up); nothing when no server is set (the node's local licence)."""
    servers = settings.pdftoolbox_licence_servers
    if not servers:
        return []
    wait_s = settings.pdftoolbox_licence_wait_s if wait_s is None else wait_s
    return [*(f"--licenseserver={server}" for server in servers), f"--timeout_licenseserver={math.ceil(wait_s)}"]


def _flatten(prefix: str, value: Any, into: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}_{key}", item, into)
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):  # gang: gang_0_page, …
        for index, item in enumerate(value):
            _flatten(f"{prefix}_{index}", item, into)
    elif isinstance(value, list):
        into[prefix] = ",".join(str(item) for item in value)
    elif isinstance(value, bool):
        into[prefix] = "true" if value else "false"
    elif value is not None:
        into[prefix] = str(value)


def layout_variables(spec: LayoutSpec) -> dict[str, str]:
    """The layout as pdfToolbox variables: every spec field (nested ones joined with ``_``, a list of
    objects by index: ``gang_0_page``, ``gang_0_copies``), plus
    ``sheet_width_pt`` and ``sheet_height_pt`` of the named sheet before orientation; a perfect-bound
    layout's ``signature_pages`` is always given (16, or its fold scheme's, when the layout has none),
    and a booklet's ``fold_scheme`` is the scheme its sheets fold (named, chosen for
    ``signature_pages``, or ``sections``), so that the process plan folds what our planner would."""
    variables: dict[str, str] = {}
    for key, value in spec.model_dump(mode="json").items():
        _flatten(key, value, variables)
    if isinstance(spec, PerfectBound):
        variables["signature_pages"] = str(spec.signature_pages_or_default())
    resolved = spec.resolved()
    if resolved.booklet:
        variables["fold_scheme"] = resolved.fold_scheme or SECTIONS
    width_pt, height_pt = spec.sheet_size_pt()
    variables["sheet_width_pt"] = f"{width_pt:.4f}"
    variables["sheet_height_pt"] = f"{height_pt:.4f}"
    return variables


def _executable_and_plan(settings: "Settings") -> tuple[str, str]:
    """The executable's path and the process plan's.

    Raises:
        EngineConfigurationError: the executable is not found or the process plan does not exist.
    """
    executable = shutil.which(settings.pdftoolbox_path)
    if executable is None:
        raise EngineConfigurationError(f"pdftoolbox_path={settings.pdftoolbox_path!r}: no such executable")
    plan = settings.pdftoolbox_process_plan
    if not plan or not Path(plan).is_file():
        raise EngineConfigurationError(f"pdftoolbox_process_plan={plan!r}: no such process plan file")
    return executable, plan


def build_command(settings: "Settings", spec: LayoutSpec, input_path: Path, output_path: Path, *,
                  licence_wait_s: float | None = None) -> list[str]:
    """The argument list of one pdfToolbox run (module docstring): licence options, process plan,
    input, output, then the site variables and the layout's (:func:`layout_variables`, which win).

    Raises:
        EngineConfigurationError: the executable is not found or the process plan does not exist.
    """
    executable, plan = _executable_and_plan(settings)
    variables = {**settings.pdftoolbox_variables, **layout_variables(spec)}
    return [
        executable, *licence_options(settings, licence_wait_s), plan, str(input_path), f"--outputfile={output_path}",
        *(f"--setvariable={key}:{value}" for key, value in variables.items()),
    ]


#: The layout of the engine check's canary run: one A5 page, 1-up on A4.
CANARY_LAYOUT = {"layout": "n_up", "sheet": "A4", "orientation": "portrait", "columns": 1, "rows": 1}
#: The canary page's size (A5, points).
CANARY_PAGE_PT = (419.53, 595.28)


@dataclass(frozen=True)
class EngineCheck:
    """The outcome of :func:`check_engine`.

    Attributes:
        ok: the engine ran and its licence was granted: the node may take jobs.
        reason: ``ok``; ``licence`` (exit 100, or no licence within the check's wait); ``installation``
            (executable or process plan missing, exit 101, 102, 104, 127); ``processes`` (the pool
            runs more slots than the licence allows processes); ``engine`` (any other failure).
        detail: one line for the node's log and the operator: what failed and the setting to look at.
    """

    ok: bool
    reason: str
    detail: str


def licence_check_wait_s(settings: "Settings") -> float:
    """How long the engine check waits for a licence: half its time limit, so that a licence server
    that answers late is told from a check that hangs."""
    return settings.pdftoolbox_check_time_limit_s / 2


def check_engine(settings: "Settings", *, pool_processes: int | None = None) -> EngineCheck:
    """Check this node's pdfToolbox and its licence: a canary run of the real process plan (one
    blank A5 page, :data:`CANARY_LAYOUT`) with the licence options, under the engine's memory limit and
    ``settings.pdftoolbox_check_time_limit_s``; and, with ``pool_processes`` (the worker's slots) and
    ``settings.pdftoolbox_licence_processes``, that the slots fit the licence. Never raises.

    The canary takes a licence for the length of one tiny run (one process of a process cartridge, a
    credit or so of a credit cartridge).
    """
    limit = settings.pdftoolbox_licence_processes
    if pool_processes is not None and limit is not None and pool_processes > limit:
        return EngineCheck(False, "processes", f"the worker runs {pool_processes} slots (-c) but "
                           f"pdftoolbox_licence_processes={limit}: the licence allows no more processes at once")
    import pikepdf  # only here: a node's check, not every import of the engine

    try:
        with tempfile.TemporaryDirectory(prefix="imposition-check-") as work:
            canary, output = Path(work, "canary.pdf"), Path(work, "canary-plate.pdf")
            with pikepdf.new() as pdf:
                pdf.add_blank_page(page_size=CANARY_PAGE_PT)
                pdf.save(canary)
            command = build_command(settings, parse_layout(CANARY_LAYOUT), canary, output,
                                    licence_wait_s=licence_check_wait_s(settings))
            ended = run_limited(command, time_limit_s=settings.pdftoolbox_check_time_limit_s,
                                memory_limit_bytes=settings.engine_memory_limit_bytes,
                                log_path=Path(work, "check.log"))
            ended = ChildExit(ended.returncode, without_paths(ended.log_tail, [canary, output, Path(work)]),
                              ended.duration_s)
    except EngineConfigurationError as exc:
        return EngineCheck(False, "installation", str(exc))
    except TimeLimitExceeded:
        return EngineCheck(False, "engine", f"the engine check ran past pdftoolbox_check_time_limit_s="
                           f"{settings.pdftoolbox_check_time_limit_s:g} and was killed")
    except OSError as exc:
        return EngineCheck(False, "engine", f"the engine check could not run: {exc}")
    return _check_outcome(ended)


def _check_outcome(ended: ChildExit) -> EngineCheck:
    error = error_for_exit(ended.returncode, ended.log_tail)
    if error is None:
        return EngineCheck(True, "ok", f"pdfToolbox ran (exit code {ended.returncode}) and its licence was granted")
    if isinstance(error, LicenceUnavailable):
        return EngineCheck(False, "licence", str(error))
    if isinstance(error, EngineConfigurationError):
        return EngineCheck(False, "installation", str(error))
    return EngineCheck(False, "engine", str(error))


class PdfToolboxEngine(Engine):
    """The licensed engine (``settings.engine = "pdftoolbox"``)."""

    name = "pdftoolbox"

    def command(self, job: EngineJob) -> list[str]:
        """The argument list that runs pdfToolbox for ``job`` (:func:`build_command`).

        Raises:
            EngineConfigurationError: the executable is not found or the process plan does not exist.
        """
        assert job.spec is not None, "pdfToolbox imposes: a job with a layout"
        return build_command(self.settings, job.spec, job.input_path, job.output_path)

    def _place(self, job: EngineJob) -> Placed:
        inspected = self.run_child(job, "inspect")
        ended = run_limited(
            self.command(job),
            time_limit_s=job.time_limit_s,
            deadline=job.deadline,
            memory_limit_bytes=self.settings.engine_memory_limit_bytes,
            log_path=job.work_dir / "pdftoolbox.log",
            cancel=job.cancel,
        )
        # pdfToolbox names the files by their full paths, the worker's: the tenant sees bare names
        worker_paths = (job.input_path, job.output_path, job.work_dir, Path(self.settings.pdftoolbox_process_plan))
        tail = without_paths(ended.log_tail, worker_paths)
        error = error_for_exit(ended.returncode, tail)
        if isinstance(error, DamagedPdf):  # a damaged-file message names the file, as the open engine's do
            raise DamagedPdf(f"{job.input_path.name}: {error.message}")
        if error is not None:
            raise error
        departures = departures_for_exit(ended.returncode, tail)
        if departures and getattr(job.spec, "on_warning", "warn") == "fail":
            failure = departure_error(departures)
            assert failure is not None
            raise failure
        import pikepdf  # only here: the parent never parses PDFs otherwise, and starts faster without it

        try:
            with pikepdf.open(job.output_path) as plates:
                sides = len(plates.pages)
        except (OSError, pikepdf.PdfError) as exc:
            raise EngineCrashed(
                f"pdfToolbox reported success but wrote no readable output: {without_paths(str(exc), worker_paths)}"
            ) from None
        duplex = getattr(job.spec, "duplex", "simplex")
        sheets = (sides + 1) // 2 if duplex == "sheetwise" else sides
        # The warnings are those of our own plan of the job (the input's repair, the room the layout
        # leaves), which the process plan is expected to draw alike, and those of pdfToolbox's exit code.
        return Placed(sheets, sides, inspected["pages_in"], inspected["blank_pages"],
                      Placed.warnings_of(inspected) + tuple(departures))


__all__ = ["EngineCheck", "PdfToolboxEngine", "build_command", "check_engine", "departures_for_exit",
           "error_for_exit", "layout_variables", "licence_options"]
