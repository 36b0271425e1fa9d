"""Page-box fix-ups as preflight does them (issue 33, item 3): a TrimBox outside the MediaBox falls
back to the CropBox, or the MediaBox when the page has none, with one typed warning that names the
file and every page; the plates read back place each page on the box it fell back to."""

from __future__ import annotations

import pikepdf
import pytest
from pikepdf import Array, Dictionary

from imposition.engine import parse_layout
from imposition.engine.errors import TrimBoxReplaced

from .imposition_pdfs import A5_PT, MM, add_page, helvetica
from .imposition_readback import placements

N_UP = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2}
#: A TrimBox far outside an A5 MediaBox, as a broken export writes it.
OUTSIDE = [1000, 1000, 1100, 1100]
#: The CropBox of pages 5–8: 5 mm in from each edge of the A5 MediaBox.
INSET_PT = 5 * MM


def _outside_trims(path):
    """8 labelled A5 pages, every TrimBox outside the MediaBox; pages 5–8 also have a CropBox."""
    width, height = A5_PT
    crop = [INSET_PT, INSET_PT, width - INSET_PT, height - INSET_PT]
    with pikepdf.new() as pdf:
        font = helvetica(pdf)
        for number in range(1, 9):
            extra = {"CropBox": Array(crop)} if number >= 5 else {}
            add_page(pdf, number, resources=Dictionary(Font=Dictionary(F1=font)), label_box=tuple(crop),
                     TrimBox=Array(OUTSIDE), **extra)
        pdf.save(path)
    return path


def test_a_trimbox_outside_the_page_falls_back_with_one_warning_naming_every_page(any_engine, tmp_path):
    source = _outside_trims(tmp_path / "Spring catalogue.pdf")
    report = any_engine.impose(source, parse_layout(N_UP), tmp_path / "plate.pdf")
    assert [w.code for w in report.warnings] == ["trim_box_replaced"]
    message = report.warnings[0].message
    assert message.startswith("Spring catalogue.pdf: the TrimBox of 8 pages (pages 1–8) lies outside")
    assert "the MediaBox for pages 1–4" in message and "the CropBox for pages 5–8" in message
    assert report.pages_in == 8 and report.sides == 2


def test_the_plates_place_each_page_on_the_box_its_trim_fell_back_to(engine, tmp_path):
    source = _outside_trims(tmp_path / "in.pdf")
    engine.impose(source, parse_layout(N_UP), tmp_path / "plate.pdf")
    placed = {p.label: p for side in placements(tmp_path / "plate.pdf", source) for p in side}
    assert sorted(placed, key=lambda label: int(label[1:])) == [f"P{n}" for n in range(1, 9)]
    width, height = A5_PT
    for label, p in placed.items():
        x0, y0, x1, y1 = p.clip
        inset = 0 if int(label[1:]) <= 4 else 2 * INSET_PT  # the MediaBox, or the CropBox 5 mm in
        assert (x1 - x0, y1 - y0) == (pytest.approx(width - inset, abs=0.01), pytest.approx(height - inset, abs=0.01))
        assert p.scale == pytest.approx(1.0)


def test_on_warning_fail_refuses_the_fallback_naming_every_page(any_engine, tmp_path):
    source = _outside_trims(tmp_path / "Spring catalogue.pdf")
    with pytest.raises(TrimBoxReplaced, match=r"Spring catalogue\.pdf: the TrimBox of 8 pages \(pages 1–8\)") as caught:
        any_engine.impose(source, parse_layout({**N_UP, "on_warning": "fail"}), tmp_path / "out" / "plate.pdf")
    assert not caught.value.retryable
    assert list((tmp_path / "out").iterdir()) == []


def test_a_trimbox_inside_the_page_is_kept_without_a_warning(engine, tmp_path):
    width, height = A5_PT
    with pikepdf.new() as pdf:
        add_page(pdf, 1, TrimBox=Array([10, 10, width - 10, height - 10]))
        pdf.save(tmp_path / "in.pdf")
    report = engine.impose(tmp_path / "in.pdf", parse_layout(N_UP), tmp_path / "plate.pdf")
    assert report.warnings == ()
