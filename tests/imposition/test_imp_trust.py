"""Plates a press can trust (issue 13): damaged input fails, every departure is a typed warning,
backs register with fronts, the slug stays off the pages, and only what should print prints.

Every check reads the plate back (placements and marks from its operators, text with pdfminer,
pixels with pdfium); none trusts the engine's own report beyond the warnings it must carry.
"""

from __future__ import annotations

import re

import pikepdf
import pytest
from pikepdf import Array, Dictionary, Name

from imposition.engine import parse_layout
from imposition.engine.errors import DamagedPdf, ImpositionError, NoRoomForMarks, Repaired, ScaledToFit
from .imposition_pdfs import MM, add_page, labelled_pdf
from .imposition_readback import Raster, big_labels, labels, placements, segments

A6_PT = (105 * MM, 148 * MM)


def impose(engine, source, layout, tmp_path, name="plate.pdf"):
    output = tmp_path / name
    report = engine.impose(source, parse_layout(layout), output)
    return output, report


def codes(report):
    return [warning.code for warning in report.warnings]


def object_span(data: bytes, objgen: tuple[int, int]) -> tuple[int, int]:
    """Byte span of ``n g obj … endobj`` in an uncompressed PDF."""
    start = re.search(rb"(?<![0-9])%d %d obj" % objgen, data).start()
    return start, data.index(b"endobj", start) + len(b"endobj")


# --- 1. input truth -------------------------------------------------------------------------------------

def test_a_pdf_cut_in_half_fails_damaged_naming_exactly_the_pages_it_lost(engine, tmp_path):
    source = labelled_pdf(tmp_path / "whole.pdf", 8)
    data = source.read_bytes()
    cut = len(data) // 2
    with pikepdf.open(source) as pdf:  # which pages' content streams lie past the cut, from the whole file
        lost = [n for n, page in enumerate(pdf.pages, start=1) if object_span(data, page.obj.Contents.objgen)[1] > cut]
    assert 0 < len(lost) < 8
    half = tmp_path / "half.pdf"
    half.write_bytes(data[:cut])
    with pytest.raises(DamagedPdf) as caught:
        impose(engine, half, {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}, tmp_path)
    assert caught.value.code == "damaged"
    named = caught.value.message.split("(pages ")[1].split(")")[0]
    expected = f"{lost[0]}–{lost[-1]}" if len(lost) > 1 else str(lost[0])
    assert named == expected and lost == list(range(lost[0], lost[-1] + 1))
    assert not (tmp_path / "plate.pdf").exists()


def test_a_page_whose_content_stream_object_is_gone_fails_damaged_naming_it(engine, tmp_path):
    source = labelled_pdf(tmp_path / "whole.pdf", 4)
    data = bytearray(source.read_bytes())
    with pikepdf.open(source) as pdf:
        start, end = object_span(bytes(data), pdf.pages[2].obj.Contents.objgen)
    data[start:end] = b" " * (end - start)  # the object is gone; offsets of the others unchanged
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(bytes(data))
    with pytest.raises(DamagedPdf, match=r"1 of 4 pages cannot be read \(pages 3\): page 3: its content stream"):
        impose(engine, broken, {"layout": "n_up", "sheet": "A3", "columns": 2, "rows": 2}, tmp_path)


def test_a_page_without_contents_is_a_blank_page_not_damage(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 2)
    with pikepdf.open(source, allow_overwriting_input=True) as pdf:
        del pdf.pages[1].obj["/Contents"]
        pdf.save(source)
    output, report = impose(engine, source, {"layout": "n_up", "sheet": "A4", "columns": 2, "rows": 1}, tmp_path)
    assert [l.text for l in big_labels(output)[0]] == ["P1"] and report.warnings == ()


