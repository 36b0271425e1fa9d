"""Issue 33, items 1, 2, 4 and 5: booklets a binder accepts, orientation, press presets, padding and the
fold catalogue. Every check reads the plate back: where each page's trim and clip land (mm, from the
plate's own ``cm``/``re W n``), which way its label reads, the marks' strokes and the colour bar's fills.
"""

from __future__ import annotations

import json
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Array, Dictionary

from imposition.common.settings import Settings
from imposition.engine import parse_layout
from imposition.engine.errors import InvalidLayout, PaddedWithBlanks, TrimSizeMismatch, is_notice
from imposition.engine.folds import FOLD_SCHEMES
from imposition.engine.presses import PRESSES
from .imposition_pdfs import MM, add_page, helvetica, labelled_pdf
from .imposition_readback import big_labels, fills, marks_extent, page_sizes_mm, placements, segments
from .test_imp_samples import sample_inputs

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
BLEED_MM = 3.0


def bled_pdf(path: Path, count: int, *, landscape_even: bool = False, size_mm=(148.0, 210.0)) -> Path:
    """``count`` labelled pages of an A5 trim (even pages landscape with ``landscape_even``), each with
    3 mm of bleed: MediaBox = BleedBox, TrimBox 3 mm inside."""
    bleed = BLEED_MM * MM
    with pikepdf.new() as pdf:
        font = helvetica(pdf)
        for number in range(1, count + 1):
            width, height = (size_mm[1], size_mm[0]) if landscape_even and number % 2 == 0 else size_mm
            trim = (bleed, bleed, bleed + width * MM, bleed + height * MM)
            media = (width * MM + 2 * bleed, height * MM + 2 * bleed)
            add_page(pdf, number, media, label_box=trim, resources=Dictionary(Font=Dictionary(F1=font)),
                     TrimBox=Array(list(trim)), BleedBox=Array([0, 0, *media]))
        pdf.save(path)
    return path


def impose(engine, source, layout, tmp_path, name="plate.pdf"):
    output = tmp_path / name
    report = engine.impose(source, parse_layout(layout), output)
    return output, report


def in_mm(rect):
    return tuple(round(v / MM, 2) for v in rect)


def bleed_kept_mm(placed):
    """``(left, bottom, right, top)`` bleed a placed page keeps: its clip beyond its trim, mm."""
    (tx0, ty0, tx1, ty1), (cx0, cy0, cx1, cy1) = placed.trim, placed.clip
    return tuple(round(v / MM, 2) for v in (tx0 - cx0, ty0 - cy0, cx1 - tx1, cy1 - ty1))


# --- item 1: booklet geometry a binder accepts -----------------------------------------------------------

@pytest.mark.parametrize("on_warning, binding", [("warn", "left_to_right"), ("fail", "left_to_right"),
                                                 ("fail", "right_to_left")])
def test_bled_a5_saddle_stitch_keeps_bleed_on_trimmed_edges_only(engine, tmp_path, on_warning, binding):
    source = bled_pdf(tmp_path / "bled.pdf", 8)
    output, report = impose(engine, source, {"layout": "saddle_stitch", "sheet": "SRA3", "bleed_mm": 3,
                                             "on_warning": on_warning, "binding": binding}, tmp_path)
    assert report.warnings == ()
    assert page_sizes_mm(output) == [pytest.approx((320, 450), abs=0.01)] * 4  # portrait holds 2 A5 at 100 %
    for side in placements(output, source):
        by_label = {p.label: p for p in side}
        left, right = sorted(side, key=lambda p: p.trim[0])
        assert in_mm(left.trim) == pytest.approx((12, 120, 160, 330), abs=0.01)  # 296 mm centred, spine at 160
        assert in_mm(right.trim) == pytest.approx((160, 120, 308, 330), abs=0.01)
        assert bleed_kept_mm(left) == pytest.approx((3, 3, 0, 3), abs=0.01)  # none at the spine (its right)
        assert bleed_kept_mm(right) == pytest.approx((0, 3, 3, 3), abs=0.01)
        assert all(p.scale == pytest.approx(1) for p in by_label.values())


