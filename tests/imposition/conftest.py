"""Fixtures of the imposition tests: the handed case PDFs and both engines."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from imposition.engine.backends import PdfToolboxEngine, PikepdfEngine
from imposition.common.settings import Settings

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
    executable = tmp_path / "bin" / "pdfToolbox"
    executable.parent.mkdir()
    executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_pdftoolbox.py"}" "$@"\n')
    executable.chmod(executable.stat().st_mode | stat.S_IXUSR)
    plan = tmp_path / "impose.kfpx"
    plan.write_bytes(b"process plan stand-in")
    return settings.model_copy(update={
        "engine": "pdftoolbox", "pdftoolbox_path": str(executable), "pdftoolbox_process_plan": str(plan),
    })


@pytest.fixture(params=["pikepdf", "pdftoolbox"])
def any_engine(request, settings, stand_in_settings):
    """Each engine in turn (pdfToolbox through the stand-in): the contract every engine keeps."""
    if request.param == "pikepdf":
        return PikepdfEngine(settings)
    return PdfToolboxEngine(stand_in_settings)
