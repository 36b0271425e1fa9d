"""Production layouts (issue 13, item 5): folded signatures of the JDF fold catalogue, creep, collation
marks, gang-up in step and repeat, registration marks and colour bars.

Every check reads the plate back: which label lies where and which way up (pdfminer and the plate's
own ``cm``/``Do`` operators), marks by their drawing operators (``re f`` fills, Bézier circles, strokes).
The fold test folds the imposed sheet in software, with the fold sequence written here from the
catalogue's description, and reads the folded signature's pages.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imposition.engine import parse_layout
from imposition.engine.errors import InvalidLayout, NoRoomForMarks
from imposition.engine.folds import FOLD_SCHEMES
from imposition.engine.spec import FoldSchemeName
from .imposition_pdfs import MM, labelled_pdf
from .imposition_readback import big_labels, circles, fills, placements, segments

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
#: A small page, so that a 16-up side fits a custom sheet.
PAGE_PT = (60 * MM, 80 * MM)
SHEET = {"width_mm": 300, "height_mm": 400}

#: Each scheme's folds, as the catalogue draws them: axis (``v`` vertical, ``h`` horizontal fold line
#: through the middle of what is left), the half turned over (``-`` left or bottom, ``+`` right or
#: top), ``o`` over onto the face-up front or ``u`` under it. The last is the spine, folded on the left.
FOLD_SEQUENCES = {
    "F4-1": "v-u",
    "F8-7": "h+u v-u",
    "F16-7": "v-u h+o v-o",
    "F32-5": "h-u v-o h+o v-u",
    "F32-9": "v-u h-o h-o v-u",
}


def impose(engine, source, layout, tmp_path, name="plate.pdf"):
    output = tmp_path / name
    report = engine.impose(source, parse_layout(layout), output)
    return output, report


def leaves_of(output, source, front_index, sheet_width_pt):
    """The leaves of one sheetwise sheet read back: ``[trim, head_up, front page, back page]``, the
    trim as on the front (pt), the page numbers from the labels."""
    sides = placements(output, source)
    angles = big_labels(output)
    up = [{label.text: label.angle_degrees_ccw for label in side} for side in angles]
    front, back = sides[front_index], sides[front_index + 1]
    leaves = []
    for placed in front:
        x0, y0, x1, y1 = placed.trim
        (behind,) = [b for b in back if abs(b.trim[0] - (sheet_width_pt - x1)) < 0.5 and abs(b.trim[1] - y0) < 0.5]
        angle = up[front_index][placed.label]
        assert angle in (0, 180) and up[front_index + 1][behind.label] == angle  # a leaf's pages turn together
        leaves.append([placed.trim, angle == 0, int(placed.label[1:]), int(behind.label[1:])])
    return leaves


def fold_in_software(leaves, sequence):
    """Fold the sheet (front up) through ``sequence``; returns the pages of the folded stack from the
    top (each leaf's upper face, then its lower face) and whether every leaf reads head up."""
    stack = [[trim, head_up, upper, lower, 0] for trim, head_up, upper, lower in leaves]
    layers = 1
    for word in sequence.split():
        axis, moving_high, over = word[0], word[1] == "+", word[2] == "o"
        lo = min(leaf[0][0 if axis == "v" else 1] for leaf in stack)
        hi = max(leaf[0][2 if axis == "v" else 3] for leaf in stack)
        line = (lo + hi) / 2
        for leaf in stack:
            x0, y0, x1, y1 = leaf[0]
            centre = (x0 + x1) / 2 if axis == "v" else (y0 + y1) / 2
            if (centre > line) == moving_high:
                leaf[0] = (2 * line - x1, y0, 2 * line - x0, y1) if axis == "v" else (x0, 2 * line - y1, x1, 2 * line - y0)
                if axis == "h":
                    leaf[1] = not leaf[1]
                leaf[2], leaf[3] = leaf[3], leaf[2]
                leaf[4] = 2 * layers - 1 - leaf[4] if over else layers - 1 - leaf[4]
            elif not over:
                leaf[4] += layers
        layers *= 2
    assert len({(round(l[0][0]), round(l[0][1])) for l in stack}) == 1, "the folds do not bring every leaf onto one"
    ordered = sorted(stack, key=lambda leaf: -leaf[4])
    return [page for leaf in ordered for page in (leaf[2], leaf[3])], all(leaf[1] for leaf in ordered)


def test_every_scheme_offered_has_its_fold_sequence_here():
    assert set(FoldSchemeName.__args__) == set(FOLD_SCHEMES) == set(FOLD_SEQUENCES)


@pytest.mark.parametrize("scheme", sorted(FOLD_SEQUENCES))
def test_each_fold_scheme_folds_into_a_signature_reading_1_to_n(engine, tmp_path, scheme):
    pages = FOLD_SCHEMES[scheme].pages
    source = labelled_pdf(tmp_path / "in.pdf", 2 * pages, PAGE_PT)
    output, report = impose(engine, source, {"layout": "perfect_bound", "sheet": SHEET, "orientation": "portrait",
                                             "fold_scheme": scheme}, tmp_path)
    assert (report.sheets, report.sides, report.warnings) == (2, 4, ())
    for signature in range(2):
        leaves = leaves_of(output, source, 2 * signature, 300 * MM)
        assert len(leaves) == pages // 2
        reading, upright = fold_in_software(leaves, FOLD_SEQUENCES[scheme])
        assert reading == list(range(signature * pages + 1, (signature + 1) * pages + 1))
        assert upright, f"{scheme}: a page reads upside down once folded"
    turned = {l.text for side in big_labels(output) for l in side if l.angle_degrees_ccw == 180}
    assert bool(turned) == (scheme != "F4-1")  # heads turned wherever a fold crosses the head


def test_handed_f16_7_sixteen_a5_pages_on_one_sra2_sheet(engine, tmp_path):
    """16 A5 pages, F16-7 on SRA2 landscape (640 × 450 mm): the 592 × 420 mm block is centred (24 mm
    left, 15 mm foot); front top row P9 P8 P5 P12 turned over bottom row P16 P1 P4 P13 upright, so the
    heads meet at the cross fold (a closed head, as F8-7's); back (seen turned side to side) top P11
    P6 P7 P10 turned over P14 P3 P2 P15 upright."""
    source = SAMPLES / "a5_16p.pdf"
    output, report = impose(engine, source, {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "landscape",
                                             "fold_scheme": "F16-7"}, tmp_path)
    assert (report.sheets, report.sides, report.blank_pages) == (1, 2, 0)
    expected = [((9, 8, 5, 12), (16, 1, 4, 13)), ((11, 6, 7, 10), (14, 3, 2, 15))]
    angles = big_labels(output)
    for index, side in enumerate(placements(output, source)):
        at = {p.label: tuple(round(v / MM, 1) for v in p.clip) for p in side}
        up = {l.text: l.angle_degrees_ccw for l in angles[index]}
        for row, (numbers, y0) in enumerate(zip(expected[index], (225.0, 15.0))):
            for column, number in enumerate(numbers):
                x0 = 24.0 + 148 * column
                assert at[f"P{number}"] == pytest.approx((x0, y0, x0 + 148, y0 + 210), abs=0.1), f"P{number}"
                assert up[f"P{number}"] == (180 if row == 0 else 0), f"P{number}"


def test_saddle_stitch_nests_folded_signatures(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 16, PAGE_PT)
    output, report = impose(engine, source, {"layout": "saddle_stitch", "sheet": "A4", "orientation": "portrait",
                                             "fold_scheme": "F8-7"}, tmp_path)
    assert report.sheets == 2
    outer, upright_outer = fold_in_software(leaves_of(output, source, 0, 210 * MM), FOLD_SEQUENCES["F8-7"])
    inner, upright_inner = fold_in_software(leaves_of(output, source, 2, 210 * MM), FOLD_SEQUENCES["F8-7"])
    assert outer[:4] + inner + outer[4:] == list(range(1, 17)) and upright_outer and upright_inner


def test_right_to_left_binding_folds_with_the_spine_on_the_right(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 16, PAGE_PT)
    output, _ = impose(engine, source, {"layout": "perfect_bound", "sheet": SHEET, "orientation": "portrait",
                                        "fold_scheme": "F16-7", "binding": "right_to_left"}, tmp_path)
    leaves = leaves_of(output, source, 0, 300 * MM)
    mirrored = [[(300 * MM - t[2], t[1], 300 * MM - t[0], t[3]), up, a, b] for t, up, a, b in leaves]
    reading, upright = fold_in_software(mirrored, FOLD_SEQUENCES["F16-7"])  # seen in a mirror: a left-bound book
    assert reading == list(range(1, 17)) and upright


CREEP_PERFECT_BOUND = {page: 0.5 if page in (3, 4, 5, 6) else 0.0 for page in range(1, 9)}
#: Saddle stitch of two nested F8-7 signatures: the inner one (pages 5–12) lies inside the outer's 2 leaves.
CREEP_SADDLE = {**{p: 0.0 for p in (1, 2, 15, 16)}, **{p: 0.5 for p in (3, 4, 13, 14)},
                **{p: 1.0 for p in (5, 6, 11, 12)}, **{p: 1.5 for p in (7, 8, 9, 10)}}


@pytest.mark.parametrize("kind, expected", [("perfect_bound", CREEP_PERFECT_BOUND), ("saddle_stitch", CREEP_SADDLE)])
def test_creep_moves_each_inner_leaf_toward_the_spine(engine, tmp_path, kind, expected):
    source = labelled_pdf(tmp_path / "in.pdf", len(expected), PAGE_PT)
    output, _ = impose(engine, source, {"layout": kind, "sheet": "A4", "orientation": "portrait",
                                        "fold_scheme": "F8-7", "creep_mm": 0.5}, tmp_path)
    head_up = {l.text: l.angle_degrees_ccw == 0 for side in big_labels(output) for l in side}
    seen = set()
    for side in placements(output, source):
        for placed in side:
            shift_mm = (placed.trim[0] - placed.clip[0]) / MM  # content (trim through cm) against the cell (clip)
            page = int(placed.label[1:])
            toward_spine = -1 if (page % 2 == 1) == head_up[placed.label] else 1  # a recto's spine is its left edge
            assert shift_mm == pytest.approx(toward_spine * expected[page], abs=0.01), placed.label
            seen.add(page)
    assert seen == set(expected)


@pytest.mark.parametrize("scheme, pages, sheets", [("F8-7", 8, 1), ("sections", 16, 4)])
def test_collation_marks_step_down_the_spine_one_signature_after_another(engine, tmp_path, scheme, pages, sheets):
    """Three signatures: F8-7 sheets, or sections of four nested 2-up sheets (16 pages); the mark is
    on the outermost sheet's front only, 3 × 5 mm centred on the spine fold, 5 mm lower each time."""
    source = labelled_pdf(tmp_path / "in.pdf", 3 * pages, PAGE_PT)
    layout = {"layout": "perfect_bound", "sheet": "A4", "orientation": "portrait", "collation_marks": True}
    layout.update({"fold_scheme": scheme, "signature_pages": pages})
    output, _ = impose(engine, source, layout, tmp_path)
    sides = placements(output, source)
    assert len(sides) == 3 * sheets * 2
    tops = []
    for signature in range(3):
        outer = 2 * sheets * signature
        front = {p.label: p for p in sides[outer]}
        first, last = front[f"P{pages * signature + 1}"], front[f"P{pages * signature + pages}"]
        spine = last.clip[2]
        assert first.clip[0] == pytest.approx(spine, abs=0.01)
        (mark,) = fills(output, outer)
        assert mark.colour == "All"
        x0, y0, x1, y1 = mark.rect
        assert ((x0 + x1) / 2, (x1 - x0) / MM, (y1 - y0) / MM) == pytest.approx((spine, 3, 5), abs=0.01)
        assert first.clip[1] - 0.01 <= y0 and y1 <= first.clip[3] + 0.01  # on the spine of the first page's leaf
        tops.append(first.clip[3] - y1)  # below the head of the first page (upright: its top)
        for other in range(outer + 1, outer + 2 * sheets):  # nothing on the inside, nor on inner sheets
            assert fills(output, other) == []
    assert [top / MM for top in tops] == pytest.approx([0, 5, 10], abs=0.01)


def test_fold_marks_sit_on_every_fold_line_of_a_scheme(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 16, PAGE_PT)
    output, report = impose(engine, source, {"layout": "perfect_bound", "sheet": SHEET, "orientation": "portrait",
                                             "fold_scheme": "F16-7", "fold_marks": True}, tmp_path)
    assert report.warnings == ()
    side = placements(output, source)[0]
    folds = [s for s in segments(output, 0) if s.dashed]
    xs = sorted({round(p.clip[0], 2) for p in side})[1:]
    ys = sorted({round(p.clip[1], 2) for p in side})[1:]
    top, bottom = max(p.clip[3] for p in side), min(p.clip[1] for p in side)
    left, right = min(p.clip[0] for p in side), max(p.clip[2] for p in side)
    for x in xs:
        on = [s for s in folds if abs(s.x0 - x) < 0.05 and abs(s.x1 - x) < 0.05]
        assert any(min(s.y0, s.y1) >= top for s in on) and any(max(s.y0, s.y1) <= bottom for s in on)
    for y in ys:
        on = [s for s in folds if abs(s.y0 - y) < 0.05 and abs(s.y1 - y) < 0.05]
        assert any(min(s.x0, s.x1) >= right for s in on) and any(max(s.x0, s.x1) <= left for s in on)


# --- gang-up ----------------------------------------------------------------------------------------------

def test_gang_up_puts_each_page_s_copies_on_one_sheet_and_the_rest_shares_the_cells(engine, tmp_path):
    cards = labelled_pdf(tmp_path / "cards.pdf", 3, (88 * MM, 63 * MM))
    layout = {"layout": "step_and_repeat", "sheet": "SRA3", "crop_marks": True,
              "gang": [{"page": 2, "copies": 4}, {"page": 1}, {"page": 3}]}
    output, report = impose(engine, cards, layout, tmp_path)
    (side,) = placements(output, cards)
    counts = {label: sum(p.label == label for p in side) for label in ("P1", "P2", "P3")}
    assert counts == {"P2": 4, "P1": 7, "P3": 7} and report.sides == 1  # 18 cells with marks (3 × 6)
    width, height = 320 * MM, 450 * MM
    trims = [p.trim for p in side]
    assert len(set(trims)) == 18 and all(min(t[0], t[1], width - t[2], height - t[3]) >= 8 * MM - 0.01 for t in trims)
    assert all(label.angle_degrees_ccw == 0 for label in big_labels(output)[0])


def test_gang_up_asking_more_than_fits_fails_naming_the_count_and_the_grid(engine, tmp_path):
    cards = labelled_pdf(tmp_path / "cards.pdf", 2, (88 * MM, 63 * MM))
    with pytest.raises(InvalidLayout, match=r"gang: asks for 20 copies, more than the 3 × 6 = 18 cells"):
        impose(engine, cards, {"layout": "step_and_repeat", "sheet": "SRA3", "crop_marks": True,
                               "gang": [{"page": 1, "copies": 10}, {"page": 2, "copies": 10}]}, tmp_path)
    with pytest.raises(InvalidLayout, match=r"gang\[1\].page=5: the document has only 2 pages"):
        impose(engine, cards, {"layout": "step_and_repeat", "sheet": "SRA3", "gang": [{"page": 1}, {"page": 5}]},
               tmp_path)


# --- registration marks and colour bars -------------------------------------------------------------------

REGISTERED = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2,
              "gutter_mm": 5, "crop_marks": True, "registration_marks": True, "colour_bar": True}