@pytest.mark.parametrize("on_warning", ["warn", "fail"])
def test_bled_a5_f16_7_perfect_bound_trims_between_pages(engine, tmp_path, on_warning):
    """F16-7 on SRA2 landscape with 3 mm bleed: the fore edges of P1|P4 meet 2 × 3 mm apart (face trim,
    default bleed_mm), the heads at the cross fold likewise (head trim); the spines (P16|P1, P4|P13)
    touch and keep no bleed; every other edge keeps 3 mm. Block 598 × 426 mm centred on 640 × 450."""
    source = bled_pdf(tmp_path / "bled.pdf", 16)
    output, report = impose(engine, source, {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "landscape",
                                             "fold_scheme": "F16-7", "bleed_mm": 3, "on_warning": on_warning}, tmp_path)
    assert report.warnings == ()
    front = {p.label: p for p in placements(output, source)[0]}
    xs = (21.0, 169.0, 323.0, 471.0)
    for numbers, y0 in (((9, 8, 5, 12), 228.0), ((16, 1, 4, 13), 12.0)):
        for column, number in enumerate(numbers):
            placed = front[f"P{number}"]
            assert in_mm(placed.trim) == pytest.approx((xs[column], y0, xs[column] + 148, y0 + 210), abs=0.01)
            spine_on_right = column in (0, 2)  # the spine folds run between columns 0|1 and 2|3, both rows
            left, bottom, right, top = bleed_kept_mm(placed)
            assert (right if spine_on_right else left) == 0, f"P{number}: bleed at the spine"
            assert (left if spine_on_right else right) == pytest.approx(3, abs=0.01), f"P{number}: fore edge"
            assert (bottom, top) == pytest.approx((3, 3), abs=0.01), f"P{number}: head and foot"


def test_grind_off_and_spine_gutter_open_the_spine(engine, tmp_path):
    """Perfect bound with 2 mm grind-off and a 1 mm spine gutter: each spine of F16-7 is 5 mm wide,
    the spine edge keeps 2.5 mm of bleed (half the gap: room the mill takes anyway) with no warning."""
    source = bled_pdf(tmp_path / "bled.pdf", 16)
    output, report = impose(engine, source, {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "landscape",
                                             "fold_scheme": "F16-7", "bleed_mm": 3, "grind_off_mm": 2,
                                             "spine_gutter_mm": 1}, tmp_path)
    assert report.warnings == ()
    front = {p.label: p for p in placements(output, source)[0]}
    p16, p1, p4, p13 = (front[f"P{n}"] for n in (16, 1, 4, 13))
    assert (p1.trim[0] - p16.trim[2]) / MM == pytest.approx(5, abs=0.01)
    assert (p13.trim[0] - p4.trim[2]) / MM == pytest.approx(5, abs=0.01)
    assert (p4.trim[0] - p1.trim[2]) / MM == pytest.approx(6, abs=0.01)  # fore edges: 2 × face trim
    assert bleed_kept_mm(p16)[2] == bleed_kept_mm(p1)[0] == pytest.approx(2.5, abs=0.01)


def test_head_and_foot_trims_set_the_gap_at_the_cross_fold(engine, tmp_path):
    source = labelled_pdf(tmp_path / "a5.pdf", 16)
    output, _ = impose(engine, source, {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "landscape",
                                        "fold_scheme": "F16-7", "head_trim_mm": 4, "foot_trim_mm": 9,
                                        "face_trim_mm": 1}, tmp_path)
    front = {p.label: p for p in placements(output, source)[0]}
    assert (front["P9"].trim[1] - front["P16"].trim[3]) / MM == pytest.approx(8, abs=0.01)  # heads meet: 2 × 4
    assert (front["P4"].trim[0] - front["P1"].trim[2]) / MM == pytest.approx(2, abs=0.01)


def test_saddle_lip_lengthens_the_low_folio_half_and_the_back_registers(engine, tmp_path):
    """An 8 mm lip on SRA3 landscape: the block (296 mm of pages + 8 mm) is centred, so P8 starts at
    73 mm and P1's fore edge has 8 mm more paper than P8's; the back's P2 backs onto P1."""
    source = labelled_pdf(tmp_path / "a5.pdf", 8)
    output, report = impose(engine, source, {"layout": "saddle_stitch", "sheet": "SRA3", "orientation": "landscape",
                                             "saddle_lip_mm": 8}, tmp_path)
    assert report.warnings == ()
    front, back = ({p.label: p for p in side} for side in placements(output, source)[:2])
    assert in_mm(front["P8"].trim) == pytest.approx((73, 55, 221, 265), abs=0.01)
    assert in_mm(front["P1"].trim) == pytest.approx((221, 55, 369, 265), abs=0.01)
    assert 450 - front["P1"].trim[2] / MM == pytest.approx(front["P8"].trim[0] / MM + 8, abs=0.01)
    assert in_mm(back["P2"].trim) == pytest.approx((450 - 369, 55, 450 - 221, 265), abs=0.01)


