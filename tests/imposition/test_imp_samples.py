"""The layout files shipped in samples/layouts (the README points users at them) parse as written and
impose, on the sample PDF samples/README.md names for each, at exit 0 and with everything they ask
for on the plate, read back (marks by their operators, bleed by the clip around each trim), and no
warning: none succeeds without what it asked for."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pikepdf
import pytest

from imposition.engine import get_engine, parse_layout
from imposition.common.settings import get_settings
from imposition.engine.folds import FOLD_SCHEMES
from .imposition_readback import MM, big_labels, circles, fills, placements, segments

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
#: 16 A5 pages: booklets and signatures print 4 pages a sheet on 2 sides; 2 × 2 grids 4 a side;
#: step-and-repeat fills one sheet with page 1. The layout asking for bleed imposes 8 pages with 3 mm
#: of bleed (handed case 7's): work and turn puts their 4 fronts and 4 backs on one plate. The 32-page
#: signatures (16 pages a side on SRA2, F32-5 named or chosen for ``signature_pages: 32``) impose 32
#: A6 pages; F16-7 puts all 16 A5 pages on one sheet, F8-7 8 on each of 2 sheets; ``perfect_bound_16``
#: asks for nested 2-up sections (``fold_scheme: sections``); the gang-up 3 + 1 copies on a side.
EXPECTED_SIDES = {
    "perfect_bound_f16_7_sra2.json": 2,
    "perfect_bound_f32_5_sra2.json": 2,
    "perfect_bound_32_sra2.json": 2,
    "saddle_stitch_f8_7_sra3.json": 4,
    "step_and_repeat_gang_sra3.json": 1,
    "n_up_registration_sra2.json": 4,
    "saddle_stitch_sra3.json": 8,
    "perfect_bound_16.json": 8,
    "n_up_2x2_sra3.json": 4,
    "cut_and_stack_2x2.json": 4,
    "n_up_work_and_turn.json": 1,
    "step_and_repeat_sra3.json": 1,
}


def sample_inputs() -> dict[str, str]:
    """Layout file → the sample PDF it runs on, from the table in samples/README.md."""
    rows = re.findall(r"^\| `([^`]+\.json)` \| `([^`]+\.pdf)` \|$", (SAMPLES / "README.md").read_text(), re.MULTILINE)
    return dict(rows)


def test_every_shipped_layout_is_covered():
    layouts = sorted(p.name for p in (SAMPLES / "layouts").glob("*.json"))
    assert layouts == sorted(EXPECTED_SIDES) == sorted(sample_inputs())
    assert all((SAMPLES / pdf).is_file() for pdf in sample_inputs().values())


@pytest.mark.parametrize("name, pdf", sorted(sample_inputs().items()))
def test_every_shipped_sample_runs_at_exit_0(tmp_path, name, pdf):
    """``imposition impose samples/<pdf> --layout samples/layouts/<name>``, as the README shows it:
    exit status 0, a plate, and no warning line."""
    output = tmp_path / "plate.pdf"
    ran = subprocess.run([sys.executable, "-m", "imposition.engine.cli", str(SAMPLES / pdf), "--layout",
                          str(SAMPLES / "layouts" / name), "-o", str(output)], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert output.is_file() and "warning" not in ran.stdout, ran.stdout


def on_line(marks, *, x=None, y=None):
    return [m for m in marks if (x is not None and abs(m.x0 - x) < 0.05 and abs(m.x1 - x) < 0.05)
            or (y is not None and abs(m.y0 - y) < 0.05 and abs(m.y1 - y) < 0.05)]


@pytest.mark.parametrize("name, sides", sorted(EXPECTED_SIDES.items()))
def test_shipped_layout_imposes_with_everything_it_asks_for(tmp_path, name, sides):
    asked = json.loads((SAMPLES / "layouts" / name).read_text())
    source = SAMPLES / sample_inputs()[name]
    scheme = parse_layout(asked).resolved().fold_scheme  # named, or chosen for signature_pages
    output = tmp_path / "plate.pdf"
    report = get_engine(get_settings()).impose(source, parse_layout(asked), output)
    assert report.warnings == ()
    with pikepdf.open(output) as plate:
        assert len(plate.pages) == report.sides == sides
    angles = big_labels(output)
    for index, side in enumerate(placements(output, source)):
        drawn = segments(output, index)
        assert all(placed.scale == pytest.approx(1) for placed in side)
        if scheme:  # the scheme's grid, heads turned on some rows
            assert len(side) == FOLD_SCHEMES[scheme].leaves
            assert {label.angle_degrees_ccw for label in angles[index]} == {0, 180}
        if asked.get("collation_marks"):  # a registration-colour mark on the spine of each front
            marks = [f for f in fills(output, index) if f.colour == "All"]
            assert len(marks) == (1 if index % 2 == 0 else 0)
        if asked.get("registration_marks"):
            assert len([c for c in circles(output, index) if c.colour == "All"]) == 4
        if asked.get("colour_bar"):
            colours = {f.colour for f in fills(output, index)}
            assert {(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), "All"} <= colours
        if asked.get("gang"):
            copies = {f"P{entry['page']}": entry.get("copies") for entry in asked["gang"]}
            counted = {label: sum(p.label == label for p in side) for label in copies}
            assert all(counted[label] == n for label, n in copies.items() if n is not None)
            assert all(counted[label] >= 1 for label in copies)
        if asked.get("crop_marks"):
            for placed in side:  # every cut line of every page carries a mark
                x0, y0, x1, y1 = placed.trim
                for x in (x0, x1):
                    assert on_line([m for m in drawn if not m.dashed], x=x), (name, placed.label, "vertical cut")
                for y in (y0, y1):
                    assert on_line([m for m in drawn if not m.dashed], y=y), (name, placed.label, "horizontal cut")
        if asked.get("fold_marks"):
            spine = min(p.trim[2] for p in side)
            folds = on_line([m for m in drawn if m.dashed], x=spine)
            top, bottom = max(p.trim[3] for p in side), min(p.trim[1] for p in side)
            assert any(min(m.y0, m.y1) >= top for m in folds) and any(max(m.y0, m.y1) <= bottom for m in folds)
        if asked.get("bleed_mm"):
            for placed in side:
                grown = [placed.trim[0] - placed.clip[0], placed.trim[1] - placed.clip[1],
                         placed.clip[2] - placed.trim[2], placed.clip[3] - placed.trim[3]]
                assert min(grown) == pytest.approx(asked["bleed_mm"] * MM, abs=0.01)
        if not (asked.get("crop_marks") or asked.get("fold_marks") or asked.get("registration_marks")):
            assert drawn == []
