"""The engine's child process: ``python -m imposition.child <request.json>``.

:meth:`imposition.engines.base.Engine.run_child` starts it through the limits trampoline
(:mod:`imposition._limits` ``--module imposition.child``), which sets the address-space and CPU limits
and then runs this module in the same process, before anything here is imported.

The request (written by :meth:`imposition.engines.base.Engine.run_child`) is a JSON object::

    {"mode": "impose" | "inspect" | "probe", "input": path, "output": path | null,
     "layout": {...} (imposition.job.Layout), "slug": {"job_id": ..., "tenant_id": ...} | null,
     "max_pages": int, "result": path}

``probe`` only opens the PDF (:func:`imposition.source.open_source`: a PDF, readable, not
encrypted, with pages; the submission's door check) and answers ``{"ok": true, "pages_in": n}``;
``inspect`` opens the PDF and plans the job (every typed input error, no output); ``impose`` also
draws the plan with pikepdf and saves it to ``output``. ``max_cells_per_sheet`` and
``max_cells_per_job`` (optional; absent: no limit, as in the benchmark) bound the cells of one side
and of the whole job; ``content_budget`` (optional; :class:`imposition.job.ContentBudget` as JSON) bounds
what the input's streams decode to, checked first (:func:`imposition.budget.check_content_budget`,
``content_too_large``). The result file receives either
``{"ok": true, "sheets": n, "sides": n, "pages_in": n, "blank_pages": n, "warnings": [{"code", "message"}, …]}``
or ``{"ok": false, "code": ..., "message": ...}``. Exit status 0 when a result was written. Before
planning, every page's content is checked readable (:func:`imposition.source.content_damage`): a file
cut short fails ``damaged`` naming its pages; one qpdf repaired whole gives a ``repaired`` warning.
With the layout's ``on_warning: fail``, a warning fails the job (its code) before anything is drawn.

Telling a damaged input from a bug of ours: the input's structure is checked where it is read
(:mod:`imposition.source`, :mod:`imposition.drawing` raise DamagedPdf naming the page and entry), and
the errors qpdf raises about the document it holds (:data:`INPUT_ERRORS`) are the input's fault too,
reported as ``damaged`` (never retried). Any other exception is a bug: it is not caught here, so the
child ends with its traceback in its log (which the parent writes to the worker's log) and no result,
and the parent reports ``engine_crashed`` (retryable) without the traceback.

The child starts once per job, so it imports only what it uses: pikepdf and the plain-data modules
(job, geometry, planning, drawing). The layout arrives already validated and resolved by the parent;
the child never imports pydantic, the settings or the engine classes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pikepdf

from .budget import check_content_budget
from .errors import DamagedPdf, ImpositionError, MemoryLimitExceeded, PlateWarning, departure_error
from .job import ContentBudget, Layout, SlugInfo
from .planning import plan_imposition
from .source import content_damage, open_source, page_boxes, qpdf_message

#: What qpdf raises about a document it cannot make sense of: its PDF errors (PdfError and
#: DataDecodingError), its runtime errors (QpdfRuntimeError, e.g. "/Count is wrong after flattening
#: pages tree") and reference cycles. pikepdf's other errors (ForeignObjectError, DeletedObjectError,
#: JobUsageError) come from using pikepdf wrongly: bugs of ours, left to crash.
INPUT_ERRORS = (pikepdf.PdfError, pikepdf.QpdfRuntimeError, pikepdf.ReferenceCycleError)


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Carry out one request; returns the success result (typed errors propagate)."""
    layout = Layout.from_json(request["layout"])
    slug = SlugInfo(**request["slug"]) if request.get("slug") else None
    path = Path(request["input"])
    if request["mode"] == "probe":
        with open_source(path, max_pages=int(request["max_pages"])) as pdf:
            return {"ok": True, "pages_in": len(pdf.pages)}
    open_warnings: list[str] = []
    with open_source(path, max_pages=int(request["max_pages"]), warnings_out=open_warnings) as pdf:
        if request.get("content_budget"):
            check_content_budget(pdf, ContentBudget.from_json(request["content_budget"]), path)
        repaired = content_damage(pdf, path, open_warnings)
        boxes = page_boxes(pdf)
        plan = plan_imposition(layout, boxes, slug=slug, max_cells_per_sheet=request.get("max_cells_per_sheet"),
                               max_cells_per_job=request.get("max_cells_per_job"))
        warnings = ([PlateWarning("repaired", repaired)] if repaired else []) + list(plan.warnings)
        if layout.on_warning == "fail" and warnings:
            raise departure_error(warnings)  # type: ignore[misc]  # not None: warnings is not empty
        if request["mode"] == "impose":
            from .drawing import draw_plan  # only the impose mode needs the drawing code

            draw_plan(pdf, boxes, plan, Path(request["output"]))
    return {"ok": True, "sheets": plan.sheets, "sides": len(plan.plates), "pages_in": plan.pages_in,
            "blank_pages": plan.blank_pages, "warnings": [warning.to_json() for warning in warnings]}


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    try:
        result = run(request)
    except ImpositionError as exc:
        result = {"ok": False, "code": exc.code, "message": exc.message}
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
            error = DamagedPdf(f"damaged beyond repair: {message}")
        result = {"ok": False, "code": error.code, "message": error.message}
    Path(request["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