def test_registration_targets_and_colour_bar_sit_outside_every_trim_bleed_and_mark(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 4, (120 * MM, 170 * MM))
    output, report = impose(engine, source, REGISTERED, tmp_path)
    assert report.warnings == ()
    side = placements(output, source)[0]
    targets = circles(output, 0)
    size = 5 * MM  # the cross; the circle is 60 % of it
    crosses = [s for s in segments(output, 0)
               if any(abs((s.x0 + s.x1) / 2 - t.x) < 0.01 and abs((s.y0 + s.y1) / 2 - t.y) < 0.01 for t in targets)]
    assert len(crosses) == 8 and all(abs(s.x1 - s.x0) + abs(s.y1 - s.y0) == pytest.approx(size, abs=0.01) for s in crosses)
    crop = [s for s in segments(output, 0) if s not in crosses]
    x0 = min(min(p.clip[0] for p in side), *(min(s.x0, s.x1) for s in crop))
    x1 = max(max(p.clip[2] for p in side), *(max(s.x0, s.x1) for s in crop))
    y0 = min(min(p.clip[1] for p in side), *(min(s.y0, s.y1) for s in crop))
    y1 = max(max(p.clip[3] for p in side), *(max(s.y0, s.y1) for s in crop))
    assert len(targets) == 4 and all(t.colour == "All" for t in targets)
    centres = sorted((round(t.x / MM, 1), round(t.y / MM, 1)) for t in targets)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    expected = sorted((round(x / MM, 1), round(y / MM, 1)) for x, y in (
        (cx, y1 + 1 * MM + size / 2), (cx, y0 - 1 * MM - size / 2), (x0 - 1 * MM - size / 2, cy), (x1 + 1 * MM + size / 2, cy)))
    assert [v for c in centres for v in c] == pytest.approx([v for c in expected for v in c], abs=0.15)
    assert all(t.radius == pytest.approx(0.3 * size, abs=0.01) for t in targets)
    bar = fills(output, 0)
    assert [f.colour for f in bar[:9]] == [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), "All",
                                         (0.5, 0, 0, 0), (0, 0.5, 0, 0), (0, 0, 0.5, 0), (0, 0, 0, 0.5)]
    head_target = max(t.y + size / 2 for t in targets)  # the top of the head target's cross
    for patch in bar:
        px0, py0, px1, py1 = patch.rect
        assert (px1 - px0, py1 - py0) == pytest.approx((5 * MM, 5 * MM), abs=0.01)
        assert py0 >= max(y1, head_target) and py1 <= 450 * MM  # above everything, on the sheet
        assert x0 - 0.2 <= px0 and px1 <= max(x1, x0 + 45 * MM) + 0.2  # across the block (marks' line width)


