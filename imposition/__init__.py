"""PDF imposition: layouts, page orders, geometry and two engines behind one interface.

The contract the service calls::

    from imposition import parse_layout, LayoutSpec, get_engine, ImpositionError, SlugInfo, ImposeReport

    spec = parse_layout({"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"})
    engine = get_engine(settings)
    report = engine.impose(input_path, spec, output_path, slug=SlugInfo(job_id, tenant_id),
                           cancel=event, time_limit_s=None)

Every failure is an :class:`ImpositionError` with ``code`` and ``retryable`` (see
:mod:`imposition.errors`).
"""

from .engines import Engine, ImposeReport, PdfToolboxEngine, PikepdfEngine, get_engine
from .errors import ImpositionError
from .marks import SlugInfo
from .spec import LayoutSpec, parse_layout

__all__ = [
    "Engine",
    "ImposeReport",
    "ImpositionError",
    "LayoutSpec",
    "PdfToolboxEngine",
    "PikepdfEngine",
    "SlugInfo",
    "get_engine",
    "parse_layout",
]
