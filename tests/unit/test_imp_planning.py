"""Geometry and plans without PDFs: rotation, UserUnit, fitting, orientation, creep, duplex styles."""

from __future__ import annotations

from dataclasses import replace

import pytest

from imposition.engine import parse_layout
from imposition.engine.errors import InvalidLayout, PageTooLarge, TooManyCells
from imposition.engine.geometry import PageBoxes, Rect, available_bleed, displayed_size, fit_scale, normalise_rotate
from imposition.engine.planning import plan_imposition
from imposition.engine.sheets import mm_to_pt

A5 = Rect(0, 0, mm_to_pt(148), mm_to_pt(210))


def a5(**changes) -> PageBoxes:
    return PageBoxes(crop=changes.pop("crop", A5), trim=changes.pop("trim", A5), bleed=changes.pop("bleed", A5), **changes)


@pytest.mark.parametrize("rotate, expected", [(0, 0), (90, 90), (-90, 270), (270, 270), (-270, 90), (450, 90), (45, 0), (180.0, 180)])
def test_rotate_normalised(rotate, expected):
    assert normalise_rotate(rotate) == expected


def test_displayed_size_honours_rotate_and_user_unit():
    assert displayed_size(a5(rotate_degrees_cw=90)) == pytest.approx((A5.height, A5.width))
    assert displayed_size(a5(user_unit=2.0)) == pytest.approx((2 * A5.width, 2 * A5.height))


def test_available_bleed_follows_the_rotation():
    trim = Rect(10, 20, A5.x1 - 10, A5.y1 - 20)  # 10 pt of bleed left and right, 20 pt head and foot
    left, bottom, right, top = available_bleed(a5(trim=trim, rotate_degrees_cw=90))
    assert (left, bottom, right, top) == pytest.approx((20, 10, 20, 10))


def test_fit_scale_only_shrinks():
    assert fit_scale((100, 100), (200, 300)) == 1.0
    assert fit_scale((400, 100), (200, 300)) == 0.5


def test_auto_orientation_picks_the_sheet_that_places_pages_largest():
    plan = plan_imposition(parse_layout({"layout": "saddle_stitch", "sheet": "A4"}), [a5()] * 4)
    assert plan.width_pt > plan.height_pt  # two A5 side by side at 100 % need landscape A4
    assert {p.scale for plate in plan.plates for p in plate.placements} == {1.0}


def test_scaling_none_rejects_a_page_larger_than_its_cell():
    with pytest.raises(PageTooLarge, match=r"page 1 \(trim 148.0 × 210.0 mm\) does not fit the 74.0 × 105.0 mm cell "
                                           r".* scaling 'fit' would shrink it to 50.0 %"):
        plan_imposition(parse_layout({"layout": "n_up", "sheet": "A5", "columns": 2, "rows": 2, "scaling": "none"}), [a5()])
    with pytest.raises(PageTooLarge, match=r"pages 1–3 \(trim 148.0 × 210.0 mm\) do not fit"):
        plan_imposition(parse_layout({"layout": "n_up", "sheet": "A5", "columns": 2, "rows": 2}), [a5()] * 3)


def test_scaling_fit_shrinks_what_scaling_none_refuses():
    plan = plan_imposition(parse_layout({"layout": "n_up", "sheet": "A5", "columns": 2, "rows": 2, "scaling": "fit"}),
                           [a5()] * 3)
    assert [p.scale for p in plan.plates[0].placements] == [pytest.approx(0.5)] * 3
    assert [w.code for w in plan.warnings] == ["scaled_to_fit"]


def test_margins_that_leave_no_room_are_an_invalid_layout():
    """parse_layout refuses such a layout; the planner still checks a Layout it is handed as it is."""
    with pytest.raises(InvalidLayout, match="margin_mm=150"):
        parse_layout({"layout": "n_up", "sheet": "A4", "margin_mm": 150})
    landscape_only = parse_layout({"layout": "n_up", "sheet": "A5", "margin_mm": {"left_mm": 150}}).resolved()
    with pytest.raises(InvalidLayout, match="left_mm=150.0.*leaves no room on the 148 × 210 mm sheet"):
        plan_imposition(replace(landscape_only, orientation="portrait"), [a5()])


def test_auto_orientation_skips_an_orientation_without_room():
    plan = plan_imposition(parse_layout({"layout": "n_up", "sheet": "A5", "margin_mm": {"left_mm": 150},
                                         "scaling": "fit"}), [a5()])
    assert plan.width_pt > plan.height_pt


def test_cells_per_sheet_and_per_job_are_bounded_before_any_is_laid_out():
    tiny = a5(trim=Rect(0, 0, 0.06, 0.06))
    repeat = parse_layout({"layout": "step_and_repeat", "sheet": "A4"})
    with pytest.raises(TooManyCells, match=r"\d+ × \d+ = \d+ cells on one side .* max_cells_per_sheet=10000"):
        plan_imposition(repeat, [tiny], max_cells_per_sheet=10_000)
    card = a5(trim=Rect(0, 0, mm_to_pt(20), mm_to_pt(20)))  # 10 × 14 = 140 copies on a portrait A4
    assert len(plan_imposition(repeat, [card] * 7, max_cells_per_sheet=140, max_cells_per_job=980).plates) == 7
    with pytest.raises(TooManyCells, match="8 sides of 10 × 14 copies make 1120 cells, more than max_cells_per_job=980"):
        plan_imposition(repeat, [card] * 8, max_cells_per_sheet=140, max_cells_per_job=980)
    with pytest.raises(TooManyCells, match="max_cells_per_sheet=139"):
        plan_imposition(repeat, [card], max_cells_per_sheet=139)


