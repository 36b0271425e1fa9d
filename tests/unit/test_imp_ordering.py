"""Page orders for every page count from 1 to 200: each page exactly once, blanks only from padding.

The orders are checked against a simulation of the finishing (folding nested sheets, cutting and
stacking), written independently of the formulas in imposition.engine.ordering.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imposition.engine.ordering import (
    cut_and_stack_order,
    n_up_order,
    pad_pages,
    perfect_bound_order,
    saddle_stitch_order,
)

PAGE_COUNTS = range(1, 201)


def slots(order):
    for sheet in order.sheets:
        yield from sheet.front
        if sheet.back is not None:
            yield from sheet.back


def assert_each_page_once(order, page_count):
    placed = [slot for slot in slots(order) if slot is not None]
    assert sorted(placed) == list(range(page_count))


def mirror(index, columns):
    row, column = divmod(index, columns)
    return row * columns + columns - 1 - column


def leaves(order):
    """(recto, verso) of every printed cell: the front slot and the back slot behind it."""
    for sheet in order.sheets:
        for index, recto in enumerate(sheet.front):
            yield recto, sheet.back[mirror(index, order.columns)]


def folded_reading_order(sheets, right_to_left=False):
    """Fold nested sheets (outermost first) and read the booklet page by page.

    Right of the spine (left-to-right binding) lie the leaves of sheets 0..S-1, each with the front's
    right page as recto and, behind it, the back's left page; then, left of the spine, the leaves of
    sheets S-1..0: the back's right page as recto, the front's left page behind it.
    """
    near, far = (0, 1) if right_to_left else (1, 0)
    reading = []
    for sheet in sheets:
        reading += [sheet.front[near], sheet.back[far]]
    for sheet in reversed(sheets):
        reading += [sheet.back[near], sheet.front[far]]
    return reading


@pytest.mark.parametrize("right_to_left", [False, True])
def test_saddle_stitch_folds_into_reading_order_for_every_count(right_to_left):
    for page_count in PAGE_COUNTS:
        order = saddle_stitch_order(page_count, right_to_left=right_to_left)
        assert_each_page_once(order, page_count)
        assert order.blank_pages == -page_count % 4
        assert folded_reading_order(order.sheets, right_to_left) == list(order.reading_order)
        assert list(order.reading_order) == list(range(page_count)) + [None] * order.blank_pages


def test_saddle_stitch_eight_pages_is_case_1():
    order = saddle_stitch_order(8)
    one_based = [(tuple(p + 1 for p in s.front), tuple(p + 1 for p in s.back)) for s in order.sheets]
    assert one_based == [((8, 1), (2, 7)), ((6, 3), (4, 5))]


@pytest.mark.parametrize("signature_pages", [4, 8, 16, 32])
def test_perfect_bound_gathers_folded_sections_for_every_count(signature_pages):
    for page_count in PAGE_COUNTS:
        order = perfect_bound_order(page_count, signature_pages)
        assert_each_page_once(order, page_count)
        assert order.blank_pages == -page_count % signature_pages  # whole signatures, as the fold schemes pad
        assert len(order.sheets) % (signature_pages // 4) == 0
        reading, start, sheets = [], 0, list(order.sheets)
        while start < len(sheets):  # each section: signature_pages / 4 sheets
            section = sheets[start : start + signature_pages // 4]
            reading += folded_reading_order(section)
            start += len(section)
        assert reading == list(order.reading_order)


@settings(max_examples=150, deadline=None)
@given(
    page_count=st.integers(1, 200), columns=st.integers(1, 5), rows=st.integers(1, 5),
    duplex=st.booleans(), right_to_left=st.booleans(),
)
def test_n_up_reads_sheet_by_sheet(page_count, columns, rows, duplex, right_to_left):
    order = n_up_order(page_count, columns, rows, duplex=duplex, right_to_left=right_to_left)
    assert_each_page_once(order, page_count)
    assert order.blank_pages == (page_count % 2 if duplex else 0)
    if duplex:
        read = [page for recto, verso in _reading_cells(order, right_to_left) for page in (recto, verso)]
    else:
        read = [sheet.front[i] for sheet in order.sheets for i in _cell_sequence(columns, rows, right_to_left)]
    assert [p for p in read if p is not None] == list(range(page_count))
    # unused cells only at the end of the last sheet
    assert all(p is not None for p in read[: page_count])


def _cell_sequence(columns, rows, right_to_left):
    cells = range(columns * rows)
    return [mirror(i, columns) for i in cells] if right_to_left else list(cells)


def _reading_cells(order, right_to_left):
    for sheet in order.sheets:
        for index in _cell_sequence(order.columns, order.rows, right_to_left):
            yield sheet.front[index], sheet.back[mirror(index, order.columns)]


@settings(max_examples=150, deadline=None)
@given(page_count=st.integers(1, 200), columns=st.integers(1, 5), rows=st.integers(1, 5), duplex=st.booleans())
def test_cut_and_stack_stacks_read_in_order(page_count, columns, rows, duplex):
    order = cut_and_stack_order(page_count, columns, rows, duplex=duplex)
    assert_each_page_once(order, page_count)
    # Cut the pile; stack t is cell t of every sheet, top sheet first; lay the stacks in cell order.
    read = []
    for cell in range(columns * rows):
        for sheet in order.sheets:
            recto = sheet.front[cell]
            read += [recto, sheet.back[mirror(cell, columns)]] if duplex else [recto]
    assert [p for p in read if p is not None] == list(range(page_count))
    assert order.blank_pages == (page_count % 2 if duplex else 0)


@settings(max_examples=100, deadline=None)
@given(page_count=st.integers(1, 200), layout=st.sampled_from(["saddle", "perfect", "n_up", "cut"]))
def test_a_leaf_carries_consecutive_pages(page_count, layout):
    order = {
        "saddle": lambda: saddle_stitch_order(page_count),
        "perfect": lambda: perfect_bound_order(page_count, 16),
        "n_up": lambda: n_up_order(page_count, 2, 2, duplex=True),
        "cut": lambda: cut_and_stack_order(page_count, 3, 2, duplex=True),
    }[layout]()
    position = {page: n for n, page in enumerate(order.reading_order)}
    for recto, verso in leaves(order):
        if recto is None or verso is None:
            continue
        pair = sorted((position[recto], position[verso]))
        assert pair[1] == pair[0] + 1 and pair[0] % 2 == 0, f"leaf {recto}/{verso} is not one leaf"


@pytest.mark.parametrize(
    "where, expected",
    [
        ("end", [0, 1, 2, 3, 4, None, None, None]),
        ("start", [None, None, None, 0, 1, 2, 3, 4]),
        ("before_back_cover", [0, 1, 2, 3, None, None, None, 4]),
    ],
)
def test_padding_puts_blanks_where_asked(where, expected):
    assert list(pad_pages(5, 4, where)) == expected
    order = saddle_stitch_order(5, blank_pages_at=where)
    assert list(order.reading_order) == expected and order.blank_pages == 3
