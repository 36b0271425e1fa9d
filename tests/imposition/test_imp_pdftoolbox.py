"""PdfToolboxEngine against the stand-in executable: arguments, output, exit codes, configuration."""

from __future__ import annotations

import signal

import pytest

from imposition.engine import parse_layout
from imposition.engine.backends import PdfToolboxEngine
from imposition.engine.backends.base import EngineJob
from imposition.engine.errors import (
    DamagedPdf,
    EngineAborted,
    EngineConfigurationError,
    EngineCrashed,
    LicenceUnavailable,
    OutputNotSaved,
    PasswordRequired,
)
from .imposition_readback import big_labels, page_sizes_mm

N_UP = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2}


def test_imposes_through_the_stand_in(stand_in_settings, case, tmp_path):
    engine = PdfToolboxEngine(stand_in_settings)
    output = tmp_path / "out" / "plate.pdf"
    report = engine.impose(case("a5_8p.pdf"), parse_layout(N_UP), output)
    assert page_sizes_mm(output) == [pytest.approx((320, 450), abs=0.01)] * 2
    assert sorted(l.text for side in big_labels(output) for l in side) == sorted(f"P{n}" for n in range(1, 9))
    assert (report.engine, report.sheets, report.sides, report.pages_in) == ("pdftoolbox", 2, 2, 8)


def test_the_command_is_an_argument_list_from_the_settings(stand_in_settings, case, tmp_path):
    settings = stand_in_settings.model_copy(update={"pdftoolbox_variables": {"press": "indigo 12000"}})
    job = EngineJob(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "o.pdf", tmp_path, None, None, 0.0, 1.0)
    command = PdfToolboxEngine(settings).command(job)
    assert command[:4] == [settings.pdftoolbox_path, settings.pdftoolbox_process_plan, str(case("a5_8p.pdf")),
                           f"--outputfile={tmp_path / 'o.pdf'}"]
    assert "--setvariable=layout:n_up" in command and "--setvariable=columns:2" in command
    assert "--setvariable=press:indigo 12000" in command  # one argument, never split by a shell
    assert any(arg.startswith("--setvariable=sheet_width_pt:907.08") for arg in command)


@pytest.mark.parametrize("layout, variables", [
    ({"layout": "perfect_bound", "sheet": "SRA2", "signature_pages": 32}, ["signature_pages:32", "fold_scheme:F32-5"]),
    ({"layout": "perfect_bound", "sheet": "SRA2", "signature_pages": 32, "fold_scheme": "sections"},
     ["signature_pages:32", "fold_scheme:sections"]),
    ({"layout": "saddle_stitch", "sheet": "A4"}, ["fold_scheme:sections"]),
])
def test_the_process_plan_is_told_the_fold_scheme_the_planner_would_fold(stand_in_settings, case, tmp_path,
                                                                       layout, variables):
    job = EngineJob(case("a5_8p.pdf"), parse_layout(layout), tmp_path / "o.pdf", tmp_path, None, None, 0.0, 1.0)
    command = PdfToolboxEngine(stand_in_settings).command(job)
    assert all(f"--setvariable={variable}" in command for variable in variables)
    assert sum(arg.startswith("--setvariable=fold_scheme:") for arg in command) == 1


@pytest.mark.parametrize(
    "exit_code, error, retryable",
    [
        (100, LicenceUnavailable, True),
        (101, EngineConfigurationError, False),
        (102, EngineConfigurationError, False),
        (104, DamagedPdf, False),
        (105, PasswordRequired, False),
        (106, OutputNotSaved, True),
        (107, DamagedPdf, False),
        (130, EngineAborted, True),
        (134, EngineAborted, True),
        (199, EngineCrashed, True),
    ],
)
def test_exit_codes_become_typed_errors(stand_in_settings, case, tmp_path, exit_code, error, retryable):
    settings = stand_in_settings.model_copy(update={"pdftoolbox_variables": {"standin_exit": str(exit_code)}})
    output = tmp_path / "out" / "plate.pdf"
    with pytest.raises(error) as caught:
        PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), output)
    assert type(caught.value) is error and caught.value.retryable is retryable
    assert f"exit code {exit_code}" in str(caught.value)
    assert list(output.parent.iterdir()) == []


def test_exit_codes_below_100_are_success(stand_in_settings, case, tmp_path):
    settings = stand_in_settings.model_copy(update={"pdftoolbox_variables": {"standin_exit": "3"}})
    with pytest.raises(EngineCrashed, match="no readable output"):  # success, but this stand-in wrote nothing
        PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "plate.pdf")


def test_a_crash_by_signal_is_retryable(stand_in_settings, case, tmp_path):
    settings = stand_in_settings.model_copy(update={"pdftoolbox_variables": {"standin_signal": str(int(signal.SIGSEGV))}})
    with pytest.raises(EngineCrashed, match="killed by signal 11") as caught:
        PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "plate.pdf")
    assert caught.value.retryable


@pytest.mark.parametrize("field, value", [("pdftoolbox_path", "/nonexistent/pdfToolbox"),
                                          ("pdftoolbox_process_plan", "/nonexistent/plan.kfpx")])
def test_missing_executable_or_process_plan(stand_in_settings, case, tmp_path, field, value):
    settings = stand_in_settings.model_copy(update={field: value})
    with pytest.raises(EngineConfigurationError, match=field) as caught:
        PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), tmp_path / "plate.pdf")
    assert not caught.value.retryable
