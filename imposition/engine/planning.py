"""The imposition plan: where every page lands on every plate, with its clip and the marks.

:func:`plan_imposition` turns a layout and the boxes of the source pages into an
:class:`ImpositionPlan`, independent of any PDF library; an engine only draws it::

    Layout + [PageBoxes] ─► frame (sheet, orientation, grid: _choose_frame)
                         ─► page order (imposition.engine.ordering) ─► per side: region, cells,
                            placements (trim, clip, matrix), bleed, marks, targets, colour
                            bar, slug ─► ImpositionPlan (plates in output order, warnings)

It follows print's conventions (listed in :func:`plan_imposition`'s docstring): cells on each
page's TrimBox, the block centred on the sheet; ``scaling: fit`` shrinks, never enlarges; bleed up
to ``bleed_mm`` without reaching a neighbour; room for bleed, marks and slug taken before cells are
sized; duplex registered by construction; fold schemes with creep and fold marks; every departure
from what was asked a :class:`~imposition.engine.errors.PlateWarning` (:func:`plan_warnings`).

Why each convention: docs/design.md, "Room before cells", "Registration by construction",
"Production layouts", "Default fold scheme per signature".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pikepdf import Matrix

from .errors import (
    BindingLimitExceeded, CreepTooLarge, ImpositionError, InvalidLayout, PaddedWithBlanks, PagesTurned, PageTooLarge,
    PlateWarning, TooManyCells, TrimSizeMismatch, page_ranges, shown,
)
from .geometry import EPSILON_PT, PageBoxes, Rect, available_bleed, displayed_size, fit_scale, placement_matrix
from .folds import FOLD_SCHEMES, SCHEME_FOR_SIGNATURE_PAGES
from .job import PERFECT_BOUND, SADDLE_STITCH, STEP_AND_REPEAT, Layout, SlugInfo
from .marks import (
    COLOUR_BAR_PATCHES, MARK_LINE_WIDTH_PT, SLUG_ASCENT_EM, SLUG_DESCENT_EM, SLUG_FONT_SIZE_PT, Mark, Patch, Target,
    colour_bar, crop_marks, fold_marks, fold_marks_across, ink_zone_bar, kept_marks, shortfalls, slug_text,
    slug_width_pt,
)
from .ordering import PageOrder, SheetOrder, _scheme_cells, gang_copies, page_order
from .sheets import mm_to_pt, pt_to_mm

if TYPE_CHECKING:
    from .spec import LayoutSpec

#: Clear space between the slug line and anything else on the plate or the printable edge (1 mm), pt.
SLUG_CLEARANCE_PT = mm_to_pt(1.0)
#: Height of the strip the slug line needs: its font's bounding box plus clearance above and below, pt.
SLUG_STRIP_PT = (SLUG_ASCENT_EM + SLUG_DESCENT_EM) * SLUG_FONT_SIZE_PT + 2 * SLUG_CLEARANCE_PT
#: Clear space between a registration target or the colour bar and the block of pages and marks (1 mm), pt.
MARK_CLEARANCE_PT = mm_to_pt(1.0)


@dataclass(frozen=True)
class Placement:
    """One page on a plate.

    Attributes:
        page: 0-based source page index.
        trim: where the page's trim lands on the sheet (pt).
        clip: the visible area: trim plus the bleed kept on each edge (pt).
        matrix: page default user space → sheet space, ``(a, b, c, d, e, f)``.
        scale: the page's scale factor (1.0 = 100 %).
        upside_down: turned 180° on the sheet (work and tumble's back).
        spine_edge: a booklet page's spine edge on the sheet, ``left`` or ``right`` (it needs no
            bleed); None for the grid layouts.
    """

    page: int
    trim: Rect
    clip: Rect
    matrix: tuple[float, float, float, float, float, float]
    scale: float
    upside_down: bool = False
    spine_edge: str | None = None


@dataclass(frozen=True)
class Plate:
    """One output page: one printed side (or, for work and turn/tumble, both sides on one plate).

    Attributes:
        slug_line: the slug's text, or None (not asked, or no room: then a warning says so).
        slug_origin_pt: where its baseline starts on the sheet ``(x, y)`` (pt), with ``slug_line``.
        targets: registration targets.
        patches: the colour bar's patches and the collation mark.
        signature: 0-based signature (booklets: the folded section) of the plate's sheet.
    """

    sheet_number: int
    side: str
    placements: tuple[Placement, ...]
    marks: tuple[Mark, ...]
    slug_line: str | None
    slug_origin_pt: tuple[float, float] | None = None
    targets: tuple[Target, ...] = ()
    patches: tuple[Patch, ...] = ()
    signature: int = 0


@dataclass(frozen=True)
class ImpositionPlan:
    """The whole job: sheet size (pt, as printed), plates in output order, counts, and the warnings
    (departures from what the layout asked, :func:`plan_warnings`)."""

    width_pt: float
    height_pt: float
    plates: tuple[Plate, ...]
    sheets: int
    blank_pages: int
    pages_in: int
    warnings: tuple[PlateWarning, ...] = ()


@dataclass(frozen=True)
class _Frame:
    """Cell geometry of one sheet orientation: side regions and the uniform cell.

    ``column_gaps``/``row_gaps`` are the space between neighbouring columns/rows (pt): the gutters of
    a grid, a booklet's trims, spine gutter and grind-off (:func:`_booklet_gaps`). ``lip_pt`` is a
    saddle lip beyond the block's outer column on the front's ``lip_left`` edge (the back's other
    edge). ``lift_pt`` raises the block above its centred place and ``shift_pt`` moves the front's to
    the right (the back's to the left, as seen) so that marks clear the sheet's non-printing edges
    (:func:`_shift`). ``marks_area`` is the printable area less those edges: where marks may be drawn.
    """

    sheet: Rect
    regions: tuple[Rect, Rect]  # front, back (back is turned 180° for work and tumble)
    printable: Rect  # the sheet less margins and gripper: nothing is drawn outside
    columns: int
    rows: int
    cell_width_pt: float
    cell_height_pt: float
    column_gaps: tuple[float, ...]
    row_gaps: tuple[float, ...]
    marks_area: Rect
    lip_pt: float = 0.0
    lip_left: bool = False
    lift_pt: float = 0.0
    shift_pt: float = 0.0
    reserved: bool = True

    @property
    def block_width_pt(self) -> float:
        """Width of the block of cells, gaps and lip (pt)."""
        return self.columns * self.cell_width_pt + sum(self.column_gaps) + self.lip_pt

    @property
    def block_height_pt(self) -> float:
        """Height of the block of cells and gaps (pt)."""
        return self.rows * self.cell_height_pt + sum(self.row_gaps)

    def cell(self, region: Rect, index: int, side: int = 0) -> Rect:
        """Cell ``index`` (row by row from the top-left as side ``side`` is seen: 0 front, 1 back) of
        the block centred in ``region`` (moved by ``lift_pt`` and ``shift_pt``, the back's shift
        mirrored; the lip on its side's edge)."""
        left = region.x0 + (region.width - self.block_width_pt) / 2 + (self.shift_pt if side == 0 else -self.shift_pt)
        if self.lip_left == (side == 0):
            left += self.lip_pt
        top = region.y1 - (region.height - self.block_height_pt) / 2 + self.lift_pt
        row, column = divmod(index, self.columns)
        x0 = left + column * self.cell_width_pt + sum(self.column_gaps[:column])
        y0 = top - (row + 1) * self.cell_height_pt - sum(self.row_gaps[:row])
        return Rect.from_size(x0, y0, self.cell_width_pt, self.cell_height_pt)


def _reserve_pt(layout: Layout) -> tuple[float, float, float, float]:
    """What a side's region keeps free around its block of trims, ``(left, bottom, right, top)`` pt:
    the bleed, crop marks (offset + length, all round), fold marks (head and foot), registration
    targets, the colour bar (head) and the slug strip (foot; work and tumble: the front's head, which
    the turn makes the sheet's foot)."""
    bleed = layout.bleed_pt
    marks = layout.crop_mark_offset_pt + layout.crop_mark_length_pt
    around = max(bleed, marks if layout.crop_marks else 0.0)
    folds = layout.fold_marks and layout.booklet
    head_foot = max(around, marks if folds else 0.0)
    if folds and layout.rows > 1:  # horizontal folds: marks left and right too
        around = head_foot
    left = bottom = right = top = around
    bottom = top = head_foot
    if layout.registration_marks:
        target = MARK_CLEARANCE_PT + layout.registration_mark_size_pt + MARK_LINE_WIDTH_PT
        left, bottom, right, top = left + target, bottom + target, right + target, top + target
    if layout.colour_bar:
        top += MARK_CLEARANCE_PT + layout.colour_bar_height_pt
    if layout.slug:
        if layout.duplex == "work_and_tumble":
            top += SLUG_STRIP_PT
        else:
            bottom += SLUG_STRIP_PT
    return left, bottom, right, top


def _mark_reserve_pt(layout: Layout) -> tuple[float, float, float, float]:
    """:func:`_reserve_pt` on the edges of the block that carry a mark (crop marks and targets: every
    edge; fold marks: head and foot, and left and right with horizontal folds; the colour bar: the
    head; the slug: the foot, or the head for work and tumble), 0 on the others: how far the marks
    area (:meth:`Layout.mark_area_pt`) must lie from the block of trims."""
    every = layout.crop_marks or layout.registration_marks
    folds = layout.fold_marks and layout.booklet
    sides = every or (folds and layout.rows > 1)
    head = every or folds or layout.colour_bar or (layout.slug and layout.duplex == "work_and_tumble")
    foot = every or folds or (layout.slug and layout.duplex != "work_and_tumble")
    left, bottom, right, top = _reserve_pt(layout)
    return (left if sides else 0.0, bottom if foot else 0.0, right if sides else 0.0, top if head else 0.0)


def _sizing_region(layout: Layout, front: Rect, width: float, height: float) -> Rect:
    """The part of the front's reserved region (``front``) the block of trims may fill: on each edge
    that carries marks also at the mark reserve (:func:`_mark_reserve_pt`) from the marks area, so
    that every mark asked clears the sheet's non-printing edges (a layout naming no press:
    :attr:`Layout.mark_edges_pt`); pages may use those edges where no mark needs them."""
    marks = Rect(*layout.mark_area_pt(width, height))
    left, bottom, right, top = _mark_reserve_pt(layout)
    x0 = max(front.x0, marks.x0 + left) if left else front.x0
    y0 = max(front.y0, marks.y0 + bottom) if bottom else front.y0
    x1 = min(front.x1, marks.x1 - right) if right else front.x1
    y1 = min(front.y1, marks.y1 - top) if top else front.y1
    return Rect(x0, y0, max(x0, x1), max(y0, y1))


def _regions(layout: Layout, width: float, height: float, reserve: bool) -> tuple[Rect, Rect, Rect]:
    """The front's and back's regions for cells (with ``reserve``, less :func:`_reserve_pt`) and the
    printable area; the back's is always the front's seen through the turn."""
    problem = layout.room_problem(width, height)
    if problem is not None:
        raise InvalidLayout(problem)
    front = Rect(*layout.side_regions_pt(width, height)[0])
    if reserve:
        left, bottom, right, top = _reserve_pt(layout)
        front = Rect(front.x0 + left, front.y0 + bottom, front.x1 - right, front.y1 - top)
    if layout.duplex == "work_and_tumble":
        back = Rect(front.x0, height - front.y1, front.x1, height - front.y0)
    else:
        back = Rect(width - front.x1, front.y0, width - front.x0, front.y1)
    return front, back, Rect(*layout.printable_pt(width, height))


def _grid(
    layout: Layout, region: Rect, page_size: tuple[float, float], sheet_size: tuple[float, float],
    max_cells_per_sheet: int | None,
) -> tuple[int, int]:
    """``(columns, rows)`` of one side: the layout's own; for step and repeat, where the layout fixes
    neither, as many copies of a ``page_size`` page as fit ``region`` at 100 % (at least one).

    Raises:
        TooManyCells: more than ``max_cells_per_sheet`` cells (None: no limit but a finite count),
            found before any cell is laid out.
    """
    columns: int | None = layout.columns
    rows: int | None = layout.rows
    if layout.kind == STEP_AND_REPEAT:
        gutters = layout.gutters_pt
        if not columns:
            columns_fit = (region.width + gutters[0] + EPSILON_PT) / (page_size[0] + gutters[0])
            columns = max(math.floor(columns_fit), 1) if math.isfinite(columns_fit) else None
        if not rows:
            rows_fit = (region.height + gutters[1] + EPSILON_PT) / (page_size[1] + gutters[1])
            rows = max(math.floor(rows_fit), 1) if math.isfinite(rows_fit) else None
    if columns is None or rows is None or (max_cells_per_sheet is not None and columns * rows > max_cells_per_sheet):
        cells = "too many to count" if columns is None or rows is None else f"{columns} × {rows} = {columns * rows}"
        raise TooManyCells(
            f"{layout.kind}: {cells} cells on one side of the {pt_to_mm(sheet_size[0]):.0f} × "
            f"{pt_to_mm(sheet_size[1]):.0f} mm sheet (the largest page is {pt_to_mm(page_size[0]):.3g} × "
            f"{pt_to_mm(page_size[1]):.3g} mm) is more than max_cells_per_sheet={max_cells_per_sheet}"
        )
    return columns, rows


def _frame(
    layout: Layout, sheet_size: tuple[float, float], page_sizes: Sequence[tuple[float, float]],
    max_cells_per_sheet: int | None,
) -> _Frame:
    """Cell geometry for one sheet orientation: cells sized after the room the layout asks around
    them (:func:`_reserve_pt`, clear of the sheet's non-printing edges: :func:`_sizing_region`). With
    ``scaling: none``, a page larger than such a cell is still placed at 100 % when it fits without
    that room (the missing bleed and marks are warnings).

    Raises:
        InvalidLayout: the margins or gutters leave no room on this sheet.
        TooManyCells: a side would hold more than ``max_cells_per_sheet`` cells.
        PageTooLarge: with ``scaling: none``, pages do not fit their cell even without that room
            (:func:`_page_too_large`).
    """
    frame = _sized(layout, sheet_size, page_sizes, max_cells_per_sheet, reserve=True)
    if layout.scaling == "none" and (frame is None or _too_large(frame, page_sizes)):
        frame = _sized(layout, sheet_size, page_sizes, max_cells_per_sheet, reserve=False)
        assert frame is not None  # without the reserve, room_problem has checked the gutters
        too_large = _too_large(frame, page_sizes)
        if too_large:
            raise _page_too_large(frame, too_large, [page_sizes[i] for i in too_large])
    if frame is None:  # the reserve leaves no room: cells as if none were asked (warnings follow)
        frame = _sized(layout, sheet_size, page_sizes, max_cells_per_sheet, reserve=False)
        assert frame is not None
    return frame


def _too_large(frame: _Frame, page_sizes: Sequence[tuple[float, float]]) -> list[int]:
    """The indexes of the pages of ``page_sizes`` larger than ``frame``'s cell."""
    return [index for index, (page_w, page_h) in enumerate(page_sizes)
            if page_w > frame.cell_width_pt + EPSILON_PT or page_h > frame.cell_height_pt + EPSILON_PT]


def _page_too_large(frame: _Frame, indexes: list[int], sizes: list[tuple[float, float]]) -> PageTooLarge:
    """The ``page_too_large`` error of ``sizes`` (the pages at ``indexes`` of the sizes the frame was
    sized for) in ``frame``'s cell; :func:`plan_imposition` words it (:func:`_worded_too_large`)."""
    cell = (frame.cell_width_pt, frame.cell_height_pt)
    error = PageTooLarge("pages do not fit their cell")
    error.unfit = (indexes, sizes, cell, (frame.sheet.width, frame.sheet.height),  # type: ignore[attr-defined]
                   min(fit_scale(size, cell) for size in sizes))
    return error


def _worded_too_large(error: PageTooLarge, page_numbers: Sequence[Sequence[int]]) -> PageTooLarge:
    """``error`` (:func:`_page_too_large`) naming the pages: ``page_numbers[i]`` are the 1-based pages
    of the frame's i-th size (a booklet's trim: every page), the cell and the scale that would fit."""
    indexes, sizes, cell, sheet, scale = error.unfit  # type: ignore[attr-defined]
    pages = sorted({number for index in indexes for number in page_numbers[index]})
    shown_sizes = sorted({(round(pt_to_mm(w), 1), round(pt_to_mm(h), 1)) for w, h in sizes})
    trims = "; ".join(f"{w:.1f} × {h:.1f} mm" for w, h in shown_sizes[:3]) + ("; …" if len(shown_sizes) > 3 else "")
    they, named = ("it", f"page {pages[0]} (trim {trims}) does") if len(pages) == 1 else \
        ("them", f"pages {page_ranges(pages)} (trim {trims}) do")
    return PageTooLarge(
        f"scaling=none: {named} not fit the {pt_to_mm(cell[0]):.1f} × {pt_to_mm(cell[1]):.1f} mm cell on the "
        f"{pt_to_mm(sheet[0]):.0f} × {pt_to_mm(sheet[1]):.0f} mm sheet at 100 %; scaling 'fit' would shrink {they} "
        f"to {math.floor(scale * 1000) / 10:.1f} % (with a warning saying so); or give a larger sheet"
    )


def _sized(
    layout: Layout, sheet_size: tuple[float, float], page_sizes: Sequence[tuple[float, float]],
    max_cells_per_sheet: int | None, *, reserve: bool,
) -> _Frame | None:
    """The frame with cells of an equal share of the (reserved, :func:`_sizing_region`) region, or
    None when the reserve leaves no room for them."""
    width, height = sheet_size
    front, back, printable = _regions(layout, width, height, reserve)
    sizing = _sizing_region(layout, front, width, height) if reserve else front
    if sizing.width <= EPSILON_PT or sizing.height <= EPSILON_PT:
        return None
    max_w = max(size[0] for size in page_sizes)
    max_h = max(size[1] for size in page_sizes)
    columns, rows = _grid(layout, sizing, (max_w, max_h), sheet_size, max_cells_per_sheet)
    if layout.booklet:
        column_gaps, row_gaps, lip_left = _booklet_gaps(layout)
        lip = layout.saddle_lip_pt
    else:
        column_gaps, row_gaps = (layout.gutters_pt[0],) * (columns - 1), (layout.gutters_pt[1],) * (rows - 1)
        lip, lip_left = 0.0, False
    share_w = (sizing.width - sum(column_gaps) - lip) / columns
    share_h = (sizing.height - sum(row_gaps)) / rows
    if share_w <= 0 or share_h <= 0:
        if reserve:
            return None
        fields = ("face_trim_mm, head_trim_mm, foot_trim_mm, spine_gutter_mm, grind_off_mm, saddle_lip_mm"
                  if layout.booklet else f"gutter_mm={pt_to_mm(max(layout.gutters_pt)):g}")
        raise InvalidLayout(
            f"{fields}: {columns} × {rows} cells do not fit the "
            f"{pt_to_mm(front.width):.1f} × {pt_to_mm(front.height):.1f} mm usable area"
        )
    marks_area = Rect(*layout.mark_area_pt(width, height))
    frame = _Frame(Rect(0, 0, width, height), (front, back), printable, columns, rows,
                   min(share_w, max_w), min(share_h, max_h), column_gaps, row_gaps, marks_area, lip, lip_left,
                   reserved=reserve)
    shift, lift = _shift(layout, frame, front)
    return replace(frame, shift_pt=shift, lift_pt=lift)


def _shift(layout: Layout, frame: _Frame, front: Rect) -> tuple[float, float]:
    """How far to move the front's block (right, up) from its centred place so that its marks clear
    the sheet's non-printing edges (the marks area: :meth:`Layout.mark_area_pt`) and it stays in
    ``front``: along each axis the least move that clears both edges carrying marks
    (:func:`_mark_reserve_pt`), 0 when they clear centred or no move clears both (the marks there are
    then cut or left out, with a warning)."""
    left, bottom, right, top = _mark_reserve_pt(layout)
    if not (left or bottom or right or top):
        return 0.0, 0.0
    first, last = frame.cell(front, 0), frame.cell(front, frame.columns * frame.rows - 1)
    marks = frame.marks_area

    def least(low: float, high: float, low_limit: float, high_limit: float) -> float:
        """The move of [low, high] into [low_limit, high_limit] nearest 0 (0 when none)."""
        least_up, most_up = low_limit - low, high_limit - high
        if least_up > most_up + EPSILON_PT or (least_up <= EPSILON_PT and most_up >= -EPSILON_PT):
            return 0.0
        return least_up if least_up > 0 else most_up

    shift = least(first.x0, last.x1, max(front.x0, marks.x0 + left if left else front.x0),
                  min(front.x1, marks.x1 - right if right else front.x1))
    lift = least(last.y0, first.y1, max(front.y0, marks.y0 + bottom if bottom else front.y0),
                 min(front.y1, marks.y1 - top if top else front.y1))
    return shift, lift


def _booklet_gaps(layout: Layout) -> tuple[tuple[float, ...], tuple[float, ...], bool]:
    """The gaps between a booklet's columns and rows on its front, and whether the saddle lip is on
    the front's left: a spine fold gets ``spine_gutter`` + 2 × ``grind_off`` (perfect bound), two
    fore edges 2 × ``face_trim``, two heads 2 × ``head_trim``, two feet 2 × ``foot_trim``."""
    scheme = FOLD_SCHEMES.get(layout.fold_scheme or "")
    right_to_left = layout.binding == "right_to_left"
    if scheme is None:  # 2-up sections: the spine between the two columns, page 1's half on the right
        spine_left: Sequence[bool] = (False, True)
        turned: Sequence[bool] = (False, False)
        columns, rows, first = 2, 1, 1
    else:
        turned_sides, _, spine_sides = _scheme_cells(scheme, right_to_left)
        turned, spine_left = turned_sides[0], spine_sides[0]
        columns, rows = scheme.columns, scheme.rows
        first = scheme.front.index(1) % columns
        if right_to_left:
            first = columns - 1 - first
    if scheme is None and right_to_left:  # the spine stays between the columns; page 1 on the left
        first = 0
    grind = 2 * layout.grind_off_pt if layout.kind == PERFECT_BOUND else 0.0
    column_gaps = tuple(
        layout.spine_gutter_pt + grind if not spine_left[column] else 2 * layout.face_trim_pt
        for column in range(columns - 1))
    row_gaps = tuple(
        2 * (layout.head_trim_pt if turned[row * columns] else layout.foot_trim_pt) for row in range(rows - 1))
    # the low-folio half (page 1's) is on the front's right for left-to-right binding
    return column_gaps, row_gaps, first < columns / 2


def _score(layout: Layout, frame: _Frame, page_sizes: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Larger is better. Step and repeat: (room for every mark asked, copies per side, smallest page
    scale): more copies never buy missing marks. The others: (smallest page scale, room for every mark
    asked): ``scaling: none`` places pages without that room only where no orientation holds both."""
    cell = (frame.cell_width_pt, frame.cell_height_pt)
    smallest = min(fit_scale(size, cell) for size in page_sizes)
    if layout.kind == STEP_AND_REPEAT:
        return float(frame.reserved), frame.columns * frame.rows, smallest
    return smallest, float(frame.reserved), 0.0


def _choose_frame(
    layout: Layout, page_sizes: Sequence[tuple[float, float]], max_cells_per_sheet: int | None
) -> _Frame:
    """The best frame of the orientations the layout allows; an orientation that cannot hold the
    pages is skipped, and when none can, the first one's error is raised (``page_too_large``: the
    orientation whose cell comes nearest to holding them)."""
    best: tuple[tuple[float, float, float], _Frame] | None = None
    first_error: ImpositionError | None = None
    for sheet_size in layout.sheet_sizes_pt():
        try:
            frame = _frame(layout, sheet_size, page_sizes, max_cells_per_sheet)
        except (InvalidLayout, PageTooLarge, TooManyCells) as exc:
            nearer = (isinstance(exc, PageTooLarge) and isinstance(first_error, PageTooLarge)
                      and exc.unfit[4] > first_error.unfit[4])  # type: ignore[attr-defined]
            first_error = exc if first_error is None or nearer else first_error
            continue
        score = _score(layout, frame, page_sizes)
        if best is None or score > best[0]:
            best = (score, frame)
    if best is None:
        assert first_error is not None
        raise first_error
    return best[1]


def _holds_at_full_size(
    layout: Layout, page_sizes: Sequence[tuple[float, float]], max_cells_per_sheet: int | None
) -> bool:
    """True when some orientation the layout allows holds every page at 100 % in its cells, with the
    room for bleed, marks and slug reserved (:func:`_reserve_pt`)."""
    for sheet_size in layout.sheet_sizes_pt():
        try:
            frame = _sized(layout, sheet_size, page_sizes, max_cells_per_sheet, reserve=True)
        except (InvalidLayout, TooManyCells):
            continue
        if frame is not None and not _too_large(frame, page_sizes):
            return True
    return False


def _check_signature_fits(
    layout: Layout, page_sizes: Sequence[tuple[float, float]], max_cells_per_sheet: int | None
) -> None:
    """A fold scheme chosen for ``signature_pages`` (``layout.fold_scheme_implied``) must hold the
    pages at 100 %: the layout asked for that many pages a sheet, so neither scaling nor 2-up sections
    may stand in for it.

    Raises:
        InvalidLayout: no allowed orientation holds the scheme's pages at 100 % with the reserved room;
            the message names ``signature_pages``, the pages a side asked for and the most pages a side
            of a catalogue scheme (:data:`~imposition.engine.folds.SCHEME_FOR_SIGNATURE_PAGES`) that fit.
    """
    if _holds_at_full_size(layout, page_sizes, max_cells_per_sheet):
        return
    scheme = FOLD_SCHEMES[layout.fold_scheme or ""]
    fitting = [
        FOLD_SCHEMES[name] for count, name in sorted(SCHEME_FOR_SIGNATURE_PAGES.items(), reverse=True)
        if count < scheme.pages and _holds_at_full_size(
            replace(layout, columns=FOLD_SCHEMES[name].columns, rows=FOLD_SCHEMES[name].rows, fold_scheme=name),
            page_sizes, max_cells_per_sheet)
    ]
    width, height = (pt_to_mm(v) for v in layout.sheet_size_pt)
    largest = max(page_sizes, key=lambda size: size[0] * size[1])
    holds = (f"holds {fitting[0].pages // 2} pages a side ({fitting[0].name}, signature_pages {fitting[0].pages})"
             if fitting else "holds fewer than 2 pages a side")
    raise InvalidLayout(
        f"signature_pages={scheme.pages} folds one sheet as {scheme.name}, {scheme.pages // 2} pages a side "
        f"({scheme.columns} × {scheme.rows}); the {width:.0f} × {height:.0f} mm sheet "
        f"(orientation {layout.orientation}), less margins, gripper, bleed and marks, {holds} of "
        f"{pt_to_mm(largest[0]):.1f} × {pt_to_mm(largest[1]):.1f} mm at 100 %; give a smaller signature_pages, a larger "
        f"sheet, fold_scheme {scheme.name!r} to scale the pages to fit, or fold_scheme 'sections' for nested 2-up sheets"
    )


@dataclass(frozen=True)
class _Cell:
    """How a page sits in one cell of a side: turned 180° (a fold scheme's head), its spine on the
    cell's left edge on the sheet (else its right; booklets only), creep steps toward the spine."""

    turned: bool = False
    spine_left: bool | None = None
    creep_steps: int = 0


#: A matrix as ``(a, b, c, d, e, f)`` (:attr:`Placement.matrix`).
_Shorthand = tuple[float, float, float, float, float, float]
#: Where a page lands in a cell, by (its boxes, cell index, side region, how it sits): trim, matrix,
#: scale. A plan works each out once: most documents have only a few distinct page geometries.
_Spots = dict[tuple[PageBoxes, int, Rect, _Cell, int], tuple[Rect, _Shorthand, float]]


def _spot(
    layout: Layout, frame: _Frame, region: Rect, index: int, boxes: PageBoxes, how: _Cell, side: int
) -> tuple[Rect, _Shorthand, float]:
    """Where a page with ``boxes`` lands in cell ``index`` of ``region`` (side ``side``): its trim on
    the sheet, the matrix from its user space to the sheet, its scale."""
    cell = frame.cell(region, index, side)
    page_w, page_h = displayed_size(boxes)
    scale = fit_scale((page_w, page_h), (cell.width, cell.height))
    placed_w, placed_h = page_w * scale, page_h * scale
    x0 = cell.x0 + (cell.width - placed_w) / 2
    shift = 0.0
    if how.spine_left is not None:  # against the spine; creep moves the content toward it
        creep_pt = layout.creep_pt * how.creep_steps
        x0, shift = (cell.x0, -creep_pt) if how.spine_left else (cell.x1 - placed_w, creep_pt)
    y0 = cell.y0 + (cell.height - placed_h) / 2
    matrix = placement_matrix(boxes, scale, (x0 + shift, y0), upside_down=how.turned)
    return Rect.from_size(x0, y0, placed_w, placed_h), matrix.shorthand, scale


def _cells_of(layout: Layout, order: PageOrder, sheet: SheetOrder, side: int) -> list[_Cell]:
    """How each cell of a side (0 front, 1 back as seen) holds its page."""
    count = order.columns * order.rows
    if not layout.booklet:
        return [_Cell()] * count
    base = sheet.creep_steps if layout.creep_pt else 0
    if order.turned is None or order.depth is None or order.spine_left is None:  # 2-up sections
        return [_Cell(False, index % order.columns == 1, base) for index in range(count)]
    return [_Cell(order.turned[side][index], order.spine_left[side][index],
                  base + (order.depth[side][index] if layout.creep_pt else 0)) for index in range(count)]


def _place_side(
    layout: Layout, frame: _Frame, region: Rect, slots: Sequence[int | None], pages: Sequence[PageBoxes],
    cells: Sequence[_Cell], spots: _Spots, side: int,
) -> list[Placement]:
    """Placements of one side (0 front, 1 back) in ``region`` (clip still equal to trim)."""
    placements = []
    for index, page in enumerate(slots):
        if page is None:
            continue
        how = cells[index]
        key = (pages[page], index, region, how, side)
        spot = spots.get(key)
        if spot is None:
            spot = spots[key] = _spot(layout, frame, region, index, pages[page], how, side)
        trim, matrix, scale = spot
        spine = None if how.spine_left is None else ("left" if how.spine_left else "right")
        placements.append(Placement(page, trim, trim, matrix, scale, how.turned, spine))
    return placements


def _turned(placements: list[Placement], region: Rect) -> list[Placement]:
    """The placements turned 180° about the centre of ``region`` (work and tumble's back)."""
    cx, cy = region.centre
    turn = Matrix().translated(-cx, -cy) @ Matrix().rotated(180) @ Matrix().translated(cx, cy)
    result = []
    for p in placements:
        trim = p.trim.transformed(turn)
        matrix = (Matrix(*p.matrix) @ turn).shorthand
        spine = {"left": "right", "right": "left"}.get(p.spine_edge or "")
        result.append(replace(p, trim=trim, clip=trim, matrix=matrix, upside_down=not p.upside_down, spine_edge=spine))
    return result


#: Why a page keeps less bleed than asked: the file holds less beyond its trim, or the gutter, the
#: printable edge or a neighbour leaves less.
BleedLimit = str


def _with_bleed(
    placements: list[Placement], pages: Sequence[PageBoxes], printable: Rect, bleed_pt: float,
    short: dict[tuple[BleedLimit, int], float],
) -> list[Placement]:
    """Each placement's clip: its trim grown by the bleed it may keep on each edge. Where it keeps
    less than ``bleed_pt``, ``short[(limit, page)]`` gets the least kept (pt), ``limit`` being
    ``file`` (the page's BleedBox holds less) or ``sheet`` (gutter, neighbour or printable edge).
    A booklet page's spine edge (``spine_edge``) keeps what the spine gap leaves and is never short:
    the binder folds or mills it, never trims it."""
    if bleed_pt <= 0:
        return placements
    result = []
    for p in placements:
        in_file = [min(bleed_pt, side * p.scale) for side in available_bleed(pages[p.page])]
        if p.upside_down:
            in_file = [in_file[2], in_file[3], in_file[0], in_file[1]]
        left, bottom, right, top = in_file
        left = min(left, p.trim.x0 - printable.x0)
        bottom = min(bottom, p.trim.y0 - printable.y0)
        right = min(right, printable.x1 - p.trim.x1)
        top = min(top, printable.y1 - p.trim.y1)
        for q in placements:
            if q is p:
                continue
            if q.trim.y0 < p.trim.y1 - EPSILON_PT and p.trim.y0 < q.trim.y1 - EPSILON_PT:
                if q.trim.x0 >= p.trim.x1 - EPSILON_PT:
                    right = min(right, (q.trim.x0 - p.trim.x1) / 2)
                if q.trim.x1 <= p.trim.x0 + EPSILON_PT:
                    left = min(left, (p.trim.x0 - q.trim.x1) / 2)
            if q.trim.x0 < p.trim.x1 - EPSILON_PT and p.trim.x0 < q.trim.x1 - EPSILON_PT:
                if q.trim.y0 >= p.trim.y1 - EPSILON_PT:
                    top = min(top, (q.trim.y0 - p.trim.y1) / 2)
                if q.trim.y1 <= p.trim.y0 + EPSILON_PT:
                    bottom = min(bottom, (p.trim.y0 - q.trim.y1) / 2)
        kept = [max(v, 0.0) for v in (left, bottom, right, top)]
        trimmed = [True, True, True, True]  # a booklet's spine edge is folded (or milled), never trimmed
        if p.spine_edge is not None:
            trimmed[0 if p.spine_edge == "left" else 2] = False
        in_file_trimmed = [f for f, t in zip(in_file, trimmed) if t]
        if min(in_file_trimmed) < bleed_pt - EPSILON_PT:
            short[("file", p.page)] = min(short.get(("file", p.page), bleed_pt), min(in_file_trimmed))
        cut = [k for k, f, t in zip(kept, in_file, trimmed) if t and k < f - EPSILON_PT]
        if cut:
            short[("sheet", p.page)] = min(short.get(("sheet", p.page), bleed_pt), min(cut))
        result.append(replace(p, clip=p.trim.expanded(*kept)))
    return result


#: Fold lines of a side: ``(axis, position, block)``: ``v`` at x or ``h`` at y (pt), across ``block``.
FoldLine = tuple[str, float, Rect]


def _folds(layout: Layout, frame: _Frame, region: Rect, turned: bool, side: int) -> list[FoldLine]:
    """The fold lines of a booklet side (when fold or crop marks are asked for: a crop mark never runs
    along one): the middle of the gap between two columns or two rows of cells (each is a fold of the
    schemes of :mod:`imposition.engine.folds`)."""
    if not layout.booklet or not (layout.fold_marks or layout.crop_marks):
        return []
    first, last = frame.cell(region, 0, side), frame.cell(region, frame.columns * frame.rows - 1, side)
    block = Rect(first.x0, last.y0, last.x1, first.y1)
    lines: list[FoldLine] = [("v", (frame.cell(region, column, side).x1 + frame.cell(region, column + 1, side).x0) / 2,
                              block) for column in range(frame.columns - 1)]
    lines += [("h", (frame.cell(region, row * frame.columns, side).y0
                     + frame.cell(region, (row + 1) * frame.columns, side).y1) / 2, block)
              for row in range(frame.rows - 1)]
    if turned:
        cx, cy = region.centre
        block = Rect(2 * cx - block.x1, 2 * cy - block.y1, 2 * cx - block.x0, 2 * cy - block.y0)
        lines = [(axis, (2 * cx if axis == "v" else 2 * cy) - at, block) for axis, at, _ in lines]
    return lines


def _marks(
    layout: Layout, frame: _Frame, placements: list[Placement], folds: list[FoldLine],
    missing: dict[tuple[str, str], float],
) -> list[Mark]:
    """The plate's marks as drawn; what the printable edge cut off the outer ones goes into
    ``missing[(kind, edge)]`` (most pt). No crop mark runs along a fold line or a page's spine edge:
    a booklet is folded (or milled) there, never cut."""
    keep_clear = [p.clip for p in placements]
    length_pt = layout.crop_mark_length_pt
    offset_pt = layout.crop_mark_offset_pt
    candidates: list[Mark] = []
    if layout.crop_marks:
        spines = [p.trim.x0 if p.spine_edge == "left" else p.trim.x1 for p in placements if p.spine_edge]
        candidates += crop_marks([p.trim for p in placements], length_pt=length_pt, offset_pt=offset_pt,
                                 uncut_x=[at for axis, at, _ in folds if axis == "v"] + spines,
                                 uncut_y=[at for axis, at, _ in folds if axis == "h"])
    if layout.fold_marks:
        candidates += fold_marks([(at, block) for axis, at, block in folds if axis == "v"],
                                 length_pt=length_pt, offset_pt=offset_pt)
        candidates += fold_marks_across([(at, block) for axis, at, block in folds if axis == "h"],
                                        length_pt=length_pt, offset_pt=offset_pt)
    if not candidates:
        return []
    for key, amount in shortfalls(candidates, keep_clear, frame.marks_area).items():
        missing[key] = max(missing.get(key, 0.0), amount)
    return kept_marks(candidates, keep_clear, frame.marks_area)


def _extent(placements: Sequence[Placement], marks: Sequence[Mark], extras: Sequence[Rect] = ()) -> Rect | None:
    """The bounding box of a plate's clips, marks (their line width included) and ``extras``, or None."""
    half_line = MARK_LINE_WIDTH_PT / 2
    rects = [p.clip for p in placements] + list(extras) + [
        Rect(min(m.x0, m.x1) - half_line, min(m.y0, m.y1) - half_line, max(m.x0, m.x1) + half_line,
             max(m.y0, m.y1) + half_line) for m in marks]
    if not rects:
        return None
    return Rect(min(r.x0 for r in rects), min(r.y0 for r in rects), max(r.x1 for r in rects), max(r.y1 for r in rects))


def _targets(layout: Layout, printable: Rect, block: Rect | None, missing: dict[tuple[str, str], float]) -> list[Target]:
    """Registration targets at the middle of each edge of ``block``, :data:`MARK_CLEARANCE_PT` beyond
    it; a target the printable area cannot hold is left out and ``missing[("registration", edge)]``
    gets the most mm it lacks (pt)."""
    if not layout.registration_marks or block is None:
        return []
    size = layout.registration_mark_size_pt
    reach = MARK_CLEARANCE_PT + size / 2  # from the block to the target's centre
    half = size / 2 + MARK_LINE_WIDTH_PT / 2
    cx, cy = block.centre
    spots = {"head": (cx, block.y1 + reach, printable.y1 - (block.y1 + reach + half)),
             "foot": (cx, block.y0 - reach, (block.y0 - reach - half) - printable.y0),
             "left": (block.x0 - reach, cy, (block.x0 - reach - half) - printable.x0),
             "right": (block.x1 + reach, cy, printable.x1 - (block.x1 + reach + half))}
    targets = []
    for edge, (x, y, room) in spots.items():
        if room >= -EPSILON_PT:
            targets.append(Target(x, y, size))
        else:
            missing[("registration", edge)] = max(missing.get(("registration", edge), 0.0), -room)
    return targets


def _colour_bar(
    layout: Layout, printable: Rect, block: Rect | None, head_pt: float, missing: dict[tuple[str, str], float]
) -> list[Patch]:
    """The colour bar: patches from the left of ``block`` to its right (at least one whole run),
    :data:`MARK_CLEARANCE_PT` above ``head_pt`` (the top of everything else); left out
    (``missing[("colour_bar", "head")]``) when the printable area cannot hold it."""
    if not layout.colour_bar or block is None:
        return []
    height = layout.colour_bar_height_pt
    y0 = max(block.y1, head_pt) + MARK_CLEARANCE_PT
    lacking = y0 + height - printable.y1
    if layout.ink_zones:  # a press: the bar spans every ink zone the printable width covers
        bar = ink_zone_bar((printable.x0 + printable.x1) / 2, layout.ink_zone_pt, layout.ink_zones,
                           printable.x0, printable.x1, y0, height)
        if lacking > EPSILON_PT or not bar:
            missing[("colour_bar", "head")] = max(missing.get(("colour_bar", "head"), 0.0), max(lacking, 0.0))
            return []
        return bar
    x1 = max(block.x1, min(printable.x1, block.x0 + height * len(COLOUR_BAR_PATCHES)))
    if lacking > EPSILON_PT or x1 - block.x0 < height * len(COLOUR_BAR_PATCHES) - EPSILON_PT:
        missing[("colour_bar", "head")] = max(missing.get(("colour_bar", "head"), 0.0), max(lacking, 0.0))
        return []
    return colour_bar(block.x0, x1, y0, height)


def _collation_mark(layout: Layout, frame: _Frame, sheet: SheetOrder) -> list[Patch]:
    """The back-step mark of ``sheet``'s signature on the spine of its front (perfect bound; only the
    outermost sheet of a signature): centred on the fold between the signature's last and first
    pages, ``signature mod steps`` marks below the head of its first page."""
    if not (layout.collation_marks and layout.kind == PERFECT_BOUND and sheet.outermost):
        return []
    scheme = FOLD_SCHEMES[layout.fold_scheme or "F4-1"]
    last, first = scheme.spine_cells()
    turned = scheme.turned_front()[first]
    if layout.binding == "right_to_left":
        last, first = scheme.backs_onto(last), scheme.backs_onto(first)
    region = frame.regions[0]
    a, b = frame.cell(region, last, 0), frame.cell(region, first, 0)
    spine_x = (a.x1 + b.x0) / 2 if a.x1 <= b.x0 + EPSILON_PT else (a.x0 + b.x1) / 2
    height, width = layout.collation_mark_height_pt, layout.collation_mark_width_pt
    steps = max(1, int((b.height + EPSILON_PT) // height))
    step = sheet.signature % steps
    y0 = b.y0 + step * height if turned else b.y1 - (step + 1) * height
    return [Patch(Rect(spine_x - width / 2, y0, spine_x + width / 2, y0 + height), None, "collation")]


def _slug_origin(text: str, printable: Rect, placements: Sequence[Placement], marks: Sequence[Mark],
                 extras: Sequence[Rect] = ()) -> tuple[float, float] | None:
    """Where the slug line's baseline starts: in the strip below everything on the plate (``extras``:
    targets and patches too; else the strip above), at least :data:`SLUG_CLEARANCE_PT` from it and
    from the printable edge; None when neither strip is tall and wide enough."""
    half_line = MARK_LINE_WIDTH_PT / 2
    lows = [p.clip.y0 for p in placements] + [min(m.y0, m.y1) - half_line for m in marks] + [r.y0 for r in extras]
    highs = [p.clip.y1 for p in placements] + [max(m.y0, m.y1) + half_line for m in marks] + [r.y1 for r in extras]
    if slug_width_pt(text, SLUG_FONT_SIZE_PT) + 2 * SLUG_CLEARANCE_PT > printable.width + EPSILON_PT:
        return None
    x = printable.x0 + SLUG_CLEARANCE_PT
    foot_top = min(lows, default=printable.y1)
    if foot_top - printable.y0 >= SLUG_STRIP_PT - EPSILON_PT:
        return x, printable.y0 + SLUG_CLEARANCE_PT + SLUG_DESCENT_EM * SLUG_FONT_SIZE_PT
    head_bottom = max(highs, default=printable.y0)
    if printable.y1 - head_bottom >= SLUG_STRIP_PT - EPSILON_PT:
        return x, printable.y1 - SLUG_CLEARANCE_PT - SLUG_ASCENT_EM * SLUG_FONT_SIZE_PT
    return None


def _sides(
    layout: Layout, frame: _Frame, order: PageOrder, sheet: SheetOrder, pages: Sequence[PageBoxes], spots: _Spots
) -> list[tuple[str, list[Placement], list[FoldLine]]]:
    """The plates of one sheet: (side name, placements, fold lines)."""
    front_region, back_region = frame.regions
    front = _place_side(layout, frame, front_region, sheet.front, pages, _cells_of(layout, order, sheet, 0), spots, 0)
    front_folds = _folds(layout, frame, front_region, False, 0)
    if sheet.back is None:
        return [("front", front, front_folds)]
    back = _place_side(layout, frame, back_region, sheet.back, pages, _cells_of(layout, order, sheet, 1), spots, 1)
    if layout.duplex == "work_and_turn":
        return [("front and back, work and turn", front + back,
                 front_folds + _folds(layout, frame, back_region, False, 1))]
    if layout.duplex == "work_and_tumble":
        turned = _turned(back, back_region)
        return [("front and back, work and tumble", front + turned,
                 front_folds + _folds(layout, frame, back_region, True, 1))]
    return [("front", front, front_folds), ("back", back, _folds(layout, frame, back_region, False, 1))]


def plan_imposition(
    layout: Layout | LayoutSpec, pages: Sequence[PageBoxes], *, slug: SlugInfo | None = None,
    max_cells_per_sheet: int | None = None, max_cells_per_job: int | None = None,
) -> ImpositionPlan:
    """Plan the imposition of a document.

    How cells are laid out (print conventions):
      * Cells are laid on each page's TrimBox: a cell is as large as the largest trimmed page (never
        larger than an equal share of the usable sheet), the block of cells and gutters is centred on
        the sheet, and each page sits centred in its cell (booklets: against the spine).
      * ``scaling: fit`` shrinks a page larger than its cell, without distortion; it never enlarges.
      * Bleed: around each trim, up to ``bleed_mm``, no more than the page's BleedBox holds and no more
        than half the space to the neighbouring trim (or the sheet edge), so neighbours never overlap.
      * Room: before cells are sized (and step-and-repeat copies counted), the side's region gives up
        what the layout asks outside the block of trims: bleed, crop and fold marks (offset + length),
        the slug strip; the gripper and margins are outside the region already. A page that then has to
        shrink is a ``scaled_to_fit`` warning; with ``scaling: none`` it stays at 100 % and the marks or
        bleed the sheet cannot hold become warnings.
      * Duplex registers by construction: the back's region is the front's seen through the turn
        (:meth:`~imposition.engine.job.Layout.side_regions_pt`).
      * Fold schemes (:mod:`imposition.engine.folds`): the scheme's grid, pages against their spine edge,
        turned 180° where its folds need it; creep ``creep_pt`` per leaf outside the page's own; fold
        marks on every fold line; a scheme chosen for ``signature_pages`` must hold the pages at 100 %,
        else the job fails naming ``signature_pages``.
      * Registration targets 1 mm beyond the middle of each edge of the block, the colour bar across
        its head, collation marks on the spine, their room reserved like crop marks'
        (``no_room_for_marks`` for what the printable area cannot hold).
      * Booklets: pages at one trim size (:func:`_booklet_trim`), turned first by ``rotate_to_fit``
        (:func:`_booklet_pages`); between pages the binder's trims, spine gutter, grind-off and
        lip (:func:`_booklet_gaps`); bleed on trimmed edges only; padding beyond half a signature
        warned (:func:`_padding_warnings`). Grids under ``rotate_to_fit`` turn a page of the other
        orientation than its cell (:func:`_turned_to_fit`).
      * Marks stay in the marks area: the printable area less the sheet's default non-printing edges
        when the layout names no press (gripper, tail, sides: :attr:`Layout.mark_edges_pt`); cells are
        sized (and step-and-repeat copies counted) after the room the marks need there
        (:func:`_sizing_region`), and :func:`_shift` moves the block when that clears them.
      * A saddle stitch within the binder's limits (:func:`_check_binding_limits`), creep within the
        spine's safe area (:func:`_check_creep`); pages ``rotate_to_fit`` turned are a notice.
      * Every departure from what was asked is a :class:`~imposition.engine.errors.PlateWarning` in the plan
        (:func:`plan_warnings`).

    Args:
        layout: the layout (a :class:`~imposition.engine.spec.LayoutSpec` is resolved first).
        pages: the boxes of every source page, in document order (at least one).
        slug: job and tenant for the slug line (printed when ``layout.slug`` is true).
        max_cells_per_sheet: most cells one side may hold (``settings.max_cells_per_sheet``); None
            for no limit.
        max_cells_per_job: most cells all sides together may hold (``settings.max_cells_per_job``;
            only step and repeat multiplies pages); None for no limit.

    Returns:
        The plan: sheet size, plates in output order (front, back, front, back… for sheetwise duplex;
        one plate per sheet for simplex, work and turn and work and tumble).

    Raises:
        InvalidLayout: margins or gutters leave no room in any allowed orientation, ``pages`` names a
            page the document lacks, or the fold scheme chosen for ``signature_pages`` does not hold
            the pages at 100 % (:func:`_check_signature_fits`).
        PageTooLarge: with ``scaling: none`` (the default), pages do not fit their cell in any allowed
            orientation; the message names them, the cell and the scale that would fit.
        TrimSizeMismatch: a booklet's pages cannot share one trim size (:func:`_booklet_trim`).
        BindingLimitExceeded: a saddle stitch past ``saddle_max_sheets`` or ``saddle_max_thickness_mm``.
        CreepTooLarge: creep would move pages' content further than ``spine_safe_pt``.
        TooManyCells: a side would hold more than ``max_cells_per_sheet`` cells in every allowed
            orientation (step and repeat of a tiny page), or the job more than ``max_cells_per_job``;
            found before the cells are laid out.
    """
    if not isinstance(layout, Layout):
        layout = layout.resolved()
    considered = _considered(layout, len(pages))
    given = pages
    booklet_order: PageOrder | None = None
    if layout.booklet:
        booklet_order = page_order(layout, len(pages))
        _check_binding_limits(layout, booklet_order, len(pages))
        _check_creep(layout, booklet_order)
        pages = _booklet_pages(layout, pages, booklet_order)
        frame_sizes = [_booklet_trim(layout, [displayed_size(page) for page in pages])]
        frame_pages: list[Sequence[int]] = [range(1, len(pages) + 1)]
    else:
        frame_sizes = [displayed_size(pages[i]) for i in considered]
        frame_pages = [(i + 1,) for i in considered]
    if layout.fold_scheme_implied:
        _check_signature_fits(layout, frame_sizes, max_cells_per_sheet)
    try:
        if not layout.booklet and layout.rotate_to_fit in ("ccw", "cw"):
            pages, frame = _turned_to_fit(layout, pages, considered, max_cells_per_sheet)
        else:
            frame = _choose_frame(layout, frame_sizes, max_cells_per_sheet)
    except PageTooLarge as exc:
        raise _worded_too_large(exc, frame_pages) from None
    if layout.kind == STEP_AND_REPEAT and layout.gang:
        try:
            gang_copies(layout.gang, frame.columns * frame.rows)
        except ValueError as exc:
            largest = max((displayed_size(pages[i]) for i in considered), key=lambda size: size[0] * size[1])
            raise InvalidLayout(
                f"gang: {exc}, more than the {frame.columns} × {frame.rows} = {frame.columns * frame.rows} cells of the "
                f"largest grid that fits the {pt_to_mm(frame.sheet.width):.0f} × {pt_to_mm(frame.sheet.height):.0f} mm "
                f"sheet (cells of {pt_to_mm(largest[0]):.1f} × {pt_to_mm(largest[1]):.1f} mm)"
            ) from None
    if layout.kind == STEP_AND_REPEAT and max_cells_per_job is not None:
        sides = 1 if layout.gang else len(layout.pages) if layout.pages else len(pages)
        if sides * frame.columns * frame.rows > max_cells_per_job:
            raise TooManyCells(
                f"step_and_repeat: {sides} sides of {frame.columns} × {frame.rows} copies make "
                f"{sides * frame.columns * frame.rows} cells, more than max_cells_per_job={max_cells_per_job}"
            )
    order: PageOrder = booklet_order or page_order(layout, len(pages), grid=(frame.columns, frame.rows))
    plates: list[Plate] = []
    spots: _Spots = {}
    found = _Departures()
    for number, sheet in enumerate(order.sheets, start=1):
        for side, placements, folds in _sides(layout, frame, order, sheet, pages, spots):
            placements = _with_bleed(placements, pages, frame.printable, layout.bleed_pt, found.bleed)
            for placement in placements:
                if placement.scale < 1.0:
                    found.scale[placement.page] = min(found.scale.get(placement.page, 1.0), placement.scale)
            marks = _marks(layout, frame, placements, folds, found.marks)
            block = _extent(placements, marks) if layout.registration_marks or layout.colour_bar else None
            targets = _targets(layout, frame.marks_area, block, found.marks)
            patches = _colour_bar(layout, frame.marks_area, block, max((t.bounds.y1 for t in targets), default=0.0),
                                  found.marks)
            if side.startswith("front"):
                patches += _collation_mark(layout, frame, sheet)
            slug_line = origin = None
            if layout.slug:
                text = slug_text(slug or SlugInfo("-", "-"), number, len(order.sheets), side)
                extras = [t.bounds for t in targets] + [p.rect for p in patches]
                origin = _slug_origin(text, frame.marks_area, placements, marks, extras)
                if origin is None:
                    found.slug_dropped.append(len(plates) + 1)
                else:
                    slug_line = text
            plates.append(Plate(number, side, tuple(placements), tuple(marks), slug_line, origin,
                                tuple(targets), tuple(patches), sheet.signature))
    warnings = (plan_warnings(layout, frame, found) + _padding_warnings(layout, order, len(pages))
                + _turn_notice(layout, given, pages))
    return ImpositionPlan(
        frame.sheet.width, frame.sheet.height, tuple(plates), len(order.sheets), order.blank_pages, len(pages),
        warnings,
    )


def _considered(layout: Layout, page_count: int) -> Sequence[int]:
    """The 0-based pages the cells are sized for: every page, or those a step-and-repeat layout lists.

    Raises:
        InvalidLayout: ``pages`` or ``gang`` names a page the document lacks.
    """
    listed = ([(f"pages[{i}]", number) for i, number in enumerate(layout.pages or ())]
              + [(f"gang[{i}].page", number) for i, (number, _) in enumerate(layout.gang or ())])
    if layout.kind != STEP_AND_REPEAT or not listed:
        return range(page_count)
    for name, number in listed:
        if number > page_count:
            raise InvalidLayout(f"{name}={shown(number)}: the document has only {page_count} pages")
    return sorted({number - 1 for _, number in listed})


def _check_binding_limits(layout: Layout, order: PageOrder, page_count: int) -> None:
    """A saddle stitch within what a stitcher binds: at most ``layout.saddle_max_sheets`` nested
    sheets (4 pages each; a fold scheme's sheet of N pages counts N / 4) and at most
    ``layout.saddle_max_thickness_mm`` at the spine (2 leaves a sheet × ``paper_caliper_mm``).

    Raises:
        BindingLimitExceeded: past either, naming the sheets, the thickness and the limits, and
            advising perfect binding.
    """
    if layout.kind != SADDLE_STITCH or not layout.saddle_max_sheets:
        return
    padded = len(order.reading_order)
    sheets = padded // 4
    thickness_mm = 2 * sheets * layout.paper_caliper_mm
    if sheets <= layout.saddle_max_sheets and thickness_mm <= layout.saddle_max_thickness_mm + 1e-9:
        return
    raise BindingLimitExceeded(
        f"saddle_stitch: {page_count} pages ({padded} padded) nest {sheets} sheets, {thickness_mm:.1f} mm thick at "
        f"the spine (2 leaves a sheet × paper_caliper_mm={layout.paper_caliper_mm:g}); a saddle stitch binds at most "
        f"saddle_stitch_max_sheets={layout.saddle_max_sheets} sheets and "
        f"saddle_stitch_max_thickness_mm={layout.saddle_max_thickness_mm:g}: bind it as perfect_bound"
    )


def _check_creep(layout: Layout, order: PageOrder) -> None:
    """Creep moves a booklet page's content toward the spine by ``creep_pt`` per leaf outside its own
    (:func:`_cells_of`); it may move it at most ``layout.spine_safe_pt``, the strip along the spine a
    page's content keeps clear of: more would move content past the trim at the spine.

    Raises:
        CreepTooLarge: naming the pages that would move further, and the millimetres.
    """
    if not layout.creep_pt:
        return
    moved: dict[int, float] = {}
    for sheet in order.sheets:
        for side, slots in enumerate((sheet.front, sheet.back)):
            if slots is None:
                continue
            for page, cell in zip(slots, _cells_of(layout, order, sheet, side)):
                if page is not None and cell.creep_steps * layout.creep_pt > layout.spine_safe_pt + EPSILON_PT:
                    moved[page] = cell.creep_steps * layout.creep_pt
    if not moved:
        return
    least, most = pt_to_mm(min(moved.values())), pt_to_mm(max(moved.values()))
    raise CreepTooLarge(
        f"creep_mm={pt_to_mm(layout.creep_pt):g}: pages {page_ranges(p + 1 for p in moved)} would move "
        f"{least:.1f}–{most:.1f} mm toward the spine, more than spine_safe_area_mm={pt_to_mm(layout.spine_safe_pt):g} "
        f"(the strip along the spine their content keeps clear of): their content would pass the trim at the "
        f"spine; give a smaller creep_mm, or a larger spine_safe_area_mm if the pages keep that much clear"
    )


def _turn_notice(layout: Layout, given: Sequence[PageBoxes], placed: Sequence[PageBoxes]) -> tuple[PlateWarning, ...]:
    """The ``pages_turned`` notice naming the pages ``rotate_to_fit`` turned (``placed`` differs from
    ``given``), clockwise and counter-clockwise apart; none when it turned none."""
    turned: dict[str, list[int]] = {"clockwise": [], "counter-clockwise": []}
    for number, (before, after) in enumerate(zip(given, placed), start=1):
        if after is not before:
            way = (after.rotate_degrees_cw - before.rotate_degrees_cw) % 360
            turned["clockwise" if way == 90 else "counter-clockwise"].append(number)
    if not any(turned.values()):
        return ()
    what = "the booklet's trim" if layout.booklet else "their cells"
    done = "; ".join(f"{'page' if len(numbers) == 1 else 'pages'} {page_ranges(numbers)} 90° {way}"
                     for way, numbers in turned.items() if numbers)
    return (PlateWarning(PagesTurned.code, f"rotate_to_fit={layout.rotate_to_fit!r}: turned {done} to {what}"),)


#: Two trim sizes closer than this on each side (pt, about 0.35 mm) are one: page sizes written
#: in whole points or millimetres differ from the standard's by less.
TRIM_TOLERANCE_PT = 1.0


def _orientation(size: tuple[float, float]) -> str:
    """``portrait``, ``landscape`` or ``square`` (sides within :data:`TRIM_TOLERANCE_PT`)."""
    width, height = size
    return "square" if abs(width - height) <= TRIM_TOLERANCE_PT else "landscape" if width > height else "portrait"


def _quarter_turn(boxes: PageBoxes, clockwise: bool) -> PageBoxes:
    """``boxes`` of the page turned 90° (clockwise or not) on top of its own /Rotate."""
    return replace(boxes, rotate_degrees_cw=(boxes.rotate_degrees_cw + (90 if clockwise else 270)) % 360)


def _turned_to_fit(
    layout: Layout, pages: Sequence[PageBoxes], considered: Sequence[int], max_cells_per_sheet: int | None,
) -> tuple[list[PageBoxes], _Frame]:
    """Grid layouts under ``rotate_to_fit`` ``ccw``/``cw``: n-up and cut and stack turn each page whose
    orientation differs from its cell's (the cells as ``scaling: fit`` sizes them) 90° that way and
    size the cells anew; step and repeat turns the listed pages when that holds more copies (or
    places them larger), and raises the upright pages' error when neither way fits."""
    clockwise = layout.rotate_to_fit == "cw"
    turned = list(pages)
    upright = [displayed_size(pages[i]) for i in considered]
    if layout.kind == STEP_AND_REPEAT:
        for i in considered:
            turned[i] = _quarter_turn(pages[i], clockwise)
        sizes = [displayed_size(turned[i]) for i in considered]
        try:
            other = _choose_frame(layout, sizes, max_cells_per_sheet)
        except (InvalidLayout, PageTooLarge, TooManyCells):
            return list(pages), _choose_frame(layout, upright, max_cells_per_sheet)
        try:
            frame = _choose_frame(layout, upright, max_cells_per_sheet)
        except (InvalidLayout, PageTooLarge, TooManyCells):
            return turned, other
        better = _score(layout, other, sizes) > _score(layout, frame, upright)
        return (turned, other) if better else (list(pages), frame)
    cells = _choose_frame(replace(layout, scaling="fit"), upright, max_cells_per_sheet)
    cell = _orientation((cells.cell_width_pt, cells.cell_height_pt))
    for i in considered:
        own = _orientation(displayed_size(pages[i]))
        if "square" not in (own, cell) and own != cell:
            turned[i] = _quarter_turn(pages[i], clockwise)
    return turned, _choose_frame(layout, [displayed_size(turned[i]) for i in considered], max_cells_per_sheet)


def _booklet_pages(layout: Layout, pages: Sequence[PageBoxes], order: PageOrder) -> list[PageBoxes]:
    """A booklet's pages, those of the other orientation than most turned by ``rotate_to_fit``
    (``ccw``/``cw`` that way; ``spine``/``fore_edge`` their head toward that edge of their leaf: a
    recto's spine is its left edge, right to left binding its right)."""
    if layout.rotate_to_fit == "none":
        return list(pages)
    orientations = [_orientation(displayed_size(page)) for page in pages]
    counts = {o: orientations.count(o) for o in ("portrait", "landscape")}
    first = next((o for o in orientations if o != "square"), "portrait")
    trim = max(("portrait", "landscape"), key=lambda o: (counts[o], o == first))
    position = {page: at for at, page in enumerate(order.reading_order) if page is not None}
    turned = list(pages)
    for index, own in enumerate(orientations):
        if own == "square" or own == trim:
            continue
        if layout.rotate_to_fit in ("ccw", "cw"):
            clockwise = layout.rotate_to_fit == "cw"
        else:
            spine_left = (position[index] % 2 == 0) == (layout.binding == "left_to_right")
            clockwise = spine_left == (layout.rotate_to_fit == "fore_edge")  # cw puts the head on the right
        turned[index] = _quarter_turn(pages[index], clockwise)
    return turned


def _shares_trim(size: tuple[float, float], trim: tuple[float, float], scaling: str) -> bool:
    """True when a page of ``size`` is placed at the booklet's ``trim``: the same size, or with
    ``scaling: fit`` a larger page of the same proportions (shrunk to it)."""
    if all(abs(a - b) <= TRIM_TOLERANCE_PT for a, b in zip(size, trim)):
        return True
    scale = min(trim[0] / size[0], trim[1] / size[1])
    return scaling == "fit" and scale < 1 and all(abs(a * scale - b) <= TRIM_TOLERANCE_PT for a, b in zip(size, trim))


def _booklet_trim(layout: Layout, sizes: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The trim size of a booklet: the displayed size most pages have (ties: the earliest page's).

    Raises:
        TrimSizeMismatch: a page cannot be placed at that trim (:func:`_shares_trim`); the message
            names the pages, their sizes, the trim, and ``rotate_to_fit`` when turning would help.
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for index, (width, height) in enumerate(sizes):
        key = next((k for k in groups if all(abs(a - b) <= TRIM_TOLERANCE_PT for a, b in zip(k, (width, height)))),
                   (round(width), round(height)))
        groups.setdefault(key, []).append(index)
    members = max(groups.values(), key=lambda indexes: (len(indexes), -indexes[0]))
    trim = sizes[members[0]]
    odd = [i for i, size in enumerate(sizes) if not _shares_trim(size, trim, layout.scaling)]
    if not odd:
        return trim

    def mm(size: tuple[float, float]) -> str:
        return f"{pt_to_mm(size[0]):.1f} × {pt_to_mm(size[1]):.1f} mm"

    shown_sizes = "; ".join(f"page {i + 1}: {mm(sizes[i])}" for i in odd[:5]) + ("; …" if len(odd) > 5 else "")
    turnable = all(_shares_trim((sizes[i][1], sizes[i][0]), trim, layout.scaling) for i in odd)
    advice = ("give rotate_to_fit ('ccw', 'cw', 'spine' or 'fore_edge') to turn them to the trim"
              if turnable and layout.rotate_to_fit == "none" else
              "a booklet is trimmed once: give every page the trim size"
              + (", or scaling 'fit' to shrink a larger page of its proportions" if layout.scaling == "none" else ""))
    raise TrimSizeMismatch(
        f"{layout.kind}: pages {page_ranges(i + 1 for i in odd)} cannot share the booklet's trim of {mm(trim)} "
        f"(pages {page_ranges(i + 1 for i in members)}): {shown_sizes}; {advice}"
    )


def _padding_warnings(layout: Layout, order: PageOrder, page_count: int) -> tuple[PlateWarning, ...]:
    """``padded_with_blanks`` when a booklet was padded with more blanks than half a signature (the
    unit it pads to: the fold scheme's pages, ``signature_pages`` for perfect-bound sections, a
    4-page sheet for saddle-stitched sections), naming a smaller signature that pads less."""
    if not layout.booklet:
        return ()
    scheme = FOLD_SCHEMES.get(layout.fold_scheme or "")
    unit = scheme.pages if scheme else layout.signature_pages if layout.kind == PERFECT_BOUND else 4
    if 2 * order.blank_pages <= unit:
        return ()
    smaller = [(-page_count % size, size) for size in sorted(SCHEME_FOR_SIGNATURE_PAGES) if size < unit]
    advice = ""
    if smaller:
        blanks, size = min(smaller)
        field = (f"fold_scheme {SCHEME_FOR_SIGNATURE_PAGES[size]!r}" if scheme and not layout.fold_scheme_implied
                 else f"signature_pages {size}")
        advice = f"; {field} would pad with {blanks}"
    what = f"fold_scheme={scheme.name}" if scheme else f"signature of {unit} pages"
    return (PlateWarning(PaddedWithBlanks.code, (
        f"{what}: {page_count} pages padded to whole signatures of {unit} with {order.blank_pages} blank pages, "
        f"more than half a signature{advice}"
    )),)


@dataclass
class _Departures:
    """What a plan found short of the layout, gathered over its plates.

    Attributes:
        scale: 0-based page → its smallest scale below 1.
        bleed: ``(limit, 0-based page)`` → least bleed kept (pt); limit ``file`` or ``sheet``.
        marks: ``(kind, edge)`` → most the printable edge cut off an outer mark (pt).
        slug_dropped: 1-based plates without their slug line.
    """

    scale: dict[int, float] = field(default_factory=dict)
    bleed: dict[tuple[str, int], float] = field(default_factory=dict)
    marks: dict[tuple[str, str], float] = field(default_factory=dict)
    slug_dropped: list[int] = field(default_factory=list)


def _default_edge_note(layout: Layout, edge: str) -> str:
    """What a ``no_room_for_marks`` warning adds at an edge of the sheet whose default non-printing
    strip (:attr:`Layout.mark_edges_pt`: no press named) keeps marks off."""
    top, right, bottom, left = layout.mark_edges_pt
    if layout.duplex == "work_and_tumble":
        top = bottom = max(top, bottom)
    strip = {"head": top, "right": right, "foot": bottom, "left": left}[edge]
    if not strip:
        return ""
    gripper = edge == "foot" or (edge == "head" and layout.duplex == "work_and_tumble")
    what, field = (("gripper", "gripper_mm") if gripper else
                   ("tail" if edge == "head" else "side", "margin_mm"))
    return (f"; with no press named, marks keep out of a default {pt_to_mm(strip):g} mm {what} at the {edge}: "
            f"name a press, or give {field} (0 lets marks to the sheet's edge)")


def plan_warnings(layout: Layout, frame: _Frame, found: _Departures) -> tuple[PlateWarning, ...]:
    """The typed warnings of a plan, each naming the field, what was asked and what the plate has."""
    warnings = []
    sheet = f"the {pt_to_mm(frame.sheet.width):.0f} × {pt_to_mm(frame.sheet.height):.0f} mm sheet"
    if found.scale:
        least = min(found.scale.values())
        warnings.append(PlateWarning("scaled_to_fit", (
            f"scaling=fit: pages {page_ranges(p + 1 for p in found.scale)} shrunk to fit the "
            f"{pt_to_mm(frame.cell_width_pt):.1f} × {pt_to_mm(frame.cell_height_pt):.1f} mm cells on {sheet}, "
            f"the smallest to {least * 100:.1f} %"
        )))
    for (kind, edge), missing_pt in sorted(found.marks.items()):
        if kind in ("registration", "colour_bar"):
            registration = kind == "registration"
            what = "registration_marks: the target" if registration else "colour_bar: the colour bar"
            size_field = "registration_mark_size_mm" if registration else "colour_bar_height_mm"
            size_pt = (layout.registration_mark_size_pt + MARK_LINE_WIDTH_PT / 2 if registration
                       else layout.colour_bar_height_pt)
            need_pt = size_pt + MARK_CLEARANCE_PT
            warnings.append(PlateWarning("no_room_for_marks", (
                f"{what} at the {edge} of {sheet} needs {pt_to_mm(need_pt):.1f} mm beyond the pages and their marks "
                f"({size_field} + 1 mm); the printable area (margins, gripper) leaves "
                f"{max(pt_to_mm(need_pt - missing_pt), 0.0):.1f} mm: {pt_to_mm(missing_pt):.1f} mm missing, left out"
                + _default_edge_note(layout, edge)
            )))
            continue
        fields = "crop_marks" if kind == "crop" else "fold_marks"
        need_pt = layout.crop_mark_offset_pt + layout.crop_mark_length_pt
        missing_pt = min(missing_pt, need_pt)
        warnings.append(PlateWarning("no_room_for_marks", (
            f"{fields}: the marks at the {edge} of {sheet} need {pt_to_mm(need_pt):.1f} mm outside the trim "
            f"(crop_mark_offset_mm + crop_mark_length_mm); the printable area (margins, gripper) leaves "
            f"{max(pt_to_mm(need_pt - missing_pt), 0.0):.1f} mm: {pt_to_mm(missing_pt):.1f} mm missing"
            + _default_edge_note(layout, edge)
        )))
    for limit in ("file", "sheet"):
        short = {page: kept for (why, page), kept in found.bleed.items() if why == limit}
        if not short:
            continue
        bleed_mm = pt_to_mm(layout.bleed_pt)
        room = (f"face_trim_mm, head_trim_mm and foot_trim_mm of {bleed_mm:g} (the default) would keep it whole "
                f"between pages" if layout.booklet else f"gutter_mm={2 * bleed_mm:g} would keep it whole between pages")
        because = ("the page's BleedBox holds less beyond its trim (on its trimmed edges; a booklet's spine needs none)"
                   if limit == "file" else
                   f"a neighbour or the printable edge (margin_mm, gripper_mm) leaves less; {room}")
        warnings.append(PlateWarning("bleed_reduced", (
            f"bleed_mm={pt_to_mm(layout.bleed_pt):g}: pages {page_ranges(p + 1 for p in short)} keep as little "
            f"as {pt_to_mm(min(short.values())):.1f} mm: {because}"
        )))
    if found.slug_dropped:
        warnings.append(PlateWarning("no_room_for_slug", (
            f"slug: plates {page_ranges(found.slug_dropped)} have no strip of {pt_to_mm(SLUG_STRIP_PT):.1f} mm "
            f"outside every trim, bleed and mark for the slug line; it is left out"
        )))
    return tuple(warnings)
