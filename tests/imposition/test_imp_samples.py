"""The layout files shipped in samples/layouts (the README points users at them) parse as written
and impose the 16-page sample with the sides each layout must give."""

from __future__ import annotations

from pathlib import Path

import pikepdf
import pytest

from imposition import get_engine, parse_layout
from service.settings import get_settings

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
#: 16 A5 pages: booklets and signatures print 4 pages a sheet on 2 sides; 2 × 2 grids 4 a side;
#: work-and-turn puts front and back on one plate; step-and-repeat fills one sheet with page 1.
EXPECTED_SIDES = {
    "saddle_stitch_a4.json": 8,
    "perfect_bound_16.json": 8,
    "n_up_2x2_sra3.json": 4,
    "cut_and_stack_2x2.json": 4,
    "n_up_work_and_turn.json": 2,
    "step_and_repeat_sra3.json": 1,
}


def test_every_shipped_layout_is_covered():
    assert sorted(p.name for p in (SAMPLES / "layouts").glob("*.json")) == sorted(EXPECTED_SIDES)


@pytest.mark.parametrize("name, sides", sorted(EXPECTED_SIDES.items()))
def test_shipped_layout_imposes_the_sample(tmp_path, name, sides):
    spec = parse_layout((SAMPLES / "layouts" / name).read_text())
    report = get_engine(get_settings()).impose(SAMPLES / "a5_16p.pdf", spec, tmp_path / "plate.pdf")
    with pikepdf.open(tmp_path / "plate.pdf") as plate:
        assert len(plate.pages) == report.sides == sides