def test_a_repaired_whole_file_imposes_every_page_and_warns_repaired(engine, case, tmp_path):
    data = case("a5_8p.pdf").read_bytes()
    repaired = tmp_path / "no-xref.pdf"
    repaired.write_bytes(data[: data.rindex(b"xref")])  # cross-reference table and trailer lost
    output, report = impose(engine, repaired, {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"},
                            tmp_path)
    assert sorted(l.text for side in big_labels(output) for l in side) == sorted(f"P{n}" for n in range(1, 9))
    assert codes(report) == ["repaired"] and "no-xref.pdf" in report.warnings[0].message
    with pytest.raises(Repaired, match="on_warning=fail: repaired"):
        impose(engine, repaired, {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape",
                                  "on_warning": "fail"}, tmp_path, name="strict.pdf")
    assert not (tmp_path / "strict.pdf").exists()


# --- 2. warnings that reach people ----------------------------------------------------------------------

OLD_WORK_AND_TURN = {"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 2, "duplex": "work_and_turn",
                     "bleed_mm": 3, "crop_marks": True, "scaling": "fit"}


def test_scaling_to_fit_is_a_warning_with_the_scale_the_plate_has(engine, case, tmp_path):
    output, report = impose(engine, case("trim_bleed_3mm_8p.pdf"), OLD_WORK_AND_TURN, tmp_path)
    placed = [p for side in placements(output, case("trim_bleed_3mm_8p.pdf")) for p in side]
    scale = min(p.scale for p in placed)
    assert scale < 0.8
    (scaled,) = [w for w in report.warnings if w.code == "scaled_to_fit"]
    assert f"{scale * 100:.1f} %" in scaled.message and "pages 1–8" in scaled.message
    with pytest.raises(ScaledToFit) as caught:
        impose(engine, case("trim_bleed_3mm_8p.pdf"), {**OLD_WORK_AND_TURN, "on_warning": "fail"}, tmp_path, "x.pdf")
    assert caught.value.code == "scaled_to_fit"


def test_crop_marks_and_bleed_are_drawn_around_every_page_once_room_is_reserved(engine, case, tmp_path):
    source = case("trim_bleed_3mm_8p.pdf")
    output, report = impose(engine, source, {**OLD_WORK_AND_TURN, "sheet": "SRA2", "gutter_mm": 6}, tmp_path)
    assert report.warnings == ()  # at 100 %, with the marks and the bleed whole
    for index, side in enumerate(placements(output, source)):
        marks = [s for s in segments(output, index) if not s.dashed]
        for placed in side:
            x0, y0, x1, y1 = placed.trim
            cx0, cy0, cx1, cy1 = placed.clip
            assert placed.scale == pytest.approx(1)
            assert min(x0 - cx0, y0 - cy0, cx1 - x1, cy1 - y1) == pytest.approx(3 * MM, abs=0.01)  # bleed kept
            for x in (x0, x1):  # each vertical cut is marked above and below the block
                on_line = [m for m in marks if abs(m.x0 - x) < 0.05 and abs(m.x1 - x) < 0.05]
                assert any(min(m.y0, m.y1) >= y1 for m in on_line) or any(
                    q.trim[1] > y1 for q in side if abs(q.trim[0] - x0) < 0.05)
                assert any(max(m.y0, m.y1) <= y0 for m in on_line) or any(
                    q.trim[3] < y0 for q in side if abs(q.trim[0] - x0) < 0.05)


def test_no_room_for_marks_names_the_missing_millimetres_and_can_fail_the_job(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 2)
    layout = {"layout": "n_up", "sheet": "A4", "orientation": "landscape", "columns": 2, "rows": 1,
              "crop_marks": True, "scaling": "none", "margin_mm": 0, "gripper_mm": 0}  # marks may reach the edge
    output, report = impose(engine, source, layout, tmp_path)
    missing = [w for w in report.warnings if w.code == "no_room_for_marks"]
    assert {re.search(r"at the (\w+) of", w.message).group(1) for w in missing} == {"left", "right", "head", "foot"}
    by_edge = {re.search(r"at the (\w+) of", w.message).group(1): w.message for w in missing}
    assert all("need 8.0 mm" in message for message in by_edge.values())
    # two 148 mm pages on the 297 mm sheet leave 0.5 mm left and right; 210 mm pages fill its height
    assert "leaves 0.5 mm: 7.5 mm missing" in by_edge["left"] and "leaves 0.5 mm: 7.5 mm missing" in by_edge["right"]
    assert "leaves 0.0 mm: 8.0 mm missing" in by_edge["head"] and "leaves 0.0 mm: 8.0 mm missing" in by_edge["foot"]
    assert segments(output, 0) == []  # the pages fill the sheet: not one mark could be drawn
    with pytest.raises(NoRoomForMarks, match="mm missing"):
        impose(engine, source, {**layout, "on_warning": "fail"}, tmp_path, "strict.pdf")


def test_fold_marks_asked_are_drawn_on_the_spine_outside_the_trims(engine, case, tmp_path):
    source = case("a5_8p.pdf")
    output, report = impose(engine, source, {"layout": "saddle_stitch", "sheet": "SRA3", "orientation": "landscape",
                                             "fold_marks": True}, tmp_path)
    assert report.warnings == ()
    for index, side in enumerate(placements(output, source)):
        left, right = sorted(side, key=lambda p: p.trim[0])
        spine = left.trim[2]
        assert right.trim[0] == pytest.approx(spine, abs=0.01)
        folds = [s for s in segments(output, index) if s.dashed and abs(s.x0 - spine) < 0.05]
        assert any(min(s.y0, s.y1) >= left.trim[3] for s in folds) and any(max(s.y0, s.y1) <= left.trim[1] for s in folds)


def test_step_and_repeat_counts_copies_after_the_room_for_marks(engine, tmp_path):
    card = labelled_pdf(tmp_path / "card.pdf", 1, (88 * MM, 63 * MM))
    output, report = impose(engine, card, {"layout": "step_and_repeat", "sheet": "SRA3", "crop_marks": True}, tmp_path)
    (side,) = placements(output, card)
    # 88 × 63 mm with 8 mm for marks all round: portrait 3 × 6 (not the 25 that fit with no marks)
    assert len(side) == 18 and report.warnings == ()
    width, height = 320 * MM, 450 * MM
    for placed in side:
        x0, y0, x1, y1 = placed.trim
        assert min(x0, y0, width - x1, height - y1) >= 8 * MM - 0.01
    marks = segments(output, 0)
    for x in {round(p.trim[0], 2) for p in side} | {round(p.trim[2], 2) for p in side}:
        assert any(abs(m.x0 - x) < 0.05 and m.x0 == m.x1 for m in marks)


# --- 3. press-safe geometry ----------------------------------------------------------------------------

def leaves(side_placements):
    """Placements by label."""
    return {p.label: p for p in side_placements}


def turned_corners(trim, turn):
    """The trim's corners through ``turn``, sorted, flattened to ``[x, y, x, y, …]`` in mm."""
    x0, y0, x1, y1 = trim
    points = sorted(turn(x, y) for x in (x0, x1) for y in (y0, y1))
    return [value / MM for point in points for value in point]


def corners(trim):
    return turned_corners(trim, lambda x, y: (x, y))


def assert_registered(front, back, turn, pages):
    """Every front trim corner of page 2k-1, through the turn, is a trim corner of page 2k (0.1 mm)."""
    for odd in range(1, pages, 2):
        mapped = turned_corners(front[f"P{odd}"].trim, turn)
        actual = corners(back[f"P{odd + 1}"].trim)
        assert mapped == pytest.approx(actual, abs=0.1), f"P{odd} does not back onto P{odd + 1}"


@pytest.mark.parametrize("margin", [{"left_mm": 20}, {"left_mm": 20, "top_mm": 7}, {"right_mm": 12, "bottom_mm": 4}])
def test_work_and_turn_backs_register_with_any_margins_and_gripper(engine, tmp_path, margin):
    source = labelled_pdf(tmp_path / "in.pdf", 8, A6_PT)
    layout = {"layout": "n_up", "sheet": "SRA3", "orientation": "landscape", "columns": 2, "rows": 2,
              "duplex": "work_and_turn", "margin_mm": margin, "gripper_mm": 10, "crop_marks": True, "scaling": "fit"}
    output, _ = impose(engine, source, layout, tmp_path)
    width = 450 * MM
    for side in placements(output, source):
        both = leaves(side)
        assert_registered(both, both, lambda x, y: (width - x, y), len(both))


@pytest.mark.parametrize("gripper_mm", [0, 15])
def test_work_and_tumble_backs_register_with_a_gripper(engine, tmp_path, gripper_mm):
    source = labelled_pdf(tmp_path / "in.pdf", 4, A6_PT)
    layout = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 1,
              "duplex": "work_and_tumble", "gripper_mm": gripper_mm, "margin_mm": {"left_mm": 9}}
    output, _ = impose(engine, source, layout, tmp_path)
    height = 450 * MM
    for side in placements(output, source):
        both = leaves(side)
        assert_registered(both, both, lambda x, y: (x, height - y), len(both))
    upside_down = {l.text for l in big_labels(output)[0] if l.angle_degrees_ccw == 180}
    assert upside_down == {"P2", "P4"}


