"""The engine's child process: ``python -m imposition.child <request.json>``.

The request (written by :meth:`imposition.engines.base.Engine.run_child`) is a JSON object::

    {"mode": "impose" | "inspect", "input": path, "output": path | null, "spec": {...},
     "slug": {"job_id": ..., "tenant_id": ...} | null, "max_pages": int, "result": path}

``inspect`` opens the PDF and plans the job (every typed input error, no output); ``impose`` also
draws the plan with pikepdf and saves it to ``output``. The result file receives either
``{"ok": true, "sheets": n, "sides": n, "pages_in": n, "blank_pages": n}`` or
``{"ok": false, "code": ..., "message": ...}``. Exit status 0 when a result was written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pikepdf

from .errors import DamagedPdf, ImpositionError, MemoryLimitExceeded
from .marks import SlugInfo
from .planning import plan_imposition
from .source import open_source, page_boxes
from .spec import parse_layout


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Carry out one request; returns the success result (typed errors propagate)."""
    from .engines.pikepdf_engine import draw_plan  # only the impose mode needs the drawing code

    spec = parse_layout(request["spec"])
    slug = SlugInfo(**request["slug"]) if request.get("slug") else None
    with open_source(Path(request["input"]), max_pages=int(request["max_pages"])) as pdf:
        boxes = [page_boxes(page.obj, number) for number, page in enumerate(pdf.pages, start=1)]
        plan = plan_imposition(spec, boxes, slug=slug)
        if request["mode"] == "impose":
            draw_plan(pdf, boxes, plan, Path(request["output"]))
    return {"ok": True, "sheets": plan.sheets, "sides": len(plan.plates), "pages_in": plan.pages_in,
            "blank_pages": plan.blank_pages}


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text())
    try:
        result = run(request)
    except ImpositionError as exc:
        result = {"ok": False, "code": exc.code, "message": exc.message}
    except MemoryError:
        error: ImpositionError = MemoryLimitExceeded("the engine ran out of its memory budget (engine_memory_limit_bytes)")
        result = {"ok": False, "code": error.code, "message": error.message}
    except pikepdf.PdfError as exc:  # found while reading objects lazily, after opening
        if "bad_alloc" in str(exc):  # qpdf reports an allocation beyond RLIMIT_AS as a read error
            error: ImpositionError = MemoryLimitExceeded(
                f"the engine ran out of its memory budget (engine_memory_limit_bytes) reading the input: {exc}"
            )
        else:
            error = DamagedPdf(f"damaged beyond repair: {exc}")
        result = {"ok": False, "code": error.code, "message": error.message}
    Path(request["result"]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