def test_saddle_lip_needs_a_two_column_sheet():
    with pytest.raises(InvalidLayout, match="saddle_lip_mm=6.*F16-7"):
        parse_layout({"layout": "saddle_stitch", "sheet": "SRA2", "fold_scheme": "F16-7", "saddle_lip_mm": 6})


def test_bleed_advice_names_a_field_the_layout_accepts(engine, tmp_path):
    """A booklet told to keep no face trim loses the bleed between fore edges; the warning's advice
    is the trims, and following it removes the warning."""
    source = bled_pdf(tmp_path / "bled.pdf", 16)
    layout = {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "landscape", "fold_scheme": "F16-7",
              "bleed_mm": 3, "face_trim_mm": 0}
    _, report = impose(engine, source, layout, tmp_path)
    (warning,) = report.warnings
    assert warning.code == "bleed_reduced" and "face_trim_mm" in warning.message
    # the fore edges of columns 1 and 2 meet inside the sheet: P8 P5 / P1 P4 on the front, P6 P7 / P3 P2 behind
    assert "pages 1–8 keep as little as 0.0 mm" in warning.message
    layout["face_trim_mm"] = 3
    assert impose(engine, source, layout, tmp_path, "again.pdf")[1].warnings == ()


# --- item 2: orientation ----------------------------------------------------------------------------------

def test_mixed_orientation_booklet_fails_naming_the_pages(engine, tmp_path):
    source = bled_pdf(tmp_path / "mixed.pdf", 8, landscape_even=True)
    output = tmp_path / "out" / "plate.pdf"
    with pytest.raises(TrimSizeMismatch) as caught:
        engine.impose(source, parse_layout({"layout": "saddle_stitch", "sheet": "SRA3", "crop_marks": True}), output)
    message = str(caught.value)
    assert caught.value.code == "trim_size_mismatch" and caught.value.retryable is False
    assert "pages 2, 4, 6, 8 cannot share the booklet's trim of 148.0 × 210.0 mm (pages 1, 3, 5, 7)" in message
    assert "page 2: 210.0 × 148.0 mm" in message and "rotate_to_fit" in message
    assert not output.parent.exists() or list(output.parent.iterdir()) == []


@pytest.mark.parametrize("rule, verso_angle", [("spine", 270), ("fore_edge", 90), ("ccw", 90), ("cw", 270)])
def test_mixed_orientation_booklet_turns_pages_by_the_rule_the_layout_names(engine, tmp_path, rule, verso_angle):
    """Landscape even pages (versos) turned 90° into the portrait trim: every page then sits in a
    148 × 210 mm cell at 100 %, against the spine; ``spine`` turns a verso's head to its spine (the
    right: clockwise, the label reading down), ``fore_edge`` to the left."""
    source = bled_pdf(tmp_path / "mixed.pdf", 8, landscape_even=True)
    output, report = impose(engine, source, {"layout": "saddle_stitch", "sheet": "SRA3", "bleed_mm": 3,
                                             "rotate_to_fit": rule, "on_warning": "fail"}, tmp_path)
    (notice,) = report.warnings  # a notice, not a departure: on_warning fail still ships the plate
    way = "clockwise" if verso_angle == 270 else "counter-clockwise"
    assert notice.code == "pages_turned" and is_notice(notice.code)
    assert notice.message == f"rotate_to_fit={rule!r}: turned pages 2, 4, 6, 8 90° {way} to the booklet's trim"
    angles = {label.text: label.angle_degrees_ccw for side in big_labels(output) for label in side}
    for side in placements(output, source):
        left, right = sorted(side, key=lambda p: p.trim[0])
        assert left.trim[2] == pytest.approx(right.trim[0], abs=0.01)  # they meet at the spine
        for placed in side:
            width, height = ((placed.trim[2] - placed.trim[0]) / MM, (placed.trim[3] - placed.trim[1]) / MM)
            assert (width, height) == pytest.approx((148, 210), abs=0.01) and placed.scale == pytest.approx(1)
            number = int(placed.label[1:])
            assert angles[placed.label] == (verso_angle if number % 2 == 0 else 0), placed.label


