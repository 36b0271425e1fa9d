"""The handed cases 1–10 (shared/cases/README.md), each checked by reading the plate file back."""

from __future__ import annotations

import pytest

from imposition.engine import ImpositionError, parse_layout
from imposition.engine.errors import NoPages, NotAPdf, PasswordRequired
from .imposition_readback import MM, Raster, big_labels, labels, lines, page_sizes_mm

A4 = (210.0, 297.0)
A3 = (297.0, 420.0)
SRA3 = (320.0, 450.0)
A5_MM = (148.0, 210.0)


def impose(engine, source, layout, tmp_path, name="plate.pdf"):
    output = tmp_path / name
    report = engine.impose(source, parse_layout(layout), output)
    return output, report


def label_of(page_labels, text):
    found = [label for label in page_labels if label.text == text]
    assert len(found) == 1, f"{text} appears {len(found)} times on the plate: {page_labels}"
    return found[0]


def width_along_text(label):
    x0, y0, x1, y1 = label.bbox
    return x1 - x0 if label.angle_degrees_ccw in (0, 180) else y1 - y0


def cell_of(label, sheet_mm, columns, rows):
    """(row, column) of the equal cell of the sheet holding the label's centre."""
    width, height = sheet_mm[0] * MM, sheet_mm[1] * MM
    return int((height - label.y) / (height / rows)), int(label.x / (width / columns))


def assert_sizes(output, size_mm, count):
    sizes = page_sizes_mm(output)
    assert len(sizes) == count
    for width, height in sizes:
        assert width == pytest.approx(size_mm[0], abs=0.01) and height == pytest.approx(size_mm[1], abs=0.01)


def assert_booklet_like_case_1(engine, source, tmp_path):
    output, report = impose(engine, source, {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}, tmp_path)
    assert_sizes(output, (A4[1], A4[0]), 4)
    sides = big_labels(output)
    halves = [tuple(sorted(side, key=lambda l: l.x)) for side in sides]
    assert [tuple(l.text for l in side) for side in halves] == [("P8", "P1"), ("P2", "P7"), ("P6", "P3"), ("P4", "P5")]
    # 100 %, undistorted, placed against the spine: every label sits where it sits on its page, moved
    # by the page's origin on the sheet.
    source_labels = {page[0].text: page[0] for page in big_labels(source)}
    sheet_w, sheet_h, page_w, page_h = A4[1] * MM, A4[0] * MM, A5_MM[0] * MM, A5_MM[1] * MM
    for left, right in halves:
        for label, origin_x in ((left, sheet_w / 2 - page_w), (right, sheet_w / 2)):
            original = source_labels[label.text]
            assert label.angle_degrees_ccw == 0
            assert width_along_text(label) == pytest.approx(width_along_text(original), abs=0.05)
            assert label.x - origin_x == pytest.approx(original.x, abs=0.3)
            assert label.y - (sheet_h - page_h) / 2 == pytest.approx(original.y, abs=0.3)
    assert (report.sheets, report.sides, report.pages_in, report.blank_pages) == (2, 4, 8, 0)


def test_case_1_saddle_stitch_a4_landscape(engine, case, tmp_path):
    assert_booklet_like_case_1(engine, case("a5_8p.pdf"), tmp_path)


def test_case_2_odd_page_count_padded_with_blanks_at_the_end(engine, case, tmp_path):
    output, report = impose(engine, case("a5_13p_odd.pdf"), {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}, tmp_path)
    assert_sizes(output, (A4[1], A4[0]), 8)
    sides = big_labels(output)
    texts = sorted(label.text for side in sides for label in side)
    assert texts == sorted(f"P{n}" for n in range(1, 14))
    outer_front = sides[0]
    assert [label.text for label in outer_front] == ["P1"]
    assert outer_front[0].x > A4[1] * MM / 2  # P1 right; the blank page 16 is the empty left half
    assert Raster(output, 0).ink(1, 1, A4[1] * MM / 2 - 1, A4[0] * MM - 1) == 0
    assert (report.sheets, report.blank_pages) == (4, 3)


