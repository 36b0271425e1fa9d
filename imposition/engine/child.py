"""The engine's child process: ``python -m imposition.engine.child <request.json>`` or ``--serve <reply fd>``.

:class:`imposition.engine.isolation.EngineChild` starts it through the limits trampoline
(:mod:`imposition.engine._limits` ``--module imposition.engine.child``). The request (written by
:meth:`imposition.engine.backends.base.Engine.run_child`) is a JSON object::

    {"mode": "impose" | "inspect" | "probe" | "preview", "input": path, "output": path | null,
     "layout": {...} (imposition.engine.job.Layout), "slug": {"job_id": ..., "tenant_id": ...} | null,
     "max_pages": int, "result": path, "max_cells_per_sheet": n, "max_cells_per_job": n,
     "content_budget": {...}, "jdf_output": path, "plate_name": name}   (the last five optional)
    preview: {"mode": "preview", "input": plate, "output_dir": dir, "max_px": n, "result": path}

``probe`` opens the PDF (:func:`imposition.engine.source.open_source`), holds it to the content budget,
reads every page's content and resources whole and its boxes (a damaged or truncated file is refused
at the door), and answers ``{"ok": true, "pages_in": n}``; ``inspect`` also plans the job (every typed
input error, no output); ``impose`` also draws the plan and saves it to ``output`` (with ``jdf_output``
its JDF Layout too, :mod:`imposition.engine.jdf`); ``preview`` renders every page of a plate
(:func:`render_previews`), answering ``{"ok": true, "previews": [...]}``. Checked first: the content
budget (``content_too_large``), then every page's content (``damaged``, or a ``repaired`` warning), then
its boxes (a TrimBox outside the page: ``trim_box_replaced``); with ``on_warning: fail`` a warning
fails the job before anything is drawn. The result file receives ``{"ok": true, "sheets": n, "sides":
n, "pages_in": n, "blank_pages": n, "warnings": [{"code", "message"}, …]}`` or ``{"ok": false, "code":
..., "message": ...}``; exit status 0 when a result was written. ``--serve``: :func:`serve`. A damaged input (:data:`INPUT_ERRORS`, ``DamagedPdf``) is
``damaged``; any other exception is a bug: the child ends with its traceback in its log and the
parent reports ``engine_crashed``. Why: docs/design.md, "A warm engine child".
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import pikepdf

from .budget import check_content_budget
from .errors import DamagedPdf, ImpositionError, MemoryLimitExceeded, PlateWarning, PreviewFailed, departure_error
from .job import ContentBudget, Layout, SlugInfo
from .planning import plan_imposition
from .source import (
    content_damage, open_source, page_boxes, qpdf_message, read_pages, trim_clipped_warning, trim_fallback_warning,
)

#: What qpdf raises about a document it cannot make sense of: its PDF errors (PdfError and
#: DataDecodingError), its runtime errors (QpdfRuntimeError, e.g. "/Count is wrong after flattening
#: pages tree") and reference cycles. pikepdf's other errors (ForeignObjectError, DeletedObjectError,
#: JobUsageError) come from using pikepdf wrongly: bugs of ours, left to crash.
INPUT_ERRORS = (pikepdf.PdfError, pikepdf.QpdfRuntimeError, pikepdf.ReferenceCycleError)


#: Exit status of a serving child that found a document of a finished job still open.
LEAK_EXIT_STATUS = 70
#: Resolution a preview is first rendered at before it is fitted to ``max_px`` (PDF points per inch).
POINTS_PER_INCH = 72


def render_previews(plate: Path, output_dir: Path, max_px: int) -> list[str]:
    """Render every page of ``plate`` to ``output_dir/preview-<n>.png`` (n 1-based), its longer side
    ``max_px`` pixels (the aspect ratio of the page's MediaBox kept), white paper; returns the file names.

    Raises:
        pypdfium2.PdfiumError: pdfium cannot open or render the plate.
    """
    import pypdfium2  # only previews need the renderer

    names = []
    document = pypdfium2.PdfDocument(str(plate))
    try:
        for index in range(len(document)):
            page = document[index]
            try:
                width_pt, height_pt = page.get_size()
                scale = max_px / max(width_pt, height_pt)  # pixels per point
                bitmap = page.render(scale=scale, fill_color=(255, 255, 255, 255), draw_annots=False)
                name = f"preview-{index + 1}.png"
                bitmap.to_pil().save(output_dir / name, format="PNG", optimize=False)
                names.append(name)
            finally:
                page.close()
    finally:
        document.close()
    return names


class Laps:
    """The CPU time (``time.process_time``) of each step of :func:`run`, added into ``into`` by step
    name when given (the benchmark's ``steps``: what each check costs), nothing otherwise."""

    def __init__(self, into: dict[str, float] | None) -> None:
        self.into = into
        self.at = time.process_time() if into is not None else 0.0

    def __call__(self, step: str) -> None:
        """The step that ends now is ``step``."""
        if self.into is not None:
            now = time.process_time()
            self.into[step] = self.into.get(step, 0.0) + now - self.at
            self.at = now


def run(request: dict[str, Any], step_cpu_s: dict[str, float] | None = None) -> dict[str, Any]:
    """Carry out one request; returns the success result (typed errors propagate). ``step_cpu_s``
    receives each step's CPU seconds (:class:`Laps`)."""
    if request["mode"] == "preview":
        import pypdfium2

        try:
            names = render_previews(Path(request["input"]), Path(request["output_dir"]), int(request["max_px"]))
        except pypdfium2.PdfiumError as exc:
            raise PreviewFailed(f"pdfium could not render the plate: {exc}") from None
        return {"ok": True, "previews": names}
    lap = Laps(step_cpu_s)
    layout = Layout.from_json(request["layout"])
    slug = SlugInfo(**request["slug"]) if request.get("slug") else None
    path = Path(request["input"])
    open_warnings: list[str] = []
    with open_source(path, max_pages=int(request["max_pages"]), warnings_out=open_warnings) as pdf:
        lap("open")
        pages = read_pages(pdf)  # the page tree walked once for the three checks
        lap("read the page tree")
        read_whole: frozenset[tuple[int, int]] = frozenset()
        if request.get("content_budget"):
            read_whole = check_content_budget(pdf, ContentBudget.from_json(request["content_budget"]), path,
                                              pages).read_whole
        lap("content budget")
        repaired = content_damage(pdf, path, open_warnings, pages, read_whole)
        lap("damage check")
        fallbacks: dict[int, str] = {}
        clipped: dict[int, str] = {}
        boxes = page_boxes(pdf, pages, fallbacks_out=fallbacks, clipped_out=clipped)
        del pages
        lap("page boxes")
        if request["mode"] == "probe":  # the door's check: the file reads whole; the layout's fit is the job's
            return {"ok": True, "pages_in": len(boxes)}
        plan = plan_imposition(layout, boxes, slug=slug, max_cells_per_sheet=request.get("max_cells_per_sheet"),
                               max_cells_per_job=request.get("max_cells_per_job"))
        lap("plan")
        box_warnings = [w for w in (trim_fallback_warning(path.name, fallbacks),
                                    trim_clipped_warning(path.name, clipped, boxes)) if w is not None]
        warnings = (([PlateWarning("repaired", repaired)] if repaired else []) + box_warnings + list(plan.warnings))
        failure = departure_error(warnings) if layout.on_warning == "fail" else None
        if failure is not None:  # (None without warnings)
            raise failure
        if request["mode"] == "impose":
            from .drawing import draw_plan  # only the impose mode needs the drawing code (a serving child has it)

            draw_plan(pdf, boxes, plan, Path(request["output"]), lap)
            if request.get("jdf_output"):
                from .jdf import layout_jdf

                Path(request["jdf_output"]).write_bytes(layout_jdf(
                    plan, layout, boxes, job_id=slug.job_id if slug and slug.job_id != "-" else Path(request["plate_name"]).stem,
                    source_name=path.name, plate_name=request["plate_name"]))
                lap("JDF")
    lap("close")
    return {"ok": True, "sheets": plan.sheets, "sides": len(plan.plates), "pages_in": plan.pages_in,
            "blank_pages": plan.blank_pages, "warnings": [warning.to_json() for warning in warnings]}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        return serve(int(argv[1]))
    answer(json.loads(Path(argv[0]).read_text()))
    return 0


def _naming(message: str, name: str) -> str:
    """``message`` starting with the file's ``name`` (``cyclic-toc.pdf: …``): a ``damaged`` message
    always names the file, whichever check found the damage."""
    return message if message.startswith(f"{name}:") else f"{name}: {message}"


def answer(request: dict[str, Any]) -> None:
    """Run ``request`` and write its result file (success or a typed error; a ``damaged`` one names
    the input file); a bug propagates."""
    name = Path(request["input"]).name
    try:
        result = run(request)
    except ImpositionError as exc:
        message = _naming(exc.message, name) if isinstance(exc, DamagedPdf) else exc.message
        result = {"ok": False, "code": exc.code, "message": message}
    except MemoryError:
        error: ImpositionError = MemoryLimitExceeded("the engine ran out of its memory budget (engine_memory_limit_bytes)")
        result = {"ok": False, "code": error.code, "message": error.message}
    except INPUT_ERRORS as exc:  # found while reading objects lazily, after opening
        message = qpdf_message(exc, Path(request["input"]))
        if "bad_alloc" in str(exc):  # qpdf reports an allocation beyond RLIMIT_AS as a read error
            error = MemoryLimitExceeded(
                f"the engine ran out of its memory budget (engine_memory_limit_bytes) reading the input: {message}"
            )
        else:
            error = DamagedPdf(_naming(f"damaged beyond repair: {message}", name))
        result = {"ok": False, "code": error.code, "message": error.message}
    Path(request["result"]).write_text(json.dumps(result))


def _limit(job: dict[str, Any]) -> None:
    """Apply a job's limits to this process: the address space (RLIMIT_AS, lowered only, so the first
    job's limit binds every later one: the parent reuses a child only for the same limit) and a CPU
    backstop ``cpu_seconds`` beyond the CPU time used so far (SIGXCPU past it)."""
    address_space_bytes = int(job.get("address_space_bytes") or 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if address_space_bytes > 0 and soft != address_space_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    cpu_seconds = int(job.get("cpu_seconds") or 0)
    if cpu_seconds > 0:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used_s = int(usage.ru_utime + usage.ru_stime) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (used_s + cpu_seconds, resource.RLIM_INFINITY))


def _rss_bytes() -> int:
    """This process's resident set now (/proc/self/statm, Linux), or its peak elsewhere."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _open_documents() -> int:
    """How many pikepdf documents are alive in this process."""
    return sum(1 for obj in gc.get_objects() if isinstance(obj, pikepdf.Pdf))


def serve(reply_fd: int) -> int:
    """Serve jobs read from stdin, one line each, until end of input.

    A line is ``{"request": path, "log": path, "address_space_bytes": n, "cpu_seconds": n}``: the
    child sets its limits (:func:`_limit`), sends its output to the job's log, runs the request
    (:func:`answer`) and writes ``{"rss_bytes": n}`` to ``reply_fd``. It exits with
    :data:`LEAK_EXIT_STATUS` if a ``pikepdf.Pdf`` outlives its job; end of input ends it.
    """
    import imposition.engine.drawing  # noqa: F401 (paid once, before the first job)

    devnull = os.open(os.devnull, os.O_WRONLY)
    gc.freeze()  # the imports stay out of every later collection
    for line in sys.stdin:
        job = json.loads(line)
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        _limit(job)
        answer(json.loads(Path(job["request"]).read_text()))
        sys.stdout.flush()
        sys.stderr.flush()
        gc.collect()
        leaked = _open_documents()
        if leaked:
            sys.stderr.write(f"imposition.engine.child: {leaked} document(s) still open after a job; exiting\n")
            sys.stderr.flush()
            return LEAK_EXIT_STATUS
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.write(reply_fd, (json.dumps({"rss_bytes": _rss_bytes()}) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
