"""Page orders: which source page goes in which cell of which side of which sheet.

Pure functions of page counts and layout options; no geometry, no PDF. A side's cells are listed row
by row from the top-left corner *as that side is seen* (the back as seen after turning the sheet over
side to side, the way sheetwise printing backs it up). A slot holds a 0-based source page index, or
None for a cell that prints nothing (a padding blank or an unused cell).

Rules, by print convention:
  * a leaf carries consecutive pages: the front of a cell (row, column) backs onto the back's cell
    (row, columns - 1 - column);
  * saddle stitch pads to a multiple of 4 and nests sheets: the outer sheet carries the first two and
    the last two pages;
  * perfect bound gathers sections of ``signature_pages`` pages (nested 2-up sheets), padded to whole
    sections as a fold scheme's signatures are: every binding pads to whole signatures (the planner
    warns ``padded_with_blanks`` beyond half of one);
  * cut and stack numbers down each stack: cell ``t`` of sheet ``s`` holds page ``t × sheets + s``;
  * a fold scheme (:mod:`imposition.engine.folds`) makes each sheet one signature: perfect bound gathers
    them in order; saddle stitch nests them, the outer signature carrying the first and the last
    ``pages / 2`` pages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .folds import FOLD_SCHEMES, FoldScheme
from .job import CUT_AND_STACK, N_UP, PERFECT_BOUND, SADDLE_STITCH, STEP_AND_REPEAT, BlankPagesAt, Layout

if TYPE_CHECKING:
    from .spec import LayoutSpec

#: A cell's content: a 0-based source page index, or None (prints nothing).
Slot = int | None


@dataclass(frozen=True)
class SheetOrder:
    """The cells of one sheet.

    Attributes:
        front: slots of the front side, row by row from the top-left, ``columns × rows`` long.
        back: slots of the back side as seen when the sheet is turned over side to side, or None for a
            sheet printed on one side only.
        signature: 0-based signature (booklets: the folded section) the sheet belongs to.
        outermost: the sheet is the outside of its signature (where a collation mark goes).
        creep_steps: leaves of other sheets outside this one around the spine (nested booklet sheets).
    """

    front: tuple[Slot, ...]
    back: tuple[Slot, ...] | None
    signature: int = 0
    outermost: bool = True
    creep_steps: int = 0


@dataclass(frozen=True)
class PageOrder:
    """The page order of a whole job.

    Attributes:
        columns, rows: the grid of one side.
        sheets: the sheets in printing order.
        blank_pages: blank pages added by padding (not counting unused cells of a last sheet).
        reading_order: the finished product's pages in reading order, as source indices or None for a
            padding blank (for a step-and-repeat job: the listed pages).
        turned: per cell of the front and of the back (as seen), the page is placed turned 180°
            (a fold scheme's heads); None when nothing is turned.
        depth: per cell of the front and of the back, leaves outside its own within its signature
            (creep steps of a fold scheme); None when there are none.
        spine_left: per cell of the front and of the back, the page's spine is the cell's left edge
            on the sheet (else its right); None for the 2-up sections, whose spine runs between
            their two columns.
    """

    columns: int
    rows: int
    sheets: tuple[SheetOrder, ...]
    blank_pages: int
    reading_order: tuple[Slot, ...]
    turned: tuple[tuple[bool, ...], tuple[bool, ...]] | None = None
    depth: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    spine_left: tuple[tuple[bool, ...], tuple[bool, ...]] | None = None


def pad_pages(page_count: int, multiple: int, blank_pages_at: BlankPagesAt) -> tuple[Slot, ...]:
    """The reading order of ``page_count`` pages padded with blanks (None) to a multiple of ``multiple``.

    ``end`` appends the blanks, ``start`` prepends them, ``before_back_cover`` puts them before the
    last page so it stays the back cover.
    """
    pages: list[Slot] = list(range(page_count))
    blanks: list[Slot] = [None] * (-page_count % multiple)
    if blank_pages_at == "start":
        return tuple(blanks + pages)
    if blank_pages_at == "before_back_cover" and page_count >= 2:
        return tuple(pages[:-1] + blanks + pages[-1:])
    return tuple(pages + blanks)


def _mirror_rows(cells: Sequence[Slot], columns: int) -> tuple[Slot, ...]:
    """Reverse the column order of every row (the back of a sheet, or right-to-left reading)."""
    return tuple(
        slot for start in range(0, len(cells), columns) for slot in reversed(cells[start : start + columns])
    )


def nested_section(section: Sequence[Slot], right_to_left: bool, signature: int = 0) -> list[SheetOrder]:
    """Sheets of one folded section (saddle stitch): ``len(section)`` (a multiple of 4) pages, 2-up.

    Sheet ``s`` (0 = outermost) front: page ``M - 2s`` left, ``1 + 2s`` right; back: ``2 + 2s`` left,
    ``M - 1 - 2s`` right (1-based, ``M = len(section)``), mirrored for right-to-left binding.
    """
    count = len(section)
    sheets = []
    for s in range(count // 4):
        front = (section[count - 1 - 2 * s], section[2 * s])
        back = (section[2 * s + 1], section[count - 2 - 2 * s])
        if right_to_left:
            front, back = front[::-1], back[::-1]
        sheets.append(SheetOrder(front, back, signature, s == 0, s))
    return sheets


def _mirrored(cells: Sequence, columns: int, right_to_left: bool) -> tuple:
    return _mirror_rows(cells, columns) if right_to_left else tuple(cells)


def scheme_sheet(
    scheme: FoldScheme, pages: Sequence[Slot], right_to_left: bool, signature: int, creep_steps: int = 0
) -> SheetOrder:
    """The sheet of one signature: ``pages[i]`` is the signature's page ``i + 1``. Right-to-left
    binding mirrors the sheet, so that its spine folds on the right."""
    front = _mirrored([pages[n - 1] for n in scheme.front], scheme.columns, right_to_left)
    back = _mirrored([pages[n - 1] for n in scheme.back], scheme.columns, right_to_left)
    return SheetOrder(front, back, signature, True, creep_steps)


def _scheme_cells(scheme: FoldScheme, right_to_left: bool) -> tuple[tuple, tuple, tuple]:
    """``(turned, depth, spine_left)`` of ``scheme``'s cells, each as ``(front, back)``, mirrored for
    right to left (where every spine is on the other edge of its cell)."""
    def both(front: Sequence, back: Sequence) -> tuple:
        return (_mirrored(front, scheme.columns, right_to_left), _mirrored(back, scheme.columns, right_to_left))
    spine_left = both(scheme.spine_left_front(), scheme.spine_left_back())
    if right_to_left:
        spine_left = tuple(tuple(not left for left in side) for side in spine_left)
    return both(scheme.turned_front(), scheme.turned_back()), both(scheme.depth_front(), scheme.depth_back()), spine_left


def folded_order(
    page_count: int, scheme: FoldScheme, *, nested: bool, right_to_left: bool = False,
    blank_pages_at: BlankPagesAt = "end",
) -> PageOrder:
    """Booklets of ``scheme`` sheets, one signature each: gathered in order (perfect bound), or
    nested (saddle stitch: signature ``k`` of ``S`` from the outside carries pages
    ``k·P/2 + 1 … (k+1)·P/2`` and their mirror ``N - (k+1)·P/2 + 1 … N - k·P/2``, ``P`` pages a
    signature, ``N = S·P``). Pages are padded to whole signatures."""
    size = scheme.pages
    reading = pad_pages(page_count, size, blank_pages_at)
    count = len(reading) // size
    sheets = []
    for k in range(count):
        if nested:
            half = size // 2
            head = reading[k * half:(k + 1) * half]
            tail = reading[len(reading) - (k + 1) * half:len(reading) - k * half]
            section = tuple(head) + tuple(tail)
            sheets.append(scheme_sheet(scheme, section, right_to_left, k, k * scheme.leaves // 2))
        else:
            sheets.append(scheme_sheet(scheme, reading[k * size:(k + 1) * size], right_to_left, k))
    turned, depth, spine_left = _scheme_cells(scheme, right_to_left)
    return PageOrder(scheme.columns, scheme.rows, tuple(sheets), len(reading) - page_count, reading, turned, depth,
                     spine_left)


def saddle_stitch_order(
    page_count: int, *, right_to_left: bool = False, blank_pages_at: BlankPagesAt = "end"
) -> PageOrder:
    """Saddle stitch: pad to a multiple of 4, nest all sheets in one section."""
    reading = pad_pages(page_count, 4, blank_pages_at)
    return PageOrder(2, 1, tuple(nested_section(reading, right_to_left)), len(reading) - page_count, reading)


def perfect_bound_order(
    page_count: int,
    signature_pages: int,
    *,
    right_to_left: bool = False,
    blank_pages_at: BlankPagesAt = "end",
) -> PageOrder:
    """Perfect bound: sections of ``signature_pages`` (4, 8, 16 or 32) gathered in order, padded to
    whole sections."""
    reading = pad_pages(page_count, signature_pages, blank_pages_at)
    sheets: list[SheetOrder] = []
    for start in range(0, len(reading), signature_pages):
        sheets.extend(nested_section(reading[start : start + signature_pages], right_to_left, start // signature_pages))
    return PageOrder(2, 1, tuple(sheets), len(reading) - page_count, reading)


def _sheets_from_cells(
    units: Sequence, cell_of: list[list[int]], columns: int, duplex: bool, right_to_left: bool
) -> list[SheetOrder]:
    """Sheets from ``cell_of[s]``: the unit in each cell of sheet ``s`` (-1: none).

    A unit is a page (simplex) or a leaf ``(recto, verso)`` (duplex), whose verso lands on the back
    cell behind its recto.
    """
    sheets = []
    for cells in cell_of:
        if duplex:
            front = tuple(units[i][0] if i >= 0 else None for i in cells)
            back = tuple(units[i][1] if i >= 0 else None for i in cells)
        else:
            front, back = tuple(units[i] if i >= 0 else None for i in cells), None
        if right_to_left:
            front = _mirror_rows(front, columns)
            back = back if back is None else _mirror_rows(back, columns)
        sheets.append(SheetOrder(front, back if back is None else _mirror_rows(back, columns)))
    return sheets


def _grid_order(
    page_count: int, columns: int, rows: int, duplex: bool, right_to_left: bool, stacked: bool
) -> PageOrder:
    """n-up (``stacked`` False: fill sheet by sheet) or cut and stack (fill stack by stack)."""
    cells = columns * rows
    reading = pad_pages(page_count, 2 if duplex else 1, "end")
    units: list = [reading[i : i + 2] for i in range(0, len(reading), 2)] if duplex else list(reading)
    sheet_count = math.ceil(len(units) / cells)
    if stacked:
        cell_of = [[t * sheet_count + s if t * sheet_count + s < len(units) else -1 for t in range(cells)]
                   for s in range(sheet_count)]
    else:
        cell_of = [[s * cells + t if s * cells + t < len(units) else -1 for t in range(cells)]
                   for s in range(sheet_count)]
    sheets = _sheets_from_cells(units, cell_of, columns, duplex, right_to_left)
    return PageOrder(columns, rows, tuple(sheets), len(reading) - page_count, reading)


def n_up_order(
    page_count: int, columns: int, rows: int, *, duplex: bool = False, right_to_left: bool = False
) -> PageOrder:
    """n-up: pages in reading order across each side (duplex: leaf by leaf, odd pages on fronts)."""
    return _grid_order(page_count, columns, rows, duplex, right_to_left, stacked=False)


def cut_and_stack_order(
    page_count: int, columns: int, rows: int, *, duplex: bool = False, right_to_left: bool = False
) -> PageOrder:
    """Cut and stack: stack ``t`` (cell ``t``) holds a run of consecutive pages (or leaves)."""
    return _grid_order(page_count, columns, rows, duplex, right_to_left, stacked=True)


def step_and_repeat_order(pages: Sequence[int], columns: int, rows: int, *, duplex: bool = False) -> PageOrder:
    """Step and repeat: every cell of a side holds the same page; duplex pairs listed pages front/back."""
    cells = columns * rows
    sheets = []
    step = 2 if duplex else 1
    for start in range(0, len(pages), step):
        front = (pages[start],) * cells
        back = None
        if duplex:
            back = (pages[start + 1] if start + 1 < len(pages) else None,) * cells
        sheets.append(SheetOrder(front, back))
    return PageOrder(columns, rows, tuple(sheets), 0, tuple(pages))


def gang_copies(gang: Sequence[tuple[int, int | None]], cells: int) -> list[int]:
    """Copies of each gang entry on a side of ``cells`` cells: the asked ones, and the cells left
    shared by the entries without a count (the first ones one more when the share is uneven).

    Raises:
        ValueError: the asked copies, or one copy of each entry, exceed ``cells`` (the message names the
            counts; the planner raises InvalidLayout with it).
    """
    asked = sum(copies for _, copies in gang if copies is not None)
    open_entries = [i for i, (_, copies) in enumerate(gang) if copies is None]
    if asked + len(open_entries) > cells:
        counted = f" ({asked} counted and one each of {len(open_entries)} entries without copies)" if open_entries else ""
        raise ValueError(f"asks for {asked + len(open_entries)} copies{counted}")
    left = cells - asked
    counts = [copies or 0 for _, copies in gang]
    for rank, index in enumerate(open_entries):
        counts[index] = left // len(open_entries) + (1 if rank < left % len(open_entries) else 0)
    return counts


def gang_order(gang: Sequence[tuple[int, int | None]], columns: int, rows: int) -> PageOrder:
    """Gang-up: one side of ``columns × rows`` cells, each entry's copies of its page (1-based) in cell
    order; cells left over stay empty."""
    cells: list[Slot] = []
    for (page, _), copies in zip(gang, gang_copies(gang, columns * rows)):
        cells.extend([page - 1] * copies)
    cells.extend([None] * (columns * rows - len(cells)))
    return PageOrder(columns, rows, (SheetOrder(tuple(cells), None),), 0, tuple(page - 1 for page, _ in gang))


def page_order(layout: Layout | LayoutSpec, page_count: int, *, grid: tuple[int, int] | None = None) -> PageOrder:
    """The page order of ``layout`` for a document of ``page_count`` pages.

    Args:
        layout: the layout (a :class:`~imposition.engine.spec.LayoutSpec` is resolved first).
        page_count: pages in the source document (≥ 1).
        grid: ``(columns, rows)`` for step-and-repeat, whose grid comes from the page and sheet sizes.

    Raises:
        ValueError: step-and-repeat without a ``grid``, or a listed page beyond ``page_count`` (the
            engine checks the latter first and raises InvalidLayout).
    """
    if not isinstance(layout, Layout):
        layout = layout.resolved()
    right_to_left = layout.binding == "right_to_left"
    duplex = layout.duplex != "simplex"
    if layout.fold_scheme and layout.kind in (SADDLE_STITCH, PERFECT_BOUND):
        return folded_order(page_count, FOLD_SCHEMES[layout.fold_scheme], nested=layout.kind == SADDLE_STITCH,
                            right_to_left=right_to_left, blank_pages_at=layout.blank_pages_at)
    if layout.kind == SADDLE_STITCH:
        return saddle_stitch_order(page_count, right_to_left=right_to_left, blank_pages_at=layout.blank_pages_at)
    if layout.kind == PERFECT_BOUND:
        return perfect_bound_order(
            page_count, layout.signature_pages, right_to_left=right_to_left, blank_pages_at=layout.blank_pages_at
        )
    if layout.kind == STEP_AND_REPEAT:
        if grid is None:
            raise ValueError("step_and_repeat needs the grid computed from page and sheet sizes")
        if layout.gang:
            return gang_order(layout.gang, *grid)
        pages = [p - 1 for p in layout.pages] if layout.pages else list(range(page_count))
        if max(pages) >= page_count:
            raise ValueError(f"pages lists page {max(pages) + 1} of a {page_count}-page document")
        return step_and_repeat_order(pages, *grid, duplex=duplex)
    if layout.kind in (N_UP, CUT_AND_STACK):
        order = cut_and_stack_order if layout.kind == CUT_AND_STACK else n_up_order
        return order(page_count, layout.columns, layout.rows, duplex=duplex, right_to_left=right_to_left)
    raise ValueError(f"no page order for layout {layout.kind!r}")