def trims_on_sheet(sheet_mm, trim_mm, grid, gutter_mm):
    """Trim rectangles (pt) of a block of cells centred on the sheet, row by row from the top-left."""
    columns, rows = grid
    block_w = columns * trim_mm[0] + (columns - 1) * gutter_mm
    block_h = rows * trim_mm[1] + (rows - 1) * gutter_mm
    left, top = (sheet_mm[0] - block_w) / 2, (sheet_mm[1] + block_h) / 2
    rects = []
    for row in range(rows):
        for column in range(columns):
            x0 = left + column * (trim_mm[0] + gutter_mm)
            y1 = top - row * (trim_mm[1] + gutter_mm)
            rects.append(tuple(v * MM for v in (x0, y1 - trim_mm[1], x0 + trim_mm[0], y1)))
    return rects


def assert_crop_marks(output, page_index, trims, min_offset_mm, *, inner_corners=True):
    """Marks never enter a trim; each trim corner (or, with ``inner_corners`` False, each corner on
    the block's outer edge) has a mark on an edge's extension, ``min_offset_mm`` away from it."""
    marks = lines(output, page_index)
    assert marks, "no crop marks drawn"
    tolerance = 0.05
    for x0, y0, x1, y1 in marks:  # no mark enters any trim
        for tx0, ty0, tx1, ty1 in trims:
            inside_x = min(x0, x1) < tx1 - tolerance and max(x0, x1) > tx0 + tolerance
            inside_y = min(y0, y1) < ty1 - tolerance and max(y0, y1) > ty0 + tolerance
            assert not (inside_x and inside_y), f"mark {(x0, y0, x1, y1)} crosses trim {(tx0, ty0, tx1, ty1)}"
    for tx0, ty0, tx1, ty1 in trims:  # every trim corner has a mark on the extension of an edge
        for cx, cy in ((tx0, ty0), (tx0, ty1), (tx1, ty0), (tx1, ty1)):
            outer = cx in (min(t[0] for t in trims), max(t[2] for t in trims)) or cy in (
                min(t[1] for t in trims), max(t[3] for t in trims))
            if not inner_corners and not outer:
                continue
            on_corner = [
                (x0, y0, x1, y1) for x0, y0, x1, y1 in marks
                if (abs(x0 - cx) < tolerance and abs(x1 - cx) < tolerance
                    and min(abs(y0 - cy), abs(y1 - cy)) >= min_offset_mm * MM - tolerance
                    and min(abs(y0 - cy), abs(y1 - cy)) <= min_offset_mm * MM + 1)
                or (abs(y0 - cy) < tolerance and abs(y1 - cy) < tolerance
                    and min(abs(x0 - cx), abs(x1 - cx)) >= min_offset_mm * MM - tolerance
                    and min(abs(x0 - cx), abs(x1 - cx)) <= min_offset_mm * MM + 1)
            ]
            assert on_corner, f"no crop mark at trim corner {(cx, cy)}"


def test_case_3_two_by_two_n_up_on_sra3_with_crop_marks(engine, case, tmp_path):
    layout = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2,
              "gutter_mm": 5, "crop_marks": True}
    output, report = impose(engine, case("a5_8p.pdf"), layout, tmp_path)
    assert_sizes(output, SRA3, 2)
    for sheet, side in enumerate(big_labels(output)):
        cells = {cell_of(label, SRA3, 2, 2): label.text for label in side}
        first = 4 * sheet + 1
        assert cells == {(0, 0): f"P{first}", (0, 1): f"P{first + 1}", (1, 0): f"P{first + 2}", (1, 1): f"P{first + 3}"}
        assert all(label.angle_degrees_ccw == 0 for label in side)
        assert_crop_marks(output, sheet, trims_on_sheet(SRA3, A5_MM, (2, 2), 5), min_offset_mm=3)
    assert report.sheets == 2


def test_case_4_step_and_repeat_largest_grid_upright_copies(engine, case, tmp_path):
    output, _ = impose(engine, case("a5_8p.pdf"), {"layout": "step_and_repeat", "sheet": "SRA3", "pages": [1]}, tmp_path)
    assert_sizes(output, SRA3, 1)  # portrait: 2 × 2 A5 copies; landscape would hold 3 × 1
    (side,) = labels(output)
    big = [label for label in side if label.text.startswith("P")]
    assert [label.text for label in big] == ["P1"] * 4
    assert len({(round(l.x), round(l.y)) for l in big}) == 4
    assert all(label.angle_degrees_ccw == 0 for label in side)
    assert len({round(width_along_text(l), 2) for l in big}) == 1  # identical copies
    assert {label.text for label in side if not label.text.startswith("P")} == {"bottom-left 1"}