def test_registration_marks_and_colour_bar_without_room_warn_or_fail_typed(engine, tmp_path):
    source = labelled_pdf(tmp_path / "in.pdf", 4)  # 2 × 2 A5 fill an A4-wide SRA3 side: little room
    layout = {**REGISTERED, "sheet": "A3", "scaling": "none", "crop_marks": False, "gutter_mm": 0}
    output, report = impose(engine, source, layout, tmp_path)
    missing = [w for w in report.warnings if w.code == "no_room_for_marks"]
    assert any("registration_marks" in w.message and "mm" in w.message for w in missing)
    assert any("colour_bar" in w.message for w in missing)
    assert fills(output, 0) == []  # the bar is left out whole, never half drawn
    with pytest.raises(NoRoomForMarks, match="registration_marks"):
        impose(engine, source, {**layout, "on_warning": "fail"}, tmp_path, "strict.pdf")


# --- the layout fields --------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout, words", [
    ({"layout": "perfect_bound", "sheet": "SRA2", "fold_scheme": "F32-5", "signature_pages": 16},
     "signature_pages=16: fold_scheme 'F32-5' folds one sheet into 32 pages"),
    ({"layout": "perfect_bound", "sheet": "SRA2", "fold_scheme": "F12-1"}, "fold_scheme='F12-1': Input should be"),
    ({"layout": "saddle_stitch", "sheet": "SRA2", "fold_scheme": "sections", "signature_pages": 16},
     "signature_pages=16: saddle stitch with fold_scheme 'sections' nests 2-up sheets of 4 pages"),
    ({"layout": "saddle_stitch", "sheet": "SRA2", "fold_scheme": "F8-7", "signature_pages": 16},
     "signature_pages=16: fold_scheme 'F8-7' folds one sheet into 8 pages"),
    ({"layout": "step_and_repeat", "sheet": "SRA3", "pages": [1], "gang": [{"page": 1}]}, "gang and pages"),
    ({"layout": "step_and_repeat", "sheet": "SRA3", "duplex": "sheetwise", "gang": [{"page": 1}]},
     "gang with duplex='sheetwise'"),
    ({"layout": "step_and_repeat", "sheet": "SRA3", "gang": [{"page": 1, "copies": 0}]},
     "gang.0.copies=0: Input should be greater than or equal to 1"),
    ({"layout": "step_and_repeat", "sheet": "SRA3", "gang": [{"page": 1, "copies": "2"}]}, "gang.0.copies='2'"),
    ({"layout": "n_up", "sheet": "SRA3", "colour_bar_height_mm": 40}, "colour_bar_height_mm=40: Input should be less"),
    ({"layout": "n_up", "sheet": "SRA3", "registration_mark_size_mm": 1}, "registration_mark_size_mm=1"),
    ({"layout": "perfect_bound", "sheet": "SRA3", "collation_mark_height_mm": 50}, "collation_mark_height_mm=50"),
    ({"layout": "n_up", "sheet": "SRA3", "collation_marks": True}, "collation_marks"),
])
def test_new_layout_fields_are_refused_naming_the_field_and_the_limit(layout, words):
    with pytest.raises(InvalidLayout) as caught:
        parse_layout(layout)
    assert words in str(caught.value)


