"""The layout specification: the documented forms are accepted, errors name field, value and limit."""

from __future__ import annotations

import json

import pytest

from imposition.engine import LayoutSpec, parse_layout
from imposition.engine.errors import InvalidLayout
from imposition.engine.job import Layout
from imposition.engine.sheets import mm_to_pt
from imposition.engine.spec import CutAndStack, NUp, PerfectBound, SaddleStitch, StepAndRepeat

ACCEPTED = [
    ({"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}, SaddleStitch),
    ({"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2, "gutter_mm": 5,
      "crop_marks": True}, NUp),
    ({"layout": "step_and_repeat", "sheet": "SRA3", "pages": [1]}, StepAndRepeat),
    ({"layout": "cut_and_stack", "sheet": "SRA3", "columns": 3, "rows": 2, "duplex": "sheetwise"}, CutAndStack),
    ({"layout": "perfect_bound", "sheet": "SRA3", "signature_pages": 16}, PerfectBound),
    ({"layout": "saddle_stitch", "sheet": "A3", "duplex": "work_and_turn", "creep_mm": 0.2, "fold_marks": True,
      "binding": "right_to_left", "blank_pages_at": "before_back_cover", "slug": True}, SaddleStitch),
    ({"layout": "n_up", "sheet": {"width_mm": 330, "height_mm": 488}, "duplex": "work_and_tumble",
      "margin_mm": {"top_mm": 10, "bottom_mm": 5}, "bleed_mm": 3, "scaling": "none"}, NUp),
    ({"layout": "n_up", "sheet": "12x18 in"}, NUp),
]


@pytest.mark.parametrize("document, kind", ACCEPTED)
def test_documented_layouts_are_accepted(document, kind):
    spec = parse_layout(document)
    assert isinstance(spec, kind) and isinstance(spec, LayoutSpec)
    assert parse_layout(spec.model_dump_json()) == spec  # the JSON form round-trips
    resolved = spec.resolved()  # what the engine's child receives, as JSON
    assert Layout.from_json(json.loads(json.dumps(resolved.to_json()))) == resolved
    assert resolved.kind == document["layout"] and resolved.sheet_size_pt == spec.sheet_size_pt()


@pytest.mark.parametrize("name", ["A0", "A1", "A2", "A3", "A4", "A5", "SRA3", "SRA2", "B2", "B1", "Letter",
                                  "Legal", "Tabloid", "12x18 in"])
def test_every_sheet_preset(name):
    width_pt, height_pt = parse_layout({"layout": "n_up", "sheet": name}).sheet_size_pt()
    assert 0 < width_pt < height_pt


def test_sizes_in_mm_and_in_pt():
    assert parse_layout({"layout": "n_up", "sheet": "SRA3"}).sheet_size_pt() == pytest.approx((mm_to_pt(320), mm_to_pt(450)))
    custom = parse_layout({"layout": "n_up", "sheet": {"width_pt": 864, "height_pt": 1296}})
    assert custom.sheet_size_pt() == (864, 1296)


#: Refused layouts and the words their message must hold: field, value, rule or limit.
NAMED = [
    ({"layout": "n_up", "sheet": "SRA3", "columns": 0}, ["columns=0", "greater than or equal to 1"]),
    ({"layout": "n_up", "sheet": "SRA3", "gutter_mm": 500}, ["gutter_mm=500", "less than or equal to 200"]),
    ({"layout": "perfect_bound", "sheet": "A4", "signature_pages": 12}, ["signature_pages=12", "4, 8, 16 or 32"]),
    ({"layout": "n_up", "sheet": "A7"}, ["sheet='A7'", "unknown sheet preset", "SRA3"]),
    ({"layout": "n_up", "sheet": {"width_mm": 6000, "height_mm": 100}}, ["14400", "Annex C.2"]),
    ({"layout": "n_up", "sheet": {"width_mm": 100, "height_pt": 100}}, ["width_mm and height_mm"]),
    ({"layout": "n_up", "sheet": "A4", "colums": 2}, ["colums=2", "Extra inputs are not permitted"]),
    ({"layout": "step_and_repeat", "sheet": "A4", "fold_marks": True}, ["fold_marks=True", "not permitted"]),
    ({"layout": "step_and_repeat", "sheet": "A4", "columns": 0}, ["columns=0", "greater than or equal to 1"]),
    ({"layout": "saddle_stitch", "sheet": "A4", "paper_caliper_mm": 0}, ["paper_caliper_mm=0", "greater than 0"]),
    ({"layout": "n_up", "sheet": "A4", "paper_caliper_mm": 0.1}, ["paper_caliper_mm=0.1", "not permitted"]),
    ({"layout": "fold_and_glue", "sheet": "A4"}, ["layout", "fold_and_glue", "saddle_stitch"]),
    ({"layout": "saddle_stitch", "sheet": "A4", "duplex": "simplex"}, ["duplex='simplex'", "sheetwise"]),
    ({"layout": "n_up", "sheet": "A4", "bleed_mm": -1}, ["bleed_mm=-1", "greater than or equal to 0"]),
    ({"layout": "step_and_repeat", "sheet": "A4", "pages": [0]}, ["pages.0=0", "greater than or equal to 1"]),
    ({"layout": "n_up"}, ["sheet: missing field", "press"]),
]

#: Strict types: no coercion of text, booleans or floats into what a field holds.
STRICT_TYPES = [
    ({"layout": "n_up", "sheet": "A4", "columns": "2"}, ["columns='2'", "valid integer"]),
    ({"layout": "n_up", "sheet": "A4", "columns": True}, ["columns=True", "valid integer"]),
    ({"layout": "n_up", "sheet": "A4", "columns": 2.0}, ["columns=2.0", "valid integer"]),
    ({"layout": "n_up", "sheet": "A4", "crop_marks": "yes"}, ["crop_marks='yes'", "valid boolean"]),
    ({"layout": "n_up", "sheet": "A4", "crop_marks": 1}, ["crop_marks=1", "valid boolean"]),
    ({"layout": "n_up", "sheet": "A4", "gutter_mm": "5"}, ["gutter_mm='5'", "valid number"]),
    ({"layout": "n_up", "sheet": "A4", "gutter_mm": float("nan")}, ["gutter_mm=nan", "finite number"]),
    ({"layout": "step_and_repeat", "sheet": "A4", "pages": ["1"]}, ["pages.0='1'", "valid integer"]),
]

#: Margins or gutters that leave no room on the sheet in any orientation the layout allows.
NO_ROOM = [
    ({"layout": "n_up", "sheet": "A5", "columns": 2, "gutter_mm": 200},
     ["columns=2", "200 mm gutters", "gutter_mm", "148 × 210 mm sheet"]),
    ({"layout": "cut_and_stack", "sheet": "A5", "rows": 3, "row_gutter_mm": 120},
     ["rows=3", "120 mm gutters", "row_gutter_mm", "148 × 210 mm sheet"]),
    ({"layout": "n_up", "sheet": "A5", "margin_mm": 200}, ["margin_mm=200.0", "leaves no room", "148 × 210 mm sheet"]),
    ({"layout": "saddle_stitch", "sheet": "A5", "margin_mm": {"left_mm": 110, "right_mm": 110}},
     ["margin_mm=Margins(", "left_mm=110.0", "leaves no room"]),
    ({"layout": "n_up", "sheet": "A5", "orientation": "portrait", "margin_mm": {"left_mm": 150}},
     ["left_mm=150.0", "leaves no room on the 148 × 210 mm sheet"]),
    ({"layout": "n_up", "sheet": "A5", "duplex": "work_and_turn", "columns": 3, "gutter_mm": 60},  # half a sheet per side
     ["columns=3", "60 mm gutters", "74.0 mm usable width of a side on the 148 × 210 mm sheet, nor turned landscape"]),
]

#: Values far too long to repeat: the message shows them cut short (a 50 MiB sheet name gave 100 MiB).
ECHOED = [
    ({"layout": "n_up", "sheet": "A" * 1024 * 1024}, ["sheet='AAAA", "…", "unknown sheet preset"]),
    ({"layout": "x" * 1024 * 1024, "sheet": "A4"}, ["layout='xxxx", "…", "saddle_stitch"]),
    ({"layout": "n_up", "sheet": "A4", "y" * 1024 * 1024: 1}, ["yyyy", "…", "not permitted"]),
    ({"layout": "step_and_repeat", "sheet": "A4", "pages": [0] * 10_000}, ["pages.0=0", "and 9990 more problems"]),
    ({"layout": "step_and_repeat", "sheet": "A4", "pages": [10**5000]}, ["pages.0=<int too large to show>"]),
    ('{"layout": "n_up", "sheet": "A4", "rows": ' + "9" * 5000 + "}", ["not valid JSON", "digits"]),
]


@pytest.mark.parametrize("document, words", NAMED + STRICT_TYPES + NO_ROOM + ECHOED)
def test_errors_name_the_field_the_value_and_the_limit(document, words):
    with pytest.raises(InvalidLayout) as caught:
        parse_layout(document)
    assert caught.value.code == "invalid_layout" and not caught.value.retryable
    assert len(str(caught.value)) < 2000
    for word in words:
        assert word in str(caught.value)


def test_json_text_is_accepted_and_bad_json_is_a_typed_error():
    assert isinstance(parse_layout('{"layout": "n_up", "sheet": "A4"}'), NUp)
    with pytest.raises(InvalidLayout, match="not valid JSON"):
        parse_layout('{"layout": ')
    with pytest.raises(InvalidLayout, match="JSON object"):
        parse_layout("[1, 2]")


def test_a_key_given_twice_in_the_json_is_refused():
    with pytest.raises(InvalidLayout, match="the key 'sheet' appears more than once"):
        parse_layout('{"layout": "n_up", "sheet": "A4", "sheet": "A3"}')
    with pytest.raises(InvalidLayout, match="'top_mm' appears more than once"):
        parse_layout('{"layout": "n_up", "sheet": "A4", "margin_mm": {"top_mm": 1, "top_mm": 2}}')


def deeply_nested_dict(depth: int) -> dict:
    root: dict = {}
    inner = root
    for _ in range(depth):
        inner["x"] = {}
        inner = inner["x"]
    return root


@pytest.mark.parametrize("document", [
    pytest.param('{"layout": "n_up", "sheet": "A4", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", id="json-arrays"),
    pytest.param("[" * 100_000 + "]" * 100_000, id="json-top-level-array"),
    pytest.param('{"layout": "n_up", "sheet": "A4", "x": [[[[[1]]]]]}', id="json-just-too-deep"),
    pytest.param({"layout": "n_up", "sheet": "A4", "x": deeply_nested_dict(100_000)}, id="dict"),
])
def test_deep_nesting_is_an_invalid_layout_not_a_recursion_error(document):
    with pytest.raises(InvalidLayout, match="nests objects and arrays more than"):
        parse_layout(document)


def test_room_in_one_orientation_is_enough_under_auto():
    """150 mm of left margin leaves no room on a portrait A5 (148 mm wide) but 60 mm on a landscape one."""
    spec = parse_layout({"layout": "n_up", "sheet": "A5", "columns": 1, "rows": 1, "margin_mm": {"left_mm": 150}})
    assert spec.orientation == "auto"
    assert isinstance(parse_layout({"layout": "n_up", "sheet": "A5", "columns": 3, "gutter_mm": 60}), NUp)  # simplex


@pytest.mark.parametrize("change, problem", [
    ({"margin_mm": -3}, "margin_mm=-3: Input should be greater than or equal to 0"),
    ({"margin_mm": "x"}, "margin_mm='x': Input should be a valid number or an object of top_mm, right_mm, "
                         "bottom_mm, left_mm"),
    ({"margin_mm": {"top_mm": -1}}, "margin_mm.top_mm=-1: Input should be greater than or equal to 0"),
    ({"duplex": "x"}, "duplex='x': Input should be 'simplex' or 'sheetwise', 'work_and_turn' or 'work_and_tumble'"),
    ({"sheet": {"width_mm": -1, "height_mm": 3}}, "sheet.width_mm=-1: Input should be greater than 0"),
])
def test_a_union_field_is_one_problem_in_the_tenants_words_not_pydantics_member_tags(change, problem):
    """Issue 42: ``margin_mm.constrained-float=…; margin_mm.Margins=…`` leaked pydantic's internals."""
    layout = {"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 2, **change}
    with pytest.raises(InvalidLayout) as refused:
        parse_layout(layout)
    assert str(refused.value) == f"invalid layout: {problem}"