def test_case_4_step_and_repeat_tries_the_landscape_sheet(engine, tmp_path):
    from .imposition_pdfs import labelled_pdf

    source = labelled_pdf(tmp_path / "card.pdf", 1, (90 * MM, 140 * MM))
    output, _ = impose(engine, source, {"layout": "step_and_repeat", "sheet": "SRA3"}, tmp_path)
    assert_sizes(output, (SRA3[1], SRA3[0]), 1)  # landscape: 5 × 2 = 10 copies; portrait: 3 × 3 = 9
    big = big_labels(output)[0]
    assert len(big) == 10 and all(l.angle_degrees_ccw == 0 and l.text == "P1" for l in big)


#: Cases 5 and 6 ask for pages "scaled down to fit": a layout says so with ``scaling: fit`` (the
#: default, ``none``, refuses a page larger than its cell: docs/engine.md, "Size kept").
SHRINK_TO_FIT = {"scaling": "fit"}


def test_case_5_rotated_pages_shown_as_a_viewer_shows_them(engine, case, tmp_path):
    output, _ = impose(engine, case("rotate90_even_8p.pdf"),
                       {"layout": "n_up", "sheet": "A3", "columns": 2, "rows": 2, **SHRINK_TO_FIT}, tmp_path)
    assert_sizes(output, A3, 2)
    source_width = {page[0].text: width_along_text(page[0]) for page in big_labels(case("rotate90_even_8p.pdf"))}
    cell_w, cell_h = A3[0] * MM / 2, A3[1] * MM / 2
    sides = labels(output)
    for sheet, side in enumerate(sides):  # every page's two labels, four pages a sheet, in order
        pages = range(4 * sheet + 1, 4 * sheet + 5)
        assert sorted(l.text for l in side) == sorted([f"P{n}" for n in pages] + [f"bottom-left {n}" for n in pages])
    for side in sides:
        for label in side:
            number = int(label.text.split()[-1].lstrip("P"))
            row, column = divmod((number - 1) % 4, 2)
            cell = (column * cell_w, (1 - row) * cell_h, (column + 1) * cell_w, (2 - row) * cell_h)
            assert cell[0] <= label.bbox[0] and label.bbox[2] <= cell[2], f"{label} cut off or outside its cell"
            assert cell[1] <= label.bbox[1] and label.bbox[3] <= cell[3], f"{label} cut off or outside its cell"
            assert label.angle_degrees_ccw == (270 if number % 2 == 0 else 0)  # /Rotate 90: turned clockwise
            if label.text.startswith("P"):
                assert label.x == pytest.approx((cell[0] + cell[2]) / 2, abs=15)  # centred
                assert label.y == pytest.approx((cell[1] + cell[3]) / 2, abs=15)  # the glyphs sit on the centre line
                expected_scale = 1.0 if number % 2 else cell_w / (210 * MM)  # 210 mm wide once turned
                assert width_along_text(label) / source_width[label.text] == pytest.approx(expected_scale, rel=0.01)
            elif number % 2 == 0:  # the page's bottom-left corner is now its top-left
                assert label.y > (cell[1] + cell[3]) / 2 and label.x < (cell[0] + cell[2]) / 2