# --- signature_pages without a fold_scheme: the catalogue scheme, never 2-up sections in disguise ------------

A6_PT = (105 * MM, 148 * MM)
#: The scheme the README promises for each signature_pages when no fold_scheme is named.
FOLD_SCHEMES_BY_PAGES = {4: "F4-1", 8: "F8-7", 16: "F16-7", 32: "F32-5"}


def test_signature_pages_32_folds_one_sra2_sheet_per_signature(engine, tmp_path):
    """Issue 13's own case: 32-page signatures of A6 pages on SRA2 (450 × 640 mm), no fold_scheme named:
    F32-5, one sheet per signature with 16 pages a side at 100 %, folding in software into 1…32, 33…64."""
    source = labelled_pdf(tmp_path / "in.pdf", 64, A6_PT)
    output, report = impose(engine, source, {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "portrait",
                                             "signature_pages": 32}, tmp_path)
    assert (report.sheets, report.sides, report.blank_pages, report.warnings) == (2, 4, 0, ())
    sides = placements(output, source)
    assert [len(side) for side in sides] == [16] * 4
    assert all(placed.scale == pytest.approx(1) for side in sides for placed in side)
    for signature in range(2):
        leaves = leaves_of(output, source, 2 * signature, 450 * MM)
        reading, upright = fold_in_software(leaves, FOLD_SEQUENCES["F32-5"])
        assert reading == list(range(32 * signature + 1, 32 * signature + 33))
        assert upright


