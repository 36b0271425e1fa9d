"""The licensed engine: callas pdfToolbox's command line, run as a limited subprocess.

Command (an argument list, never a shell string)::

    pdfToolbox <process plan> <input.pdf> --outputfile=<out> --setvariable=<key>:<value> ...

The executable, the process plan and site variables come from the settings
(``pdftoolbox_path``, ``pdftoolbox_process_plan``, ``pdftoolbox_variables``); the layout is passed as
variables (:func:`layout_variables`) that the process plan reads. Before the licence is spent, the
input is inspected in the same limited child as the open engine uses, so bad input fails with the
same typed errors and the page limit holds. Exit codes (callas pdfToolbox CLI reference) become
typed errors by :func:`error_for_exit` (the table: :data:`_EXIT_ERRORS`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..errors import (
    DamagedPdf,
    EngineAborted,
    EngineConfigurationError,
    EngineCrashed,
    ImpositionError,
    LicenceUnavailable,
    OutputNotSaved,
    PasswordRequired,
    without_paths,
)
from ..folds import SECTIONS
from ..isolation import run_limited
from ..spec import LayoutSpec, PerfectBound
from .base import Engine, EngineJob, Placed

#: Exit codes below this are success.
SUCCESS_BELOW = 100
#: The trampoline's exit code when the executable cannot be run.
CANNOT_EXECUTE = 127

#: Exit code → (error, meaning), from the callas pdfToolbox CLI reference. 0–99 is success (non-zero:
#: hits or warnings); any other code, or a signal, is :class:`EngineCrashed` (unknown). Licence,
#: save, abort and crash errors are retried (their classes' ``retryable``).
_EXIT_ERRORS: dict[int, tuple[type[ImpositionError], str]] = {
    100: (LicenceUnavailable, "licence missing or expired"),
    101: (EngineConfigurationError, "wrong parameters"),
    102: (EngineConfigurationError, "syntax error in the command or process plan"),
    104: (DamagedPdf, "could not open the input"),
    105: (PasswordRequired, "the input is encrypted; a password is needed"),
    106: (OutputNotSaved, "could not save the output"),
    107: (DamagedPdf, "the input is damaged"),
    127: (EngineConfigurationError, "the executable could not be run"),
    130: (EngineAborted, "aborted"),
    134: (EngineAborted, "aborted (out of memory)"),
}


def error_for_exit(returncode: int, log_tail: str) -> ImpositionError | None:
    """The typed error for a pdfToolbox exit status (:data:`_EXIT_ERRORS`), or None for success."""
    if 0 <= returncode < SUCCESS_BELOW:
        return None
    detail = log_tail.strip()[-300:]
    if returncode in _EXIT_ERRORS:
        cls, meaning = _EXIT_ERRORS[returncode]
        return cls(f"pdfToolbox exit code {returncode}: {meaning}: {detail}")
    how = f"was killed by signal {-returncode}" if returncode < 0 else f"ended with unknown exit code {returncode}"
    return EngineCrashed(f"pdfToolbox {how}: {detail}")


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


class PdfToolboxEngine(Engine):
    """The licensed engine (``settings.engine = "pdftoolbox"``)."""

    name = "pdftoolbox"

    def command(self, job: EngineJob) -> list[str]:
        """The argument list that runs pdfToolbox for ``job``.

        Raises:
            EngineConfigurationError: the executable is not found or the process plan does not exist.
        """
        executable = shutil.which(self.settings.pdftoolbox_path)
        if executable is None:
            raise EngineConfigurationError(
                f"pdftoolbox_path={self.settings.pdftoolbox_path!r}: no such executable"
            )
        plan = self.settings.pdftoolbox_process_plan
        if not plan or not Path(plan).is_file():
            raise EngineConfigurationError(f"pdftoolbox_process_plan={plan!r}: no such process plan file")
        assert job.spec is not None, "pdfToolbox imposes: a job with a layout"
        variables = {**self.settings.pdftoolbox_variables, **layout_variables(job.spec)}
        return [
            executable, plan, str(job.input_path), f"--outputfile={job.output_path}",
            *(f"--setvariable={key}:{value}" for key, value in variables.items()),
        ]

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
        error = error_for_exit(ended.returncode, without_paths(ended.log_tail, worker_paths))
        if error is not None:
            raise error
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
        # leaves): the process plan is expected to draw the same geometry.
        return Placed(sheets, sides, inspected["pages_in"], inspected["blank_pages"], Placed.warnings_of(inspected))