def test_case_6_mixed_sizes_shrunk_to_fit_and_centred(engine, case, tmp_path):
    output, _ = impose(engine, case("mixed_sizes_6p.pdf"),
                       {"layout": "n_up", "sheet": "A3", "columns": 2, "rows": 2, **SHRINK_TO_FIT}, tmp_path)
    assert_sizes(output, A3, 2)
    sides = big_labels(output)
    for sheet, side in enumerate(sides):
        cells = {cell_of(label, A3, 2, 2): label.text for label in side}
        expected = {0: {(0, 0): "P1", (0, 1): "P2", (1, 0): "P3", (1, 1): "P4"}, 1: {(0, 0): "P5", (0, 1): "P6"}}
        assert cells == expected[sheet]
        for label in side:  # every label centred in its cell (each source page has its label at its centre)
            row, column = cell_of(label, A3, 2, 2)
            assert label.x == pytest.approx((column + 0.5) * A3[0] * MM / 2, abs=15)  # the glyphs sit above the centre line
            assert label.y == pytest.approx((1.5 - row) * A3[1] * MM / 2, abs=15)  # the glyphs sit above the centre line
    empty_cells = Raster(output, 1)
    assert empty_cells.ink(1, 1, A3[0] * MM - 1, A3[1] * MM / 2 - 1) == 0  # the empty cells stay empty


def test_case_7_cells_on_trimbox_bleed_kept_where_the_gutter_allows(engine, case, tmp_path):
    layout = {"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 2, "bleed_mm": 3, "crop_marks": True}
    output, _ = impose(engine, case("trim_bleed_3mm_8p.pdf"), layout, tmp_path)
    assert_sizes(output, SRA3, 2)
    trim_mm = (142.0, 204.0)  # A5 less 3 mm on each edge
    trims = trims_on_sheet(SRA3, trim_mm, (2, 2), 0)
    side = labels(output)[0]
    corner_label = label_of(side, "bottom-left 3")  # 12 pt from the MediaBox corner = 3.5 pt inside the trim
    assert corner_label.bbox[0] == pytest.approx(trims[2][0] + 12 - 8.504, abs=0.6)
    raster = Raster(output, 0, dots_per_pt=4)
    x0, y0, x1, y1 = trims[0]
    # Each source page frames itself 2.5 pt outside its trim, in the bleed: visible on outer edges ...
    assert raster.ink(x0 - 3.5, y0 + 50, x0 - 1.5, y1 - 50) > 0
    assert raster.ink(x0 + 50, y1 + 1.5, x1 - 50, y1 + 3.5) > 0
    # ... and clipped at the trim where two pages meet (no gutter, so no room for bleed).
    assert raster.ink(x1 - 1.5, y0 + 50, x1 + 1.5, y1 - 50) == 0
    assert_crop_marks(output, 0, trims, min_offset_mm=3, inner_corners=False)


def test_case_7_full_bleed_survives_with_a_wide_gutter(engine, case, tmp_path):
    layout = {"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 2, "bleed_mm": 3, "gutter_mm": 8}
    output, _ = impose(engine, case("trim_bleed_3mm_8p.pdf"), layout, tmp_path)
    x0, y0, x1, y1 = trims_on_sheet(SRA3, (142.0, 204.0), (2, 2), 8)[0]
    raster = Raster(output, 0, dots_per_pt=4)
    assert raster.ink(x1 + 1.5, y0 + 50, x1 + 3.5, y1 - 50) > 0  # inner edge bleed now kept
    assert raster.ink(x1 + 8.6, y0 + 50, x1 + 11, y1 - 50) == 0  # but cut at 3 mm: nothing beyond


def test_case_8_owner_password_only_imposes_like_case_1(engine, case, tmp_path):
    assert_booklet_like_case_1(engine, case("encrypted_owner_only_8p.pdf"), tmp_path)


@pytest.mark.parametrize(
    "name, error, code, words",
    [
        ("encrypted_user_pw_8p.pdf", PasswordRequired, "password_required", "password"),
        ("not_a_pdf.pdf", NotAPdf, "not_a_pdf", "not a PDF"),
        ("zero_pages.pdf", NoPages, "no_pages", "no pages"),
    ],
)
def test_cases_9_and_10_fail_at_once_with_a_typed_error(any_engine, case, tmp_path, name, error, code, words):
    output = tmp_path / "out" / "plate.pdf"
    with pytest.raises(error) as caught:
        any_engine.impose(case(name), parse_layout({"layout": "saddle_stitch", "sheet": "A4"}), output)
    assert isinstance(caught.value, ImpositionError)
    assert caught.value.code == code and caught.value.retryable is False
    assert words in str(caught.value) and name in str(caught.value)
    assert list(output.parent.iterdir()) == [], "a failed job leaves nothing behind"