@pytest.mark.parametrize("sheet, size, asked, fits", [
    ("SRA3", A6_PT, 32, "holds 8 pages a side (F16-7, signature_pages 16)"),
    ("A4", (148 * MM, 210 * MM), 16, "holds 2 pages a side (F4-1, signature_pages 4)"),
    ("A5", (148 * MM, 210 * MM), 8, "holds fewer than 2 pages a side"),
])
def test_signature_pages_the_sheet_cannot_hold_fail_naming_the_field(engine, tmp_path, sheet, size, asked, fits):
    """A sheet too small for the asked signature at 100 % fails the job (no plate), naming
    signature_pages, the pages a side asked for and the pages a side that fit; it is not imposed as
    2-up sections, nor scaled, even under the default scaling."""
    source = labelled_pdf(tmp_path / "in.pdf", asked, size)
    with pytest.raises(InvalidLayout) as caught:
        impose(engine, source, {"layout": "perfect_bound", "sheet": sheet, "signature_pages": asked}, tmp_path)
    message = str(caught.value)
    assert f"signature_pages={asked} folds one sheet as {FOLD_SCHEMES_BY_PAGES[asked]}, {asked // 2} pages a side" in message
    assert fits in message and "fold_scheme 'sections'" in message
    assert not (tmp_path / "plate.pdf").exists()


