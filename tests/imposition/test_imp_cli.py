"""``imposition impose``: the engine alone, from the command line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from imposition.engine.cli import impose_command
from .imposition_readback import page_sizes_mm


def test_impose_prints_a_one_line_summary(case, tmp_path):
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps({"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}))
    output = tmp_path / "plate.pdf"
    result = CliRunner().invoke(impose_command, [str(case("a5_13p_odd.pdf")), "--layout", str(layout), "-o", str(output)])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert "8 sides on 4 sheets from 13 pages (3 blank)" in lines[0] and "pikepdf" in lines[0]
    assert lines[1] == f"jdf {tmp_path / 'plate.jdf'}" and (tmp_path / "plate.jdf").stat().st_size > 0
    # 3 blanks are more than half a 4-page sheet: the one warning, on a line of its own
    assert len(lines) == 3 and "padded_with_blanks" in lines[2]
    assert len(page_sizes_mm(output)) == 8


def test_impose_reports_a_typed_error_and_exits_1(case, tmp_path):
    result = CliRunner().invoke(impose_command, [str(case("encrypted_user_pw_8p.pdf")), "--layout",
                                                 '{"layout": "n_up", "sheet": "A4"}', "-o", str(tmp_path / "p.pdf")])
    assert result.exit_code == 1 and "password_required" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither a plate nor a JDF, nor their partials


def test_impose_refuses_a_bad_layout_as_a_usage_error_exit_2(case, tmp_path):
    pdf = str(case("a5_8p.pdf"))
    bad = CliRunner().invoke(impose_command, [pdf, "--layout", '{"layout": "n_up", "sheet": "SRA3", "columns": 200}',
                                              "-o", str(tmp_path / "p.pdf")])
    assert bad.exit_code == 2 and "invalid_layout" in bad.output and "columns" in bad.output and "50" in bad.output
    missing = CliRunner().invoke(impose_command, [pdf, "--layout", str(tmp_path / "none.json"), "-o", str(tmp_path / "p.pdf")])
    assert missing.exit_code == 2 and "cannot read layout file" in missing.output
    assert not (tmp_path / "p.pdf").exists()


def test_impose_with_the_pdftoolbox_engine(case, tmp_path, stand_in_settings, monkeypatch):
    from imposition.common.settings import get_settings

    monkeypatch.setenv("IMPOSITION_PDFTOOLBOX_PATH", stand_in_settings.pdftoolbox_path)
    monkeypatch.setenv("IMPOSITION_PDFTOOLBOX_PROCESS_PLAN", stand_in_settings.pdftoolbox_process_plan)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(impose_command, [str(case("a5_8p.pdf")), "--layout", '{"layout": "n_up", "sheet": "SRA3"}',
                                                     "-o", str(tmp_path / "p.pdf"), "--engine", "pdftoolbox"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "with pdftoolbox" in result.output
    assert "jdf" not in result.output and not (tmp_path / "p.jdf").exists()  # pdfToolbox writes no JDF
