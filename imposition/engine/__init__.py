"""PDF imposition: layouts, page orders, geometry and two engines behind one interface.

The contract the service calls::

    from imposition.engine import parse_layout, LayoutSpec, get_engine, ImpositionError, SlugInfo, ImposeReport

    spec = parse_layout({"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"})
    engine = get_engine(settings)
    report = engine.impose(input_path, spec, output_path, slug=SlugInfo(job_id, tenant_id),
                           cancel=event, time_limit_s=None)

Every failure is an :class:`ImpositionError` with ``code`` and ``retryable`` (see
:mod:`imposition.engine.errors`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Public name → the module that defines it. Imported on first use (PEP 562), so that the engine's
#: child process (``python -m imposition.engine.child``) does not pay for pydantic and the engine classes.
_EXPORTS = {
    "Engine": ".backends",
    "ImposeReport": ".backends",
    "PdfToolboxEngine": ".backends",
    "PikepdfEngine": ".backends",
    "get_engine": ".backends",
    "ImpositionError": ".errors",
    "SlugInfo": ".job",
    "LayoutSpec": ".spec",
    "parse_layout": ".spec",
}

if TYPE_CHECKING:
    from .backends import Engine, ImposeReport, PdfToolboxEngine, PikepdfEngine, get_engine
    from .errors import ImpositionError
    from .job import SlugInfo
    from .spec import LayoutSpec, parse_layout


def __getattr__(name: str) -> Any:
    """A public name of :data:`_EXPORTS`, imported from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


__all__ = ["Engine", "ImposeReport", "ImpositionError", "LayoutSpec", "PdfToolboxEngine", "PikepdfEngine",
           "SlugInfo", "get_engine", "parse_layout"]  # the keys of _EXPORTS, spelled out for linters
