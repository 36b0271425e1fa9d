"""The engine interface and its policy; each engine fills only the placing step.

:meth:`Engine.impose` owns everything common: the layout check, the input-size limit, the time limit
and cancel event, the child process (:meth:`Engine.run_child`), writing the plate file atomically
(a hidden ``.partial`` file renamed into place, removed on any failure), timing and the report.
A subclass implements :meth:`Engine._place`, writing the imposed PDF to the path it is given.
With ``preview_dir``, the plate's sides are then rendered to PNG files there (:meth:`Engine.previews`).
An engine with ``writes_jdf`` also writes the plan's JDF Layout beside the plate (``<plate>.jdf``,
:mod:`imposition.engine.jdf`), renamed into place with it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import (
    EngineCancelled, EngineCrashed, ImpositionError, InputTooLarge, MemoryLimitExceeded, PlateWarning, PreviewFailed,
    error_from_code,
)
from ..isolation import engine_child
from ..job import ContentBudget, ShopDefaults, SlugInfo
from ..spec import LayoutSpec, parse_layout

if TYPE_CHECKING:
    from imposition.common.settings import Settings

log = logging.getLogger(__name__)

#: Words in a dead child's log that say it ran out of address space.
OUT_OF_MEMORY_SIGNS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "out of memory")


def _remove_previews(preview_dir: Path) -> None:
    """Delete the ``preview-<n>.png`` files a failed preview run left in ``preview_dir``."""
    for path in preview_dir.glob("preview-*.png"):
        path.unlink(missing_ok=True)


def jdf_beside(plate: Path) -> Path:
    """Where a plate's JDF Layout goes: the plate's path with the suffix ``.jdf`` (``.jdf`` added
    when the plate's own name ends so)."""
    path = plate.with_suffix(".jdf")
    return plate.with_name(plate.name + ".jdf") if path == plate else path


@dataclass(frozen=True)
class ImposeReport:
    """What an imposition produced.

    Attributes:
        sheets: press sheets for one copy (sheetwise: plates / 2; work and turn or tumble: one plate
            per sheet, each sheet printed on both sides with it; simplex: one plate per sheet).
        sides: plates, that is pages of the output PDF.
        pages_in: pages of the input PDF.
        blank_pages: blank pages added by padding (booklets, odd duplex).
        duration_s: wall time of :meth:`Engine.impose`, seconds.
        engine: the engine's name (``pikepdf`` or ``pdftoolbox``).
        warnings: every departure from what the layout asked (scaled to fit, marks, bleed or slug not
            drawn whole, a repaired file), typed; empty when the plate is what was asked; and
            ``preview_failed`` when previews were asked for and could not be rendered.
        previews: the preview files written (``preview-<n>.png`` in ``preview_dir``, n the plate's
            side, 1-based), empty when none were asked for or they failed.
        jdf: the JDF Layout written beside the plate (``<plate>.jdf``), or None (the engine writes none).
    """

    sheets: int
    sides: int
    pages_in: int
    blank_pages: int
    duration_s: float
    engine: str
    warnings: tuple[PlateWarning, ...] = ()
    previews: tuple[Path, ...] = ()
    jdf: Path | None = None


@dataclass(frozen=True)
class Placed:
    """What :meth:`Engine._place` reports: the counts and warnings of :class:`ImposeReport`."""

    sheets: int
    sides: int
    pages_in: int
    blank_pages: int
    warnings: tuple[PlateWarning, ...] = ()

    @staticmethod
    def warnings_of(result: dict[str, Any]) -> tuple[PlateWarning, ...]:
        """The warnings of a child's success result."""
        return tuple(PlateWarning(w["code"], w["message"]) for w in result.get("warnings", ()))


@dataclass(frozen=True)
class EngineJob:
    """One imposition as handed to :meth:`Engine._place`.

    Attributes:
        input_path: the source PDF.
        spec: the validated layout (None for a preview of a plate: it has none).
        output_path: where to write the plate file (a temporary name; the policy renames it).
        work_dir: a private directory for request, result and log files, removed afterwards.
        slug: job and tenant for the slug line.
        cancel: the caller's cancel event, or None.
        deadline: ``time.monotonic()`` value after which the job is over its time limit.
        time_limit_s: the whole job's limit (for messages).
        jdf_path: where to write the JDF Layout (a temporary name), or None for none.
        plate_name: the plate's file name as the JDF names it.
    """

    input_path: Path
    spec: LayoutSpec | None
    output_path: Path
    work_dir: Path
    slug: SlugInfo | None
    cancel: threading.Event | None
    deadline: float
    time_limit_s: float
    jdf_path: Path | None = None
    plate_name: str = ""


class Engine(ABC):
    """An imposition engine. Construct with the service settings; call :meth:`impose`.

    Class attributes:
        name: the engine's name in ``settings.engine`` and in reports.
        writes_jdf: the engine writes the JDF Layout of its plan beside the plate.
    """

    name: ClassVar[str]
    writes_jdf: ClassVar[bool] = False

    def __init__(self, settings: "Settings") -> None:
        self.settings = settings

    def impose(
        self,
        input_path: Path,
        spec: LayoutSpec,
        output_path: Path,
        *,
        slug: SlugInfo | None = None,
        cancel: threading.Event | None = None,
        time_limit_s: float | None = None,
        preview_dir: Path | None = None,
    ) -> ImposeReport:
        """Impose ``input_path`` per ``spec`` into ``output_path``.

        Args:
            input_path: the source PDF.
            spec: the layout (a dict or JSON text is validated with :func:`parse_layout`).
            output_path: the plate file; written whole or not at all. With :attr:`writes_jdf`, its
                JDF Layout goes beside it (``output_path`` with the suffix ``.jdf``), else a file of
                that name left by an earlier run is removed (:func:`jdf_beside`).
            slug: job and tenant for the slug line.
            cancel: when set, the engine kills its child process and raises EngineCancelled.
            time_limit_s: wall-clock limit in seconds (default ``settings.engine_time_limit_s``).
            preview_dir: an existing folder for a PNG of each side (:meth:`previews`); a preview that
                fails is the warning ``preview_failed``, never a failed job.

        Returns:
            The report (counts read from the engine's own output, timing, previews).

        Raises:
            ImpositionError: a typed error (see :mod:`imposition.engine.errors`); ``retryable`` tells whether
                running the job again may help. Nothing is left at ``output_path``.
            OSError: the input cannot be read or the output directory cannot be written.
        """
        started = time.monotonic()
        if not isinstance(spec, LayoutSpec):
            spec = parse_layout(spec)
        limit_s = self.settings.engine_time_limit_s if time_limit_s is None else time_limit_s
        size_bytes = input_path.stat().st_size
        if size_bytes > self.settings.max_input_bytes:
            raise InputTooLarge(
                f"{input_path.name}: {size_bytes} bytes is more than max_input_bytes={self.settings.max_input_bytes}"
            )
        if cancel is not None and cancel.is_set():
            raise EngineCancelled("the engine was cancelled before it started")
        output_path.parent.mkdir(parents=True, exist_ok=True)
        partial = output_path.with_name(f".{output_path.name}.{uuid.uuid4().hex}.partial")
        jdf_path = jdf_beside(output_path)
        partial_jdf = partial.with_suffix(".jdf.partial")
        partial.touch()  # an unwritable output directory is an OSError here, not a crash in the child
        partial.unlink()
        try:
            with tempfile.TemporaryDirectory(prefix="imposition-") as work_dir:
                job = EngineJob(input_path, spec, partial, Path(work_dir), slug, cancel, started + limit_s, limit_s,
                                jdf_path=partial_jdf if self.writes_jdf else None, plate_name=output_path.name)
                placed = self._place(job)
            if cancel is not None and cancel.is_set():
                raise EngineCancelled("the engine was cancelled; its output was discarded")
            os.replace(partial, output_path)
            if self.writes_jdf:
                os.replace(partial_jdf, jdf_path)
            else:  # a ticket of an earlier plate must not pass for this one's
                jdf_path.unlink(missing_ok=True)
        except ImpositionError as exc:
            log.info("imposition failed: engine=%s code=%s retryable=%s: %s", self.name, exc.code, exc.retryable, exc)
            raise
        finally:
            partial.unlink(missing_ok=True)
            partial_jdf.unlink(missing_ok=True)
        warnings = placed.warnings
        previews: tuple[Path, ...] = ()
        if preview_dir is not None and placed.sides > self.settings.preview_max_sides:
            warnings += (PlateWarning(PreviewFailed.code, f"no preview of the plate: {placed.sides} sides, more than "
                                      f"preview_max_sides={self.settings.preview_max_sides}"),)
        elif preview_dir is not None:
            try:
                previews = self.previews(output_path, preview_dir, cancel=cancel)
            except EngineCancelled:
                _remove_previews(preview_dir)
                raise
            except ImpositionError as exc:
                _remove_previews(preview_dir)  # a half-rendered set must not pass for the previews
                log.warning("previews of %s failed (%s): %s", output_path.name, exc.code, exc)
                warnings += (PlateWarning(PreviewFailed.code, f"no preview of the plate ({exc.code}): {exc.message}"),)
        report = ImposeReport(placed.sheets, placed.sides, placed.pages_in, placed.blank_pages,
                              duration_s=time.monotonic() - started, engine=self.name, warnings=warnings,
                              previews=previews, jdf=jdf_path if self.writes_jdf else None)
        log.info("imposed %s: %s", input_path.name, report)
        return report

    def probe(self, input_path: Path, spec: LayoutSpec, *, time_limit_s: float | None = None) -> int:
        """Open ``input_path`` in the limited child (mode ``probe``) and return its page count: a
        PDF, readable, not encrypted with a user password, with pages and not too many. The
        submission's door check, before a job exists; the pages' content and the layout's fit are
        the engine's, when the job runs. Errors name the file by its own name. ``spec`` only
        completes the child's request.

        Raises:
            ImpositionError: ``not_a_pdf``, ``no_pages``, ``damaged``, ``password_required``,
                ``too_many_pages``, ``input_too_large``, a time or memory limit.
            OSError: the input cannot be read.
        """
        started = time.monotonic()
        limit_s = self.settings.engine_time_limit_s if time_limit_s is None else time_limit_s
        size_bytes = input_path.stat().st_size
        if size_bytes > self.settings.max_input_bytes:
            raise InputTooLarge(
                f"{input_path.name}: {size_bytes} bytes is more than max_input_bytes={self.settings.max_input_bytes}"
            )
        with tempfile.TemporaryDirectory(prefix="imposition-probe-") as work_dir:
            job = EngineJob(input_path, spec, Path(work_dir) / "unused.pdf", Path(work_dir), None, None,
                            started + limit_s, limit_s)
            return int(self.run_child(job, "probe")["pages_in"])

    @abstractmethod
    def _place(self, job: EngineJob) -> Placed:
        """Write the imposed PDF to ``job.output_path`` and report the counts.

        Runs any untrusted parsing through :meth:`run_child` (or another limited child process) and
        stays within ``job.deadline``; raises a typed :class:`ImpositionError` on failure.
        """

    def previews(self, plate: Path, preview_dir: Path, *, cancel: threading.Event | None = None) -> tuple[Path, ...]:
        """Render each side of ``plate`` to ``preview_dir/preview-<n>.png`` (n from 1), its longer side
        ``settings.preview_max_px`` pixels, in the engine's limited child (pdfium parses the plate,
        and with it the tenant's content), within ``settings.preview_time_limit_s``.

        Raises:
            ImpositionError: PreviewFailed (pdfium refused the plate), TimeLimitExceeded,
                MemoryLimitExceeded or EngineCrashed from the child; EngineCancelled.
        """
        with tempfile.TemporaryDirectory(prefix="imposition-preview-") as work_dir:
            limit_s = self.settings.preview_time_limit_s
            job = EngineJob(plate, None, plate, Path(work_dir), None, cancel, time.monotonic() + limit_s, limit_s)
            result = self.run_child(job, "preview", {"output_dir": str(preview_dir),
                                                     "max_px": self.settings.preview_max_px})
        return tuple(preview_dir / name for name in result["previews"])

    def run_child(self, job: EngineJob, mode: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run :mod:`imposition.engine.child` in ``mode`` (``impose``, ``inspect`` or ``preview``, whose
        ``fields`` are added to the request) under the job's limits, in this process's engine child
        (:func:`imposition.engine.isolation.engine_child`: the warm one in a worker process).

        The child gets the layout already validated and resolved (:meth:`LayoutSpec.resolved`, plain
        JSON), so it imports neither pydantic nor the settings: its start is an interpreter and pikepdf.

        Returns:
            The child's success result (``sheets``, ``sides``, ``pages_in``, ``blank_pages``,
            ``warnings``).

        Raises:
            ImpositionError: the typed error the child reported; TimeLimitExceeded or EngineCancelled
                from the wait; MemoryLimitExceeded or EngineCrashed when it died without a result
                (its message never carries the child's log, which may hold a traceback and paths:
                that goes to this module's logger).
        """
        request_path, result_path = job.work_dir / f"{mode}.request.json", job.work_dir / f"{mode}.result.json"
        if mode == "preview":
            request: dict[str, Any] = {"mode": mode, "input": str(job.input_path), "result": str(result_path)}
        else:
            assert job.spec is not None, f"{mode}: only a preview job has no layout"
            request = {
                "mode": mode,
                "input": str(job.input_path),
                "output": str(job.output_path),
                "layout": job.spec.resolved(ShopDefaults.of(self.settings)).to_json(),
                "slug": asdict(job.slug) if job.slug else None,
                "max_pages": self.settings.max_pages,
                "max_cells_per_sheet": self.settings.max_cells_per_sheet,
                "max_cells_per_job": self.settings.max_cells_per_job,
                "content_budget": ContentBudget.of(self.settings).to_json(),
                "result": str(result_path),
            }
            if job.jdf_path is not None and mode == "impose":
                request.update(jdf_output=str(job.jdf_path), plate_name=job.plate_name)
        request.update(fields or {})
        request_path.write_text(json.dumps(request))
        memory_limit_bytes = self.settings.engine_memory_limit_bytes
        with engine_child(memory_limit_bytes) as child:
            ended = child.run(request_path, log_path=job.work_dir / f"{mode}.log", time_limit_s=job.time_limit_s,
                              deadline=job.deadline, memory_limit_bytes=memory_limit_bytes, cancel=job.cancel)
            if result_path.exists():
                result = json.loads(result_path.read_text())
                if not result["ok"]:
                    if result["code"] == MemoryLimitExceeded.code:
                        child.retired = True  # its heap may be anywhere after an allocation failed
                    raise error_from_code(result["code"], result["message"])
                return result
        if any(sign in ended.log_tail for sign in OUT_OF_MEMORY_SIGNS):
            raise MemoryLimitExceeded(
                f"the engine ran out of its memory budget "
                f"(engine_memory_limit_bytes={self.settings.engine_memory_limit_bytes})"
            )
        log.error("the engine's child process for %s ended with status %s and no result; the end of its log:\n%s",
                  job.input_path.name, ended.returncode, ended.log_tail)
        raise EngineCrashed(
            f"the engine's child process ended with status {ended.returncode} and no result "
            f"(an internal error; its log is in the worker's log)"
        )