def test_step_and_repeat_rejects_a_page_the_document_lacks():
    with pytest.raises(InvalidLayout, match=r"pages\[0\]=9: the document has only 2 pages"):
        plan_imposition(parse_layout({"layout": "step_and_repeat", "sheet": "A4", "pages": [9]}), [a5(), a5()])


def test_creep_moves_inner_sheets_toward_the_spine():
    spec = parse_layout({"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape", "creep_mm": 0.5})
    plan = plan_imposition(spec, [a5()] * 12)  # 3 sheets
    fronts = [plate for plate in plan.plates if plate.side == "front"]
    assert len(fronts) == 3
    for steps, plate in enumerate(fronts):
        left, right = sorted(plate.placements, key=lambda p: p.trim.x0)
        assert left.matrix[4] - left.trim.x0 == pytest.approx(steps * mm_to_pt(0.5))
        assert right.matrix[4] - right.trim.x0 == pytest.approx(-steps * mm_to_pt(0.5))
        assert left.clip == left.trim and right.clip == right.trim  # the content shifts, the cut stays


def test_work_and_turn_puts_front_and_back_side_by_side():
    spec = parse_layout({"layout": "saddle_stitch", "sheet": "A3", "orientation": "portrait", "duplex": "work_and_turn",
                         "scaling": "fit"})
    plan = plan_imposition(spec, [a5()] * 8)
    assert plan.sheets == 2 and len(plan.plates) == 2
    plate = plan.plates[0]
    by_page = {p.page: p for p in plate.placements}
    assert sorted(by_page) == [0, 1, 6, 7]
    middle = plan.width_pt / 2
    left_half = sorted((p.trim.x0, p.page) for p in plate.placements if p.trim.x1 <= middle + 0.01)
    right_half = sorted((p.trim.x0, p.page) for p in plate.placements if p.trim.x0 >= middle - 0.01)
    assert [page for _, page in left_half] == [7, 0]  # the front: 8 | 1
    assert [page for _, page in right_half] == [1, 6]  # the back: 2 | 7


def test_work_and_tumble_turns_the_back_head_to_foot():
    spec = parse_layout({"layout": "n_up", "sheet": "A4", "orientation": "portrait", "columns": 1, "rows": 1,
                         "duplex": "work_and_tumble"})
    plan = plan_imposition(spec, [PageBoxes(Rect(0, 0, 200, 100), Rect(0, 0, 200, 100), Rect(0, 0, 200, 100))] * 2)
    front, back = sorted(plan.plates[0].placements, key=lambda p: -p.trim.y0)
    assert not front.upside_down and back.upside_down
    assert front.matrix[0] == pytest.approx(1) and back.matrix[0] == pytest.approx(-1)


def test_bleed_is_halved_between_close_neighbours():
    trim = Rect(mm_to_pt(3), mm_to_pt(3), A5.x1 - mm_to_pt(3), A5.y1 - mm_to_pt(3))
    spec = parse_layout({"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 1, "gutter_mm": 4, "bleed_mm": 3})
    left, right = sorted(plan_imposition(spec, [a5(trim=trim)] * 2).plates[0].placements, key=lambda p: p.trim.x0)
    assert left.trim.x0 - left.clip.x0 == pytest.approx(mm_to_pt(3))
    assert left.clip.x1 - left.trim.x1 == pytest.approx(mm_to_pt(2))
    assert right.trim.x0 - right.clip.x0 == pytest.approx(mm_to_pt(2))


def test_fold_marks_sit_on_the_spine_outside_the_trim():
    spec = parse_layout({"layout": "saddle_stitch", "sheet": "A3", "orientation": "landscape", "fold_marks": True})
    plate = plan_imposition(spec, [a5()] * 4).plates[0]
    spine = plate.placements[0].trim.x1 if plate.placements[0].trim.x0 < plate.placements[1].trim.x0 else plate.placements[1].trim.x1
    folds = [m for m in plate.marks if m.kind == "fold"]
    assert len(folds) == 2 and all(m.x0 == m.x1 == pytest.approx(spine) for m in folds)
    top = max(p.trim.y1 for p in plate.placements)
    assert any(min(m.y0, m.y1) >= top for m in folds)


def test_slug_line_names_job_tenant_sheet_and_side():
    from imposition.engine import SlugInfo

    spec = parse_layout({"layout": "saddle_stitch", "sheet": "A3", "slug": True})
    plates = plan_imposition(spec, [a5()] * 8, slug=SlugInfo("job-7", "tenant-3")).plates
    assert plates[3].slug_line == "job job-7 | tenant tenant-3 | sheet 2 of 2 | back"
