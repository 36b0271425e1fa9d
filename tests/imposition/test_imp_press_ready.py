"""Plates a press operator signs off (issue 40), each rule read back from the plate and its JDF: no cut
marked on a fold, every mark on the printable sheet, step-and-repeat grids that leave room for their
marks, sizes kept unless shrinking is asked for, booklets within binding limits, and the smaller
notices and warnings."""

from __future__ import annotations

import math
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Array

from imposition.common.settings import Settings
from imposition.engine import parse_layout
from imposition.engine.errors import (
    BindingLimitExceeded, CreepTooLarge, DamagedPdf, NoRoomForMarks, PageTooLarge, TrimBoxClipped,
)
from imposition.engine.planning import plan_imposition
from .imposition_pdfs import MM, add_page, helvetica, labelled_pdf
from .imposition_readback import circles, fills, labels, marks_extent, page_sizes_mm, placements, segments
from .test_imp_geometry import bled_pdf
from .test_imp_jdf import MARK_KIND, NS, impose as impose_with_jdf, numbers, surfaces
from .test_imp_samples import SAMPLES

EXTENSION = "{urn:imposition:jdf:1}"
JDF = "{http://www.CIP4.org/JDFSchema_1_1}"
#: Two lengths on a plate agree to this (pt).
CLOSE = 0.05


def impose(engine, source, layout, tmp_path, name="plate.pdf"):
    output = tmp_path / name
    return output, engine.impose(source, parse_layout(layout), output)


def on_vertical(drawn, x, *, dashed):
    return [s for s in drawn if s.dashed == dashed and abs(s.x0 - x) < CLOSE and abs(s.x1 - x) < CLOSE]


def on_horizontal(drawn, y, *, dashed):
    return [s for s in drawn if s.dashed == dashed and abs(s.y0 - y) < CLOSE and abs(s.y1 - y) < CLOSE]


def length_mm(segment) -> float:
    return math.hypot(segment.x1 - segment.x0, segment.y1 - segment.y0) / MM


# --- 1. a fold is never marked as a cut -----------------------------------------------------------------

def test_a_gapless_saddle_marks_no_cut_on_the_fold_and_draws_the_fold_mark(tmp_path):
    """Saddle stitch on SRA3, no spine gap, crop and fold marks: on every plate the spine (where the
    two pages meet) carries the dashed fold mark above the head and below the foot and no solid mark;
    the fore edges keep their crop marks. The JDF lists no CutMark on the spine and the fold mark as
    an ``imp:FoldMark`` there."""
    source = SAMPLES / "a5_16p.pdf"
    layout = {"layout": "saddle_stitch", "sheet": "SRA3", "orientation": "landscape", "crop_marks": True,
              "fold_marks": True}
    plate, root, report = impose_with_jdf(tmp_path, source, layout)
    assert report.warnings == ()
    for index, ((_, _, _, surface), side) in enumerate(zip(surfaces(root), placements(plate, source), strict=True)):
        left, right = sorted(side, key=lambda p: p.trim[0])
        spine = left.trim[2]
        assert right.trim[0] == pytest.approx(spine, abs=0.01)  # no gap: the pages meet at the fold
        head, foot = max(p.trim[3] for p in side), min(p.trim[1] for p in side)
        drawn = segments(plate, index)
        assert on_vertical(drawn, spine, dashed=False) == [], f"plate {index + 1}: a cut mark on the fold"
        folds = on_vertical(drawn, spine, dashed=True)
        assert any(min(s.y0, s.y1) >= head for s in folds) and any(max(s.y0, s.y1) <= foot for s in folds)
        for fore_edge in (left.trim[0], right.trim[2]):  # the face is cut: marked above and below
            cuts = on_vertical(drawn, fore_edge, dashed=False)
            assert any(min(s.y0, s.y1) >= head for s in cuts) and any(max(s.y0, s.y1) <= foot for s in cuts)
        vertical_cuts = [numbers(cut.get("Position")) for cut in surface.iter(f"{JDF}CutMark")
                         if "VerticalCutMark" in cut.get("MarkType")]
        assert vertical_cuts and all(abs(x - spine) > CLOSE for x, _ in vertical_cuts)
        (fold_object,) = [mark for mark in surface.findall("jdf:MarkObject", NS) if mark.get(MARK_KIND) == "fold"]
        fold_marks = [(mark.get("MarkType"), numbers(mark.get("Position")))
                      for mark in fold_object.iter(f"{EXTENSION}FoldMark")]
        assert [kind for kind, _ in fold_marks] == ["VerticalFold", "VerticalFold"]
        assert all(abs(x - spine) < CLOSE for _, (x, _) in fold_marks)
        assert not list(fold_object.iter(f"{JDF}CutMark"))


