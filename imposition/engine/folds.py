"""Fold schemes: which page of a folded signature lies in which cell of its sheet, head up or turned.

Each scheme is named after the CIP4 JDF fold catalogue (JDF 1.x, "Fold Catalog", FoldingParams/
@FoldCatalog: ``F<pages>-<variant>``). The page positions are those of CIP4's pagination catalogue
as its reference library transcribes it (JDFLibJ ``PaginationCatalog``: the catalogue's front side,
which carries no page 1); the fold sequence of each scheme is the one that folds that sheet into a
signature reading 1…N with its spine on the left, and the heads to turn and the creep of each leaf
follow from it (:func:`fold`), so they are computed, never typed in.

Conventions (those of :mod:`imposition.engine.ordering`): a side's cells are listed row by row from the
top-left *as that side is seen*; our ``front`` is the side that carries the signature's first page
(the outside of the folded signature: the catalogue's back); the back is seen after turning the
sheet over side to side, so front cell ``(row, column)`` backs onto back cell
``(row, columns - 1 - column)``. Page numbers are 1-based within the signature.

A fold is ``(axis, moving, direction)``: ``axis`` ``v`` (a vertical fold line through the middle of
what is left) or ``h`` (horizontal); ``moving`` the half that is turned over, ``low`` (left, or
bottom) or ``high`` (right, or top); ``direction`` ``over`` (onto the front, which faces up) or
``under`` (behind it). The last fold of every scheme here is the spine: vertical, its fold on the left.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

Axis = Literal["v", "h"]
Half = Literal["low", "high"]
Direction = Literal["over", "under"]
_AXES: dict[str, Axis] = {"v": "v", "h": "h"}  # an axis as :func:`_scheme` reads it


@dataclass(frozen=True)
class Fold:
    """One fold of the sheet (see the module docstring)."""

    axis: Axis
    moving: Half
    direction: Direction


@dataclass(frozen=True)
class FoldScheme:
    """A sheet that folds into one signature.

    Attributes:
        name: the JDF fold catalogue name (``F16-7``).
        columns, rows: the grid of one side.
        front: page numbers of the front's cells, row by row from the top-left.
        back: page numbers of the back's cells as the back is seen, row by row from its top-left.
        folds: the fold sequence, first fold first.
    """

    name: str
    columns: int
    rows: int
    front: tuple[int, ...]
    back: tuple[int, ...]
    folds: tuple[Fold, ...]

    @property
    def pages(self) -> int:
        """Pages of the signature (both sides)."""
        return 2 * self.columns * self.rows

    @property
    def leaves(self) -> int:
        """Leaves of the folded signature: one per cell."""
        return self.columns * self.rows

    def turned_front(self) -> tuple[bool, ...]:
        """For each front cell: its page is placed turned 180° (head toward the sheet's foot)."""
        return fold(self)[0]

    def turned_back(self) -> tuple[bool, ...]:
        """For each back cell (as the back is seen): turned 180°. A leaf's two pages turn together."""
        turned = self.turned_front()
        return tuple(turned[self.backs_onto(index)] for index in range(self.leaves))

    def depth_front(self) -> tuple[int, ...]:
        """For each front cell: how many leaves lie outside its leaf around the spine fold (0 for the
        outermost pair); creep moves a page toward the spine by this many steps."""
        return fold(self)[1]

    def depth_back(self) -> tuple[int, ...]:
        """As :meth:`depth_front`, for each back cell as the back is seen."""
        depth = self.depth_front()
        return tuple(depth[self.backs_onto(index)] for index in range(self.leaves))

    def spine_left_front(self) -> tuple[bool, ...]:
        """For each front cell: the page's spine edge is the cell's left edge on the sheet (a recto,
        odd page, has its spine on its own left; a turned page has it on the sheet's right)."""
        return tuple((page % 2 == 1) != turned for page, turned in zip(self.front, self.turned_front()))

    def spine_left_back(self) -> tuple[bool, ...]:
        """As :meth:`spine_left_front`, for each back cell as the back is seen."""
        return tuple((page % 2 == 1) != turned for page, turned in zip(self.back, self.turned_back()))

    def spine_cells(self) -> tuple[int, int]:
        """The front cells of the signature's last and first pages: the spine fold runs between them,
        on the outside of the folded signature."""
        return self.front.index(self.pages), self.front.index(1)

    def backs_onto(self, index: int) -> int:
        """The cell of the other side behind cell ``index`` (the same in both directions)."""
        row, column = divmod(index, self.columns)
        return row * self.columns + self.columns - 1 - column


@functools.lru_cache(maxsize=None)
def fold(scheme: FoldScheme) -> tuple[tuple[bool, ...], tuple[int, ...]]:
    """Fold ``scheme``'s sheet (front facing up): for each front cell, whether its page must be
    placed turned 180° so that it reads upright in the folded signature, and its leaf's depth.

    Each fold reflects the moving half across the fold line: a leaf's head direction flips along the
    fold's axis, its faces swap, and its layer goes on top (``over``) or beneath (``under``) in reverse
    order. Once folded, the leaves lie in one stack: a leaf is upright when its head points to the
    head of the stack.

    Raises:
        ValueError: a fold halves an odd number of cells, or the folded stack does not read 1…N with
            every leaf upright or turned (a scheme typed wrongly).
    """
    width, height = scheme.columns, scheme.rows
    # per cell: centre (x, y) in cell units (y up), layer, head direction along y (+1: up), face up page
    cells = []
    for index in range(scheme.leaves):
        row, column = divmod(index, scheme.columns)
        cells.append([column + 0.5, scheme.rows - row - 0.5, 0, 1,
                      scheme.front[index], scheme.back[scheme.backs_onto(index)]])
    x0 = y0 = 0.0
    layers = 1
    for step in scheme.folds:
        along = 0 if step.axis == "v" else 1
        size = width if step.axis == "v" else height
        if size % 2:
            raise ValueError(f"{scheme.name}: fold {step} halves {size} cells")
        line = (x0 if along == 0 else y0) + size / 2
        for cell in cells:
            moving = cell[along] < line if step.moving == "low" else cell[along] > line
            if moving:
                cell[along] = 2 * line - cell[along]
                if along == 1:
                    cell[3] = -cell[3]
                cell[4], cell[5] = cell[5], cell[4]
                cell[2] = (2 * layers - 1 - cell[2]) if step.direction == "over" else (layers - 1 - cell[2])
            elif step.direction == "under":
                cell[2] += layers
        if step.moving == "low":
            x0, y0 = (line, y0) if along == 0 else (x0, line)
        width, height = (width // 2, height) if along == 0 else (width, height // 2)
        layers *= 2
    reading = [page for cell in sorted(cells, key=lambda c: -c[2]) for page in (cell[4], cell[5])]
    if reading != list(range(1, scheme.pages + 1)):
        raise ValueError(f"{scheme.name}: folds into pages {reading}, not 1…{scheme.pages}")
    turned = tuple(cell[3] < 0 for cell in cells)
    depth = tuple(int(min(cell[2], layers - 1 - cell[2])) for cell in cells)  # layers are whole: int() types it
    return turned, depth


def _scheme(name: str, columns: int, front: tuple[int, ...], back: tuple[int, ...], folds: str) -> FoldScheme:
    """A scheme from its grids and its folds written ``"h+u v-u"`` (axis, ``-`` low or ``+`` high
    half moving, ``o`` over or ``u`` under)."""
    steps = tuple(Fold(_AXES[word[0]], "low" if word[1] == "-" else "high", "over" if word[2] == "o" else "under")
                  for word in folds.split())
    return FoldScheme(name, columns, len(front) // columns, front, back, steps)


#: The schemes, by name. Page positions from the JDF pagination catalogue (see the module docstring).
FOLD_SCHEMES: dict[str, FoldScheme] = {scheme.name: scheme for scheme in (
    # one fold: 2 pages a side (the folded section of saddle stitch and of nested perfect-bound sections)
    _scheme("F4-1", 2, (4, 1), (2, 3), "v-u"),
    # two right-angle folds (French fold): 4 pages a side, the head row turned
    _scheme("F8-7", 2, (5, 4, 8, 1), (3, 6, 2, 7), "h+u v-u"),
    # three right-angle folds: 8 pages a side, the head row turned so that heads meet at the cross
    # fold (a closed head, as F8-7's), the catalogue's rows 14 3 2 15 / 11 6 7 10 listed foot row first
    _scheme("F16-7", 4, (9, 8, 5, 12, 16, 1, 4, 13), (11, 6, 7, 10, 14, 3, 2, 15), "v-u h+o v-o"),
    # four right-angle folds: 16 pages a side
    _scheme("F32-5", 4, (5, 28, 29, 4, 12, 21, 20, 13, 9, 24, 17, 16, 8, 25, 32, 1),
            (3, 30, 27, 6, 14, 19, 22, 11, 15, 18, 23, 10, 2, 31, 26, 7), "h-u v-o h+o v-u"),
    # one fold, two parallel folds, one right-angle fold: 16 pages a side
    _scheme("F32-9", 4, (16, 17, 20, 13, 1, 32, 29, 4, 8, 25, 28, 5, 9, 24, 21, 12),
            (14, 19, 18, 15, 3, 30, 31, 2, 6, 27, 26, 7, 11, 22, 23, 10), "v-u h-o h-o v-u"),
)}
#: The accepted values of a layout's ``fold_scheme``.
FOLD_SCHEME_NAMES = tuple(FOLD_SCHEMES)
#: The scheme a booklet folds when its layout asks for ``signature_pages`` (or, for saddle stitch,
#: pages a sheet) and names no ``fold_scheme``: per page count, the catalogue's sheet of right-angle
#: folds (docs/design.md, "Default fold scheme per signature").
SCHEME_FOR_SIGNATURE_PAGES: dict[int, str] = {4: "F4-1", 8: "F8-7", 16: "F16-7", 32: "F32-5"}
#: The ``fold_scheme`` value that asks for nested 2-up sheets folded once (no catalogue sheet).
SECTIONS = "sections"