def test_n_up_turns_a_page_of_the_other_orientation_to_fit_its_cell(engine, tmp_path):
    source = bled_pdf(tmp_path / "mixed.pdf", 4, landscape_even=True)
    layout = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2}
    plain, _ = impose(engine, source, {**layout, "scaling": "fit"}, tmp_path, "plain.pdf")
    turned, report = impose(engine, source, {**layout, "rotate_to_fit": "ccw"}, tmp_path, "turned.pdf")
    assert [(w.code, w.message) for w in report.warnings] == [
        ("pages_turned", "rotate_to_fit='ccw': turned pages 2, 4 90° counter-clockwise to their cells")]
    before = {p.label: p.scale for p in placements(plain, source)[0]}
    assert before["P2"] == pytest.approx(160 / 210, abs=0.001) and before["P1"] == pytest.approx(1)  # a 160 mm cell
    angles = {label.text: label.angle_degrees_ccw for label in big_labels(turned)[0]}
    for placed in placements(turned, source)[0]:
        assert placed.scale == pytest.approx(1)
        assert ((placed.trim[2] - placed.trim[0]) / MM, (placed.trim[3] - placed.trim[1]) / MM) == pytest.approx(
            (148, 210), abs=0.01)
        assert angles[placed.label] == (90 if placed.label in ("P2", "P4") else 0)


def test_step_and_repeat_turns_the_page_when_more_copies_fit(engine, tmp_path):
    """A 150 × 100 mm card on SRA3 portrait: 2 × 4 = 8 copies upright, 3 × 3 = 9 turned."""
    card = labelled_pdf(tmp_path / "card.pdf", 1, (150 * MM, 100 * MM))
    layout = {"layout": "step_and_repeat", "sheet": "SRA3", "orientation": "portrait"}
    upright, _ = impose(engine, card, layout, tmp_path, "upright.pdf")
    turned, _ = impose(engine, card, {**layout, "rotate_to_fit": "cw"}, tmp_path, "turned.pdf")
    assert [label.angle_degrees_ccw for label in big_labels(upright)[0]] == [0] * 8
    assert [label.angle_degrees_ccw for label in big_labels(turned)[0]] == [270] * 9


def test_grids_refuse_a_spine_rule():
    with pytest.raises(InvalidLayout, match="rotate_to_fit='spine'"):
        parse_layout({"layout": "n_up", "sheet": "SRA3", "rotate_to_fit": "spine"})


# --- item 4: presses and the default gripper --------------------------------------------------------------

def marks_and_fills_lowest_mm(output, index):
    drawn = [min(s.y0, s.y1) for s in segments(output, index)] + [f.rect[1] for f in fills(output, index)]
    return min(drawn) / MM


def test_press_sets_sheet_orientation_gripper_margins_and_an_ink_zone_colour_bar(engine, tmp_path):
    """SM 52 feeds SRA3 long edge first: the plate is 450 × 320 mm with its gripper (10 mm) at the
    foot; nothing prints there nor within the side lays (5 mm) and tail (3 mm); the colour bar has a
    solid C, M, Y and K in each of the 23 ink zones of 520/23 mm that the 440 mm printable width
    holds whole (19), centred on the sheet."""
    source = labelled_pdf(tmp_path / "a6.pdf", 4, (148 * MM, 105 * MM))
    layout = {"layout": "n_up", "press": "sm52", "sheet": "SRA3", "columns": 2, "rows": 2, "gutter_mm": 6,
              "crop_marks": True, "colour_bar": True}
    output, report = impose(engine, source, layout, tmp_path)
    assert report.warnings == ()
    assert page_sizes_mm(output) == [pytest.approx((450, 320), abs=0.01)]
    assert marks_and_fills_lowest_mm(output, 0) >= 10 - 0.01
    zone_mm = PRESSES["sm52"].ink_zone_mm
    bar = [f for f in fills(output, 0) if f.colour != "All"]
    assert len(bar) == 19 * 4
    xs = sorted(f.rect[0] / MM for f in bar)
    first_zone = 225 - 23 * zone_mm / 2
    assert xs[0] == pytest.approx(first_zone + 2 * zone_mm, abs=0.01)  # zones 0, 1 reach into the side lay
    for zone in range(19):
        colours = [f.colour for f in sorted(bar, key=lambda f: f.rect[0])[4 * zone:4 * zone + 4]]
        assert colours == [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1)]
    for f in fills(output, 0):
        x0, y0, x1, y1 = (v / MM for v in f.rect)
        assert 5 - 0.01 <= x0 and x1 <= 445 + 0.01 and y1 <= 320 - 3 + 0.01