def test_a_cross_fold_where_the_heads_meet_is_not_marked_as_a_cut(engine, tmp_path):
    """F8-7 with no head trim: the heads of the two rows meet at the cross fold, which gets the dashed
    fold marks left and right, and no crop mark runs along it."""
    source = SAMPLES / "a5_16p.pdf"
    layout = {"layout": "saddle_stitch", "sheet": "SRA2", "orientation": "portrait", "fold_scheme": "F8-7",
              "crop_marks": True, "fold_marks": True}
    plate, report = impose(engine, source, layout, tmp_path)
    assert report.warnings == ()
    for index, side in enumerate(placements(plate, source)):
        cross = sorted({round(y, 2) for p in side for y in (p.trim[1], p.trim[3])})[1]  # the rows meet here
        drawn = segments(plate, index)
        assert on_horizontal(drawn, cross, dashed=False) == []
        assert len(on_horizontal(drawn, cross, dashed=True)) == 2


# --- 2. a printable area always -------------------------------------------------------------------------

EVERY_MARK = {"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 2, "gutter_mm": 6, "bleed_mm": 3,
              "crop_marks": True, "registration_marks": True, "colour_bar": True, "slug": True}


def assert_inside_default_edges(output, *, gripper_at_head=False):
    defaults = Settings()
    side, gripper, tail = defaults.default_side_mm, defaults.default_gripper_mm, defaults.default_tail_mm
    head = gripper if gripper_at_head else tail
    for index, (width, height) in enumerate(page_sizes_mm(output)):
        x0, y0, x1, y1 = (v / MM for v in marks_extent(output, index))
        assert x0 >= side - 0.01 and width - x1 >= side - 0.01, f"plate {index + 1}: {x0:.2f}, {width - x1:.2f} mm"
        assert y0 >= gripper - 0.01 and height - y1 >= head - 0.01, f"plate {index + 1}: {y0:.2f}, {height - y1:.2f} mm"


def test_with_no_press_every_mark_keeps_the_default_non_printing_edges(engine, tmp_path):
    """SRA3 n-up with every mark asked and no press: bled A6 pages leave room, and every mark is drawn
    whole at least the default edges (gripper 10 mm at the foot, tail 5 mm, sides 5 mm) from the
    sheet's edges; A5 pages fill the sheet, and the marks the edges cannot hold are cut short or left
    out, each with the typed warning naming the default edge."""
    roomy = bled_pdf(tmp_path / "a6.pdf", 4, size_mm=(105.0, 148.0))
    output, report = impose(engine, roomy, EVERY_MARK, tmp_path)
    assert report.warnings == ()
    assert len(circles(output, 0)) == 4 and len(fills(output, 0)) >= 9  # four targets, a run of the colour bar
    assert [label.text for label in labels(output)[0] if label.text.startswith("job ")]
    assert {round(length_mm(s), 2) for s in segments(output, 0) if s.x0 == s.x1 or s.y0 == s.y1} >= {5.0}
    assert_inside_default_edges(output)

    tight = bled_pdf(tmp_path / "a5.pdf", 4)
    output, report = impose(engine, tight, EVERY_MARK, tmp_path, "tight.pdf")
    assert_inside_default_edges(output)
    missing = {w.message.split(" of the ")[0] for w in report.warnings if w.code == "no_room_for_marks"}
    assert any("marks at the left" in m for m in missing) and any("target at the foot" in m for m in missing)
    assert all("default" in w.message for w in report.warnings if w.code == "no_room_for_marks")
    drawn_targets = len(circles(output, 0))
    assert drawn_targets + sum("registration_marks" in m for m in missing) == 4  # drawn, or left out and said


def test_work_and_tumble_keeps_marks_off_both_gripper_edges(engine, tmp_path):
    source = bled_pdf(tmp_path / "a6.pdf", 4, size_mm=(105.0, 148.0))
    output, report = impose(engine, source, {**EVERY_MARK, "rows": 1, "duplex": "work_and_tumble"}, tmp_path)
    assert report.warnings == ()
    assert_inside_default_edges(output, gripper_at_head=True)


# --- 3. step-and-repeat leaves room for its marks -------------------------------------------------------

CARDS = {"layout": "step_and_repeat", "sheet": "SRA3", "crop_marks": True, "registration_marks": True}


