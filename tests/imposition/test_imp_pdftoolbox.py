"""PdfToolboxEngine against the stand-in executable: arguments, output, exit codes, configuration."""

from __future__ import annotations

import json
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
    FixupFailed,
    LicenceUnavailable,
    OutputNotSaved,
    PasswordRequired,
    PreflightErrors,
)
from tasks.outcomes import is_infrastructure_failure
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


#: callas' table (pdfToolbox/pdfaPilot CLI "Return codes"): exit code → (error, retryable, not charged).
EXIT_TABLE = [
    (100, LicenceUnavailable, True, True),
    (101, EngineConfigurationError, True, True),
    (102, EngineConfigurationError, True, True),
    (103, EngineCrashed, True, False),
    (104, EngineConfigurationError, True, True),  # a file could not be opened: not the input's damage
    (105, PasswordRequired, False, False),
    (106, OutputNotSaved, True, False),
    (107, DamagedPdf, False, False),
    (127, EngineConfigurationError, True, True),
    (130, EngineAborted, True, False),
    (132, EngineCrashed, True, False),
    (134, EngineAborted, True, False),
    (136, EngineCrashed, True, False),
    (199, EngineCrashed, True, False),
]


@pytest.mark.parametrize("exit_code, error, retryable, uncharged", EXIT_TABLE)
def test_exit_codes_become_typed_errors(stand_in_settings, case, tmp_path, exit_code, error, retryable, uncharged):
    settings = stand_in_settings.model_copy(update={"pdftoolbox_variables": {"standin_exit": str(exit_code)}})
    output = tmp_path / "out" / "plate.pdf"
    with pytest.raises(error) as caught:
        PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), output)
    assert type(caught.value) is error and caught.value.retryable is retryable
    # the task layer's own test of "not the job's failure": retried without charging an attempt
    assert is_infrastructure_failure(caught.value) is uncharged
    assert f"exit code {exit_code}" in str(caught.value)
    assert list(output.parent.iterdir()) == []


@pytest.mark.parametrize("exit_code", [0, 1, 2, 5, 6, 7])
def test_exit_codes_below_100_without_error_hits_are_plain_success(stand_in_settings, case, tmp_path, exit_code):
    settings = stand_in_settings.model_copy(
        update={"pdftoolbox_variables": {"standin_exit_after_output": str(exit_code)}})
    output = tmp_path / "plate.pdf"
    report = PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), output)
    assert report.warnings == () and report.sides == 2
    assert sorted(l.text for side in big_labels(output) for l in side) == sorted(f"P{n}" for n in range(1, 9))


@pytest.mark.parametrize("exit_code, departure", [(3, PreflightErrors), (8, FixupFailed)])
def test_error_hits_and_failed_fixups_are_typed_warnings_or_failures_as_on_warning_says(
        stand_in_settings, case, tmp_path, exit_code, departure):
    settings = stand_in_settings.model_copy(
        update={"pdftoolbox_variables": {"standin_exit_after_output": str(exit_code)}})
    output = tmp_path / "out" / "plate.pdf"
    report = PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout(N_UP), output)
    assert [w.code for w in report.warnings] == [departure.code]
    assert f"exit code {exit_code}" in report.warnings[0].message
    assert page_sizes_mm(output) == [pytest.approx((320, 450), abs=0.01)] * 2  # the plate ships, with the warning
    output.unlink()

    with pytest.raises(departure) as caught:
        PdfToolboxEngine(settings).impose(case("a5_8p.pdf"), parse_layout({**N_UP, "on_warning": "fail"}), output)
    assert not caught.value.retryable and not is_infrastructure_failure(caught.value)
    assert caught.value.code == departure.code and f"exit code {exit_code}" in str(caught.value)
    assert list(output.parent.iterdir()) == []  # no plate under on_warning: fail


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
    assert caught.value.retryable and is_infrastructure_failure(caught.value)  # the node's fault, not the job's


#: Layouts that, with the samples, give every field of every layout kind a value.
EXTRA_LAYOUTS = [
    {"layout": "n_up", "sheet": {"width_mm": 500, "height_mm": 350}, "columns": 2, "rows": 2,
     "margin_mm": {"top_mm": 5, "right_mm": 5, "bottom_mm": 12, "left_mm": 5}, "column_gutter_mm": 4,
     "row_gutter_mm": 6},
    {"layout": "step_and_repeat", "sheet": "SRA3", "gang": [{"page": 1, "copies": 4}, {"page": 2}]},
    {"layout": "step_and_repeat", "sheet": "SRA3", "pages": [1, 3]},
]


def test_every_variable_the_process_plan_is_sent_is_documented():
    import re
    from pathlib import Path

    from imposition.engine.backends.pdftoolbox import layout_variables

    root = Path(__file__).resolve().parents[2]
    documented = set(re.findall(r"`([a-z_<>0-9]+)`", (root / "docs" / "engine.md").read_text()))
    layouts = [json.loads(path.read_text()) for path in sorted((root / "samples" / "layouts").glob("*.json"))]
    sent = {re.sub(r"_\d+_", "_<n>_", name) for layout in layouts + EXTRA_LAYOUTS
            for name in layout_variables(parse_layout(layout))}
    assert {"margin_mm_top_mm", "gang_<n>_copies", "sheet_width_mm", "column_gutter_mm", "pages"} <= sent
    assert sent - documented == set(), "document these in docs/engine.md, section pdfToolbox"
