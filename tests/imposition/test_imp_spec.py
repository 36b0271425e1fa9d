"""The layout specification: the documented forms are accepted, errors name field, value and limit."""

from __future__ import annotations

import json

import pytest

from imposition import LayoutSpec, parse_layout
from imposition.errors import InvalidLayout
from imposition.job import Layout
from imposition.sheets import mm_to_pt
from imposition.spec import CutAndStack, NUp, PerfectBound, SaddleStitch, StepAndRepeat

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


@pytest.mark.parametrize(
    "document, words",
    [
        ({"layout": "n_up", "sheet": "SRA3", "columns": 0}, ["columns=0", "greater than or equal to 1"]),
        ({"layout": "n_up", "sheet": "SRA3", "gutter_mm": 500}, ["gutter_mm=500", "less than or equal to 200"]),
        ({"layout": "perfect_bound", "sheet": "A4", "signature_pages": 12}, ["signature_pages=12", "4, 8, 16 or 32"]),
        ({"layout": "n_up", "sheet": "A7"}, ["sheet='A7'", "unknown sheet preset", "SRA3"]),
        ({"layout": "n_up", "sheet": {"width_mm": 6000, "height_mm": 100}}, ["14400", "Annex C.2"]),
        ({"layout": "n_up", "sheet": {"width_mm": 100, "height_pt": 100}}, ["width_mm and height_mm"]),
        ({"layout": "n_up", "sheet": "A4", "colums": 2}, ["colums=2", "Extra inputs are not permitted"]),
        ({"layout": "step_and_repeat", "sheet": "A4", "columns": 2}, ["columns=2", "not permitted"]),
        ({"layout": "fold_and_glue", "sheet": "A4"}, ["layout", "fold_and_glue", "saddle_stitch"]),
        ({"layout": "saddle_stitch", "sheet": "A4", "duplex": "simplex"}, ["duplex='simplex'", "sheetwise"]),
        ({"layout": "n_up", "sheet": "A4", "bleed_mm": -1}, ["bleed_mm=-1", "greater than or equal to 0"]),
        ({"layout": "step_and_repeat", "sheet": "A4", "pages": [0]}, ["pages.0=0", "greater than or equal to 1"]),
        ({"layout": "n_up"}, ["sheet", "Field required"]),
    ],
)
def test_errors_name_the_field_the_value_and_the_limit(document, words):
    with pytest.raises(InvalidLayout) as caught:
        parse_layout(document)
    assert caught.value.code == "invalid_layout" and not caught.value.retryable
    for word in words:
        assert word in str(caught.value)


def test_json_text_is_accepted_and_bad_json_is_a_typed_error():
    assert isinstance(parse_layout('{"layout": "n_up", "sheet": "A4"}'), NUp)
    with pytest.raises(InvalidLayout, match="not valid JSON"):
        parse_layout('{"layout": ')
    with pytest.raises(InvalidLayout, match="JSON object"):
        parse_layout("[1, 2]")