def test_sheetwise_backs_register_with_margins_and_gripper(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 8, A6_PT)
    layout = {"layout": "n_up", "sheet": "A3", "orientation": "portrait", "columns": 2, "rows": 2,
              "duplex": "sheetwise", "margin_mm": {"left_mm": 20, "top_mm": 3}, "gripper_mm": 15}
    output, _ = impose(engine, source, layout, tmp_path)
    sides = placements(output, source)
    width = 297 * MM
    for front, back in zip(sides[::2], sides[1::2]):
        assert_registered(leaves(front), leaves(back), lambda x, y: (width - x, y), 2 * len(front))


def test_booklet_work_and_turn_registers_with_a_left_margin(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 8, A6_PT)
    layout = {"layout": "saddle_stitch", "sheet": "A3", "orientation": "landscape", "duplex": "work_and_turn",
              "margin_mm": {"left_mm": 20}, "scaling": "fit"}
    output, _ = impose(engine, source, layout, tmp_path)
    for side in placements(output, source):
        both = leaves(side)
        pairs = [(n, n + 1) for n in range(1, 9, 2) if f"P{n}" in both]
        for odd, even in pairs:
            assert turned_corners(both[f"P{odd}"].trim, lambda x, y: (420 * MM - x, y)) == pytest.approx(
                corners(both[f"P{even}"].trim), abs=0.1)