def test_business_cards_with_marks_take_the_grid_that_leaves_room(engine, tmp_path):
    """85 × 55 mm cards on SRA3 with crop and registration marks and ``on_warning: fail``: the plate
    ships with fewer cards than fit edge to edge, every outer crop mark whole (5 mm), all four targets,
    everything inside the default edges."""
    card = labelled_pdf(tmp_path / "card.pdf", 1, (85 * MM, 55 * MM))
    bare, _ = impose(engine, card, {"layout": "step_and_repeat", "sheet": "SRA3"}, tmp_path, "bare.pdf")
    output, report = impose(engine, card, {**CARDS, "on_warning": "fail"}, tmp_path)
    assert report.warnings == ()
    copies, edge_to_edge = len(placements(output, card)[0]), len(placements(bare, card)[0])
    assert 0 < copies < edge_to_edge
    targets = circles(output, 0)
    assert len(targets) == 4
    centres = [(t.x, t.y) for t in targets]
    crop = [s for s in segments(output, 0)  # a target's cross is centred on its circle
            if not any(math.dist(((s.x0 + s.x1) / 2, (s.y0 + s.y1) / 2), c) < CLOSE for c in centres)]
    assert crop and all(length_mm(s) == pytest.approx(5, abs=0.01) for s in crop)
    assert_inside_default_edges(output)


def test_step_and_repeat_never_buys_copies_with_missing_marks(engine, tmp_path):
    """A Letter page on SRA3: two copies fit the landscape sheet edge to edge, one the portrait sheet
    with room for its crop marks and targets; with the marks asked, the one copy with every mark
    wins over two without theirs."""
    letter = labelled_pdf(tmp_path / "letter.pdf", 1, (612.0, 792.0))
    bare, _ = impose(engine, letter, {"layout": "step_and_repeat", "sheet": "SRA3"}, tmp_path, "bare.pdf")
    assert len(placements(bare, letter)[0]) == 2
    output, report = impose(engine, letter, CARDS, tmp_path)
    assert report.warnings == () and len(placements(output, letter)[0]) == 1
    assert page_sizes_mm(output)[0] == pytest.approx((320, 450), abs=0.01) and len(circles(output, 0)) == 4


def test_a_grid_the_layout_fixes_keeps_its_warning_or_failure(engine, tmp_path):
    card = labelled_pdf(tmp_path / "card.pdf", 1, (85 * MM, 55 * MM))
    fixed = {**CARDS, "orientation": "landscape", "columns": 5, "rows": 5}
    output, report = impose(engine, card, fixed, tmp_path)
    assert len(placements(output, card)[0]) == 25
    assert {w.code for w in report.warnings} == {"no_room_for_marks"}
    with pytest.raises(NoRoomForMarks):
        impose(engine, card, {**fixed, "on_warning": "fail"}, tmp_path, "strict.pdf")


# --- 4. size kept unless shrinking is asked for ---------------------------------------------------------

def test_a5_pages_in_cells_smaller_than_a5_fail_unless_scaling_fit(engine, tmp_path):
    source = labelled_pdf(tmp_path / "a5.pdf", 4)
    layout = {"layout": "n_up", "sheet": "A4", "orientation": "portrait", "columns": 2, "rows": 2}
    output = tmp_path / "out" / "plate.pdf"
    with pytest.raises(PageTooLarge) as caught:
        engine.impose(source, parse_layout(layout), output)
    assert caught.value.code == "page_too_large"
    message = str(caught.value)
    assert "pages 1–4 (trim 148.0 × 210.0 mm)" in message and "105.0 × 148.5 mm cell" in message
    assert "scaling 'fit' would shrink them to 70.7 %" in message
    assert not output.parent.exists() or list(output.parent.iterdir()) == []
    output, report = impose(engine, source, {**layout, "scaling": "fit"}, tmp_path)
    assert [w.code for w in report.warnings] == ["scaled_to_fit"]
    assert all(p.scale == pytest.approx(0.707, abs=0.001) for p in placements(output, source)[0])


# --- 5. binding limits -----------------------------------------------------------------------------------

def test_a_400_page_saddle_stitch_fails_at_the_binding_limit_and_64_pages_bind(engine, tmp_path):
    layout = {"layout": "saddle_stitch", "sheet": "SRA3", "orientation": "landscape"}
    thick = labelled_pdf(tmp_path / "400.pdf", 400)
    with pytest.raises(BindingLimitExceeded) as caught:
        engine.impose(thick, parse_layout(layout), tmp_path / "thick.pdf")
    assert caught.value.code == "binding_limit" and caught.value.retryable is False
    message = str(caught.value)
    assert "100 sheets, 20.0 mm thick" in message and "paper_caliper_mm=0.1" in message
    assert "saddle_stitch_max_sheets=30" in message and "perfect_bound" in message
    output, report = impose(engine, labelled_pdf(tmp_path / "64.pdf", 64), layout, tmp_path)
    assert (report.sheets, report.warnings) == (16, ())