def test_press_refuses_a_sheet_it_cannot_feed_and_a_smaller_gripper():
    with pytest.raises(InvalidLayout, match="does not feed on press sm52"):
        parse_layout({"layout": "n_up", "press": "sm52", "sheet": "SRA2"})
    with pytest.raises(InvalidLayout, match="gripper_mm=5: less than the 10 mm gripper"):
        parse_layout({"layout": "n_up", "press": "sm74", "gripper_mm": 5})
    assert parse_layout({"layout": "n_up", "press": "sm102"}).resolved().sheet_sizes_pt() == [
        pytest.approx((1020 * MM, 720 * MM))]


def test_default_gripper_keeps_every_mark_outside_10_mm(engine, tmp_path):
    """No press, no gripper_mm (margin_mm 0: no default tail or sides): 2 × 2 A5 on a 320 × 460 mm
    sheet with crop marks; centred, the foot marks would end 9.5 mm from the edge; the block moves up
    0.5 mm and every mark clears 10 mm. Pages stay at 100 %."""
    source = labelled_pdf(tmp_path / "a5.pdf", 4)
    layout = {"layout": "n_up", "sheet": {"width_mm": 320, "height_mm": 460}, "columns": 2, "rows": 2,
              "gutter_mm": 5, "crop_marks": True, "margin_mm": 0}
    output, report = impose(engine, source, layout, tmp_path)
    assert report.warnings == ()
    assert marks_and_fills_lowest_mm(output, 0) == pytest.approx(10, abs=0.01)
    assert all(p.scale == pytest.approx(1) for p in placements(output, source)[0])
    no_gripper, _ = impose(engine, source, {**layout, "gripper_mm": 0}, tmp_path, "no_gripper.pdf")
    assert marks_and_fills_lowest_mm(no_gripper, 0) == pytest.approx(9.5, abs=0.01)


def samples_with_marks() -> list[str]:
    """The shipped samples that print marks."""
    marks = ("crop_marks", "fold_marks", "registration_marks", "colour_bar", "slug", "collation_marks")
    return [path.name for path in sorted((SAMPLES / "layouts").glob("*.json"))
            if any(json.loads(path.read_text()).get(k) for k in marks)]


def test_the_edge_check_covers_the_samples_with_marks():
    assert samples_with_marks() == [
        "cut_and_stack_2x2.json", "n_up_2x2_sra3.json", "n_up_registration_sra2.json", "n_up_work_and_turn.json",
        "perfect_bound_f16_7_sra2.json", "perfect_bound_f32_5_sra2.json", "saddle_stitch_sra3.json"]


def non_printing_edges_mm(asked: dict) -> tuple[float, float, float, float]:
    """``(left, foot, right, head)`` mm that marks keep clear of: the press's side lays, gripper and
    tail; with no press the layout's ``gripper_mm`` and ``margin_mm`` where given, else the defaults."""
    press = PRESSES.get(asked.get("press", ""))
    if press is not None:
        return press.side_lay_mm, press.gripper_mm, press.side_lay_mm, press.tail_mm
    defaults = Settings()
    gripper = asked.get("gripper_mm", defaults.default_gripper_mm)
    margin = asked.get("margin_mm")
    if margin is None:
        return defaults.default_side_mm, gripper, defaults.default_side_mm, defaults.default_tail_mm
    assert isinstance(margin, (int, float)), "a sample's margin_mm is one number"
    return margin, gripper + margin, margin, margin


@pytest.mark.parametrize("name", samples_with_marks())
def test_shipped_samples_keep_marks_out_of_the_non_printing_edges(engine, tmp_path, name):
    """Every sample that prints marks keeps them out of the sheet's non-printing edges: its press's,
    those it gives (``gripper_mm: 0`` and ``margin_mm: 0``: a sheet printed to its edges), or with
    neither the defaults (gripper 10 mm at the foot, tail 5 mm at the head, sides 5 mm)."""
    asked = json.loads((SAMPLES / "layouts" / name).read_text())
    source = SAMPLES / sample_inputs()[name]
    output, report = impose(engine, source, asked, tmp_path)
    assert report.warnings == ()
    left, foot, right, head = non_printing_edges_mm(asked)
    for index, (width, height) in enumerate(page_sizes_mm(output)):
        extent = marks_extent(output, index)
        if extent is None:  # a back without collation marks: nothing drawn
            continue
        x0, y0, x1, y1 = (v / MM for v in extent)
        assert x0 >= left - 0.01 and y0 >= foot - 0.01 and x1 <= width - right + 0.01 and y1 <= height - head + 0.01, \
            f"{name}: plate {index + 1}: marks at {x0:.2f}, {y0:.2f}, {x1:.2f}, {y1:.2f} mm"