def test_the_gripper_strip_stays_empty(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 4, A6_PT)
    output, _ = impose(engine, source, {"layout": "n_up", "sheet": "A4", "orientation": "portrait", "columns": 2,
                                        "rows": 2, "gripper_mm": 15, "crop_marks": True, "scaling": "fit"}, tmp_path)
    raster = Raster(output, dots_per_pt=2)
    assert raster.ink(0, 0, 210 * MM, 15 * MM - 0.5) == 0  # a mark may end on the strip's edge
    assert all(p.clip[1] >= 15 * MM for p in placements(output, source)[0])


def slug_label(output, index):
    (slug,) = [l for l in labels(output)[index] if l.text.startswith("job ")]
    return slug


def overlaps(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_the_slug_sits_outside_every_trim_and_bleed_and_names_the_sheet(engine, case, tmp_path):
    from imposition.engine import SlugInfo

    source = case("trim_bleed_3mm_8p.pdf")
    layout = {"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 2, "duplex": "sheetwise",
              "bleed_mm": 3, "gutter_mm": 6, "crop_marks": True, "slug": True, "margin_mm": {"left_mm": 10}}
    output = tmp_path / "plate.pdf"
    report = engine.impose(source, parse_layout(layout), output, slug=SlugInfo("job-9", "acme", "2024-05-31"))
    sides = placements(output, source)
    assert len(sides) == 2
    for index, side in enumerate(sides):
        slug = slug_label(output, index)
        sheet, face = index // 2 + 1, ("front", "back")[index % 2]
        assert slug.text == f"job job-9 | tenant acme | sheet {sheet} of {len(sides) // 2} | {face} | 2024-05-31"
        assert slug.bbox[0] >= 10 * MM  # inside the printable area, not in the left margin
        for placed in side:
            assert not overlaps(slug.bbox, placed.clip)
        for mark in segments(output, index):
            assert not overlaps(slug.bbox, (min(mark.x0, mark.x1) - 0.2, min(mark.y0, mark.y1) - 0.2,
                                            max(mark.x0, mark.x1) + 0.2, max(mark.y0, mark.y1) + 0.2))
    assert "no_room_for_slug" not in codes(report)


def test_a_slug_with_no_room_is_dropped_with_a_warning(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 2)
    output, report = impose(engine, source, {"layout": "n_up", "sheet": "A4", "orientation": "landscape",
                                             "columns": 2, "rows": 1, "slug": True, "scaling": "none"}, tmp_path)
    assert [l for l in labels(output)[0] if l.text.startswith("job ")] == []
    (dropped,) = [w for w in report.warnings if w.code == "no_room_for_slug"]
    assert "plates 1" in dropped.message


# --- 4. what prints ------------------------------------------------------------------------------------

def square_appearance(pdf, colour):
    return pdf.make_stream(f"{colour} rg 0 0 60 60 re f".encode(), Type=Name.XObject, Subtype=Name.Form,
                           BBox=[0, 0, 60, 60])


def test_only_annotations_that_print_are_flattened(engine, tmp_path):
    with pikepdf.new() as pdf:
        page = add_page(pdf, 1)
        printed = Dictionary(Type=Name.Annot, Subtype=Name.Square, Rect=[50, 300, 110, 360], F=4,
                             AP=Dictionary(N=square_appearance(pdf, "0 0 1")))
        screen_only = Dictionary(Type=Name.Annot, Subtype=Name.Square, Rect=[250, 300, 310, 360], F=0,
                                 AP=Dictionary(N=square_appearance(pdf, "1 0 0")))
        page.obj.Annots = pdf.make_indirect(Array([pdf.make_indirect(printed), pdf.make_indirect(screen_only)]))
        pdf.save(tmp_path / "in.pdf")
    output, _ = impose(engine, tmp_path / "in.pdf", {"layout": "n_up", "sheet": "A5", "columns": 1, "rows": 1},
                       tmp_path)
    raster = Raster(output)
    blue = sum(1 for x in range(55, 105, 5) for y in range(305, 355, 5) if raster.rgb(x, y)[2] > 200 > raster.rgb(x, y)[0])
    red = sum(1 for x in range(255, 305, 5) for y in range(305, 355, 5) if raster.rgb(x, y)[0] > 200 > raster.rgb(x, y)[2])
    assert blue > 50 and red == 0


def test_optional_content_off_by_default_is_absent_and_on_is_present(engine, tmp_path):
    with pikepdf.new() as pdf:
        shown = pdf.make_indirect(Dictionary(Type=Name.OCG, Name=pikepdf.String("shown")))
        hidden = pdf.make_indirect(Dictionary(Type=Name.OCG, Name=pikepdf.String("hidden")))
        hidden_form = pdf.make_stream(b"0 1 0 rg 0 0 60 60 re f", Type=Name.XObject, Subtype=Name.Form,
                                      BBox=[0, 0, 60, 60], OC=hidden)
        content = (b"/OC /Shown BDC 0 0 1 rg 50 300 60 60 re f EMC\n"
                   b"/OC /Hidden BDC 1 0 0 rg 250 300 60 60 re f BT /F1 20 Tf 250 400 Td (SECRET) Tj ET EMC\n"
                   b"q 1 0 0 1 150 100 cm /Fm0 Do Q\n"
                   b"BT /F1 40 Tf 150 500 Td (P1) Tj ET\n")
        font = Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica)
        add_page(pdf, 1, content=content, resources=Dictionary(
            Font=Dictionary(F1=font), Properties=Dictionary(Shown=shown, Hidden=hidden),
            XObject=Dictionary(Fm0=hidden_form)))
        pdf.Root.OCProperties = Dictionary(OCGs=Array([shown, hidden]), D=Dictionary(OFF=Array([hidden])))
        pdf.save(tmp_path / "in.pdf")
    output, _ = impose(engine, tmp_path / "in.pdf", {"layout": "n_up", "sheet": "A5", "columns": 1, "rows": 1},
                       tmp_path)
    raster = Raster(output)
    assert raster.rgb(80, 330)[2] > 200 > raster.rgb(80, 330)[0]  # the layer that is on
    assert raster.rgb(280, 330) == (255, 255, 255)  # the layer that is off
    assert raster.rgb(180, 130) == (255, 255, 255)  # a form whose /OC is off
    assert "SECRET" not in " ".join(l.text for l in labels(output)[0])
    with pikepdf.open(output) as plate:
        assert b"SECRET" not in b"".join(x.read_bytes() for x in plate.pages[0].Resources.XObject.values())


def test_the_pdfx_output_intent_is_carried_onto_the_plate(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 2)
    with pikepdf.open(source, allow_overwriting_input=True) as pdf:
        pdf.Root.OutputIntents = Array([pdf.make_indirect(Dictionary(
            Type=Name.OutputIntent, S=Name.GTS_PDFX, OutputConditionIdentifier=pikepdf.String("FOGRA39"),
            RegistryName=pikepdf.String("http://www.color.org")))])
        pdf.save(source)
    output, _ = impose(engine, source, {"layout": "n_up", "sheet": "A4", "columns": 2, "rows": 1}, tmp_path)
    with pikepdf.open(output) as plate:
        (intent,) = plate.Root.OutputIntents
        assert (intent.S, str(intent.OutputConditionIdentifier)) == (Name.GTS_PDFX, "FOGRA39")


def test_every_warning_code_is_a_typed_error_for_on_warning_fail():
    from imposition.engine.errors import ERRORS_BY_CODE, Departure

    for code in ("repaired", "scaled_to_fit", "no_room_for_marks", "bleed_reduced", "no_room_for_slug"):
        assert issubclass(ERRORS_BY_CODE[code], Departure) and issubclass(ERRORS_BY_CODE[code], ImpositionError)