@pytest.mark.parametrize("length_mm, fits", [(5, True), (10, False)])
def test_the_room_for_marks_counts_before_a_signature_is_chosen(engine, tmp_path, length_mm, fits):
    """F32-5 of A6 pages leaves 15 mm each side of SRA2 portrait (a sheet printed to its edges:
    margin_mm and gripper_mm 0): crop marks 3 + 5 mm and registration targets (1 + 5 mm) fit beside the
    block and are drawn; with 10 mm marks they cannot, and the job fails rather than shrinking the
    pages or dropping the marks."""
    source = labelled_pdf(tmp_path / "in.pdf", 32, A6_PT)
    layout = {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "portrait", "signature_pages": 32,
              "crop_marks": True, "crop_mark_length_mm": length_mm, "registration_marks": True,
              "margin_mm": 0, "gripper_mm": 0}
    if not fits:
        with pytest.raises(InvalidLayout, match="signature_pages=32 folds one sheet as F32-5"):
            impose(engine, source, layout, tmp_path)
        return
    output, report = impose(engine, source, layout, tmp_path)
    assert (report.sheets, report.warnings) == (1, ())
    assert all(placed.scale == pytest.approx(1) for side in placements(output, source) for placed in side)
    assert len([c for c in circles(output, 0) if c.colour == "All"]) == 4


