"""Fixtures of the imposition tests: the handed case PDFs and both engines."""

from __future__ import annotations

from pathlib import Path

import pytest

from imposition.engine.backends import PdfToolboxEngine, PikepdfEngine
from imposition.common.settings import Settings
from tests.support.licence_server import install_stand_in

HERE = Path(__file__).parent
CASES = HERE.parent / "data" / "cases"


@pytest.fixture
def case():
    """Path of a handed case PDF by file name."""
    return lambda name: CASES / name


@pytest.fixture
def settings() -> Settings:
    """Service settings for the engines: the defaults with a short time limit."""
    return Settings(engine="pikepdf", engine_time_limit_s=60)


@pytest.fixture
def engine(settings) -> PikepdfEngine:
    return PikepdfEngine(settings)


@pytest.fixture
def stand_in_settings(tmp_path: Path, settings: Settings) -> Settings:
    """Settings that point PdfToolboxEngine at the stand-in (a real executable) and a process plan file."""
    executable, plan = install_stand_in(tmp_path / "bin")
    return settings.model_copy(update={
        "engine": "pdftoolbox", "pdftoolbox_path": str(executable), "pdftoolbox_process_plan": str(plan),
    })


@pytest.fixture(params=["pikepdf", "pdftoolbox"])
def any_engine(request, settings, stand_in_settings):
    """Each engine in turn (pdfToolbox through the stand-in): the contract every engine keeps."""
    if request.param == "pikepdf":
        return PikepdfEngine(settings)
    return PdfToolboxEngine(stand_in_settings)