def test_default_gripper_says_so_when_marks_cannot_clear_it(engine, tmp_path):
    source = labelled_pdf(tmp_path / "a5.pdf", 4)
    layout = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2, "gutter_mm": 5,
              "crop_marks": True}
    output, report = impose(engine, source, layout, tmp_path)
    (warning,) = [w for w in report.warnings if "at the foot" in w.message]
    assert warning.code == "no_room_for_marks"
    assert "default 10 mm gripper at the foot" in warning.message and "gripper_mm" in warning.message
    assert marks_and_fills_lowest_mm(output, 0) >= 10 - 0.01


# --- item 5: padding and the fold catalogue ---------------------------------------------------------------

@pytest.mark.parametrize("layout", [
    {"layout": "perfect_bound", "signature_pages": 16, "sheet": "A4", "orientation": "landscape",
     "fold_scheme": "sections"},
    {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "landscape", "fold_scheme": "F16-7"},
])
def test_every_binding_pads_24_pages_to_two_whole_signatures(engine, tmp_path, layout):
    source = labelled_pdf(tmp_path / "a5.pdf", 24)
    output, report = impose(engine, source, layout, tmp_path)
    assert (report.blank_pages, report.warnings) == (8, ())  # 8 blanks: half a signature, no more
    labels = {label.text for side in big_labels(output) for label in side}
    assert labels == {f"P{n}" for n in range(1, 25)}


def test_padding_beyond_half_a_signature_warns_and_can_fail(engine, tmp_path):
    source = labelled_pdf(tmp_path / "a5.pdf", 1)
    layout = {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "landscape", "fold_scheme": "F16-7"}
    _, report = impose(engine, source, layout, tmp_path)
    (warning,) = report.warnings
    assert warning.code == "padded_with_blanks" and report.blank_pages == 15
    assert "1 pages padded to whole signatures of 16 with 15 blank pages" in warning.message
    assert "fold_scheme 'F4-1' would pad with 3" in warning.message
    with pytest.raises(PaddedWithBlanks):
        impose(engine, source, {**layout, "on_warning": "fail"}, tmp_path, "fail.pdf")


#: CIP4's transcription of the JDF pagination catalogue (JDFLibJ ``PaginationCatalog``): the pages of
#: the catalogue side that carries no page 1 (our back, seen turned side to side), as listed there.
CATALOGUE = {
    "F4-1": (2, 3),
    "F8-7": (3, 2, 6, 7),
    "F16-7": (14, 3, 2, 15, 11, 6, 7, 10),
    "F32-5": (3, 14, 15, 2, 30, 19, 18, 31, 27, 22, 23, 26, 6, 11, 10, 7),
    "F32-9": (14, 19, 18, 15, 3, 30, 31, 2, 6, 27, 26, 7, 11, 22, 23, 10),
}
#: How each list reads our back's grid (docs/engine.md, "Fold schemes"): column by column from the
#: head, row by row from the head, or row by row from the foot (F16-7: its foot row is listed first).
READING = {"F4-1": "columns", "F8-7": "columns", "F16-7": "rows from the foot", "F32-5": "columns",
           "F32-9": "rows"}


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_fold_schemes_are_the_catalogue_s(name):
    scheme = FOLD_SCHEMES[name]
    grid = [scheme.back[row * scheme.columns:(row + 1) * scheme.columns] for row in range(scheme.rows)]
    if READING[name] == "columns":
        listed = tuple(grid[row][column] for column in range(scheme.columns) for row in range(scheme.rows))
    else:
        rows = grid[::-1] if READING[name] == "rows from the foot" else grid
        listed = tuple(page for row in rows for page in row)
    assert listed == CATALOGUE[name]


@pytest.mark.parametrize("name", ["F8-7", "F16-7"])
def test_two_row_schemes_close_at_the_head(name):
    """A sheet of two rows folds its cross fold at the head: the head row is turned, so the heads of
    both rows meet at the fold (the bolt the trimmer opens at the head)."""
    scheme = FOLD_SCHEMES[name]
    turned = scheme.turned_front()
    assert turned[:scheme.columns] == (True,) * scheme.columns
    assert turned[scheme.columns:] == (False,) * scheme.columns