def test_fold_scheme_sections_keeps_nested_2up_sheets_when_asked(engine, tmp_path):
    """The old signature, asked for by name: 32 pages a signature as 8 nested 2-up sheets."""
    source = labelled_pdf(tmp_path / "in.pdf", 32, A6_PT)
    output, report = impose(engine, source, {"layout": "perfect_bound", "sheet": "SRA2", "orientation": "portrait",
                                             "signature_pages": 32, "fold_scheme": "sections"}, tmp_path)
    assert (report.sheets, report.sides) == (8, 16)
    sides = placements(output, source)
    assert {len(side) for side in sides} == {2}
    front, back = ({p.label for p in side} for side in sides[:2])
    assert (front, back) == ({"P32", "P1"}, {"P2", "P31"})  # the outermost sheet of the one section


def test_saddle_stitch_signature_pages_folds_nested_catalogue_sheets(engine, tmp_path):
    """Saddle stitch asking for 8 pages a sheet folds F8-7 sheets, nested, exactly as naming F8-7 does;
    without signature_pages it stays 2-up (handed cases 1 and 2)."""
    source = SAMPLES / "a5_16p.pdf"
    base = {"layout": "saddle_stitch", "sheet": "SRA3", "orientation": "portrait"}
    implied, report = impose(engine, source, {**base, "signature_pages": 8}, tmp_path, "implied.pdf")
    named, _ = impose(engine, source, {**base, "fold_scheme": "F8-7"}, tmp_path, "named.pdf")
    assert (report.sheets, report.sides, report.warnings) == (2, 4, ())
    assert placements(implied, source) == placements(named, source)
    plain, report = impose(engine, source, base, tmp_path, "plain.pdf")
    assert report.sheets == 4 and {len(side) for side in placements(plain, source)} == {2}