def a5_boxes(count):
    from imposition.engine.geometry import PageBoxes, Rect

    a5 = Rect(0, 0, 148 * MM, 210 * MM)
    return [PageBoxes(crop=a5, trim=a5, bleed=a5)] * count


def test_a_thick_paper_reaches_the_thickness_limit_first():
    spec = parse_layout({"layout": "saddle_stitch", "sheet": "SRA3", "paper_caliper_mm": 0.3})
    assert plan_imposition(spec, a5_boxes(40)).sheets == 10  # 10 sheets, 6.0 mm: at the limit
    with pytest.raises(BindingLimitExceeded, match=r"11 sheets, 6.6 mm thick .* saddle_stitch_max_thickness_mm=6"):
        plan_imposition(spec, a5_boxes(44))


def test_creep_past_the_spine_safe_area_is_refused_naming_pages_and_millimetres():
    """24 pages are 6 nested sheets: creep 5 mm moves the inner sheets' pages 5–25 mm; 0.5 mm moves
    them at most 2.5 mm, inside the default 3 mm safe area."""
    layout = {"layout": "saddle_stitch", "sheet": "SRA3", "creep_mm": 5}
    with pytest.raises(CreepTooLarge) as caught:
        plan_imposition(parse_layout(layout), a5_boxes(24))
    assert caught.value.code == "creep_too_large"
    assert "pages 3–22 would move 5.0–25.0 mm toward the spine" in str(caught.value)
    assert "spine_safe_area_mm=3" in str(caught.value)
    assert plan_imposition(parse_layout({**layout, "creep_mm": 0.5}), a5_boxes(24)).sheets == 6
    assert plan_imposition(parse_layout({**layout, "spine_safe_area_mm": 25}), a5_boxes(24)).sheets == 6


# --- 6. the smaller ones -----------------------------------------------------------------------------------

def test_a_trimbox_reaching_outside_or_enclosing_the_page_warns_naming_the_pages(any_engine, tmp_path):
    """Page 2's TrimBox reaches 20 mm past its MediaBox's right edge, page 3's encloses the MediaBox:
    both are imposed on the part inside, and one warning names them and the trim they have."""
    width, height = 148 * MM, 210 * MM
    with pikepdf.new() as pdf:
        font = helvetica(pdf)
        resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font))
        add_page(pdf, 1, resources=resources, TrimBox=Array([0, 0, width, height]))
        add_page(pdf, 2, resources=resources, TrimBox=Array([10 * MM, 0, width + 20 * MM, height]))
        add_page(pdf, 3, resources=resources, TrimBox=Array([-5, -5, width + 5, height + 5]))
        pdf.save(tmp_path / "clipped.pdf")
    layout = {"layout": "n_up", "sheet": "A3", "columns": 2, "rows": 2}
    report = any_engine.impose(tmp_path / "clipped.pdf", parse_layout(layout), tmp_path / "plate.pdf")
    (warning,) = [w for w in report.warnings if w.code == "trim_box_clipped"]
    assert warning.message.startswith("clipped.pdf: the TrimBox of 2 pages (pages 2–3) reaches outside the page")
    assert "138.0 × 210.0 mm" in warning.message and "148.0 × 210.0 mm" in warning.message
    with pytest.raises(TrimBoxClipped):
        any_engine.impose(tmp_path / "clipped.pdf", parse_layout({**layout, "on_warning": "fail"}),
                          tmp_path / "strict.pdf")


def test_every_damaged_file_message_names_the_file(engine, tmp_path):
    """A damage the drawing finds (page 2's /Contents is a number) is reported with the file's name,
    like every other damaged-file message."""
    with pikepdf.open(labelled_pdf(tmp_path / "plain.pdf", 4)) as pdf:
        pdf.pages[1].obj.Contents = 7
        pdf.save(tmp_path / "cyclic-toc.pdf")
    with pytest.raises(DamagedPdf) as caught:
        engine.impose(tmp_path / "cyclic-toc.pdf", parse_layout({"layout": "n_up", "sheet": "A3", "columns": 2,
                                                                 "rows": 1}), tmp_path / "plate.pdf")
    assert str(caught.value).startswith("cyclic-toc.pdf: page 2: /Contents is 7")


def test_the_docs_name_the_module_that_holds_the_infrastructure_rule():
    engine_doc = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    assert "tasks.base.is_infrastructure_failure" not in engine_doc
    assert "tasks.outcomes.is_infrastructure_failure" in engine_doc
