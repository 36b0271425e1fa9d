"""The imposition engines behind one interface, and :func:`get_engine` to pick one from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Engine, EngineJob, ImposeReport, Placed
from .pdftoolbox import PdfToolboxEngine
from .pikepdf_engine import PikepdfEngine

if TYPE_CHECKING:
    from imposition.common.settings import Settings

#: Engines by their ``settings.engine`` name.
ENGINES: dict[str, type[Engine]] = {PikepdfEngine.name: PikepdfEngine, PdfToolboxEngine.name: PdfToolboxEngine}


def get_engine(settings: "Settings") -> Engine:
    """The engine named by ``settings.engine`` (``pikepdf`` or ``pdftoolbox``), built with ``settings``.

    Raises:
        KeyError: an unknown engine name (the settings model already rejects one).
    """
    return ENGINES[settings.engine](settings)


__all__ = ["ENGINES", "Engine", "EngineJob", "ImposeReport", "PdfToolboxEngine", "PikepdfEngine", "Placed", "get_engine"]
