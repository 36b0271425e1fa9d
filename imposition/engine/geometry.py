"""Geometry of pages and sheets: rectangles, page boxes, the transform from a page to its cell.

Every length is in PDF points (1/72 in). Rectangles are ``(x0, y0, x1, y1)`` with the origin at the
lower-left and y upward, as in PDF default user space (PDF 32000-1 §8.3.2.3). Matrices are
:class:`pikepdf.Matrix` ``(a, b, c, d, e, f)``; ``m1 @ m2`` applies ``m1`` first, then ``m2``.

A page's *display space* is the page as a viewer shows it: UserUnit applied (PDF 32000-1 §14.11.2,
Table 30: one default user space unit is ``UserUnit / 72`` inch) and /Rotate applied (the page turned
clockwise by that many degrees, Table 30), translated so that its TrimBox occupies
``[0, 0, width, height]``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from pikepdf import Matrix

from .sheets import EPSILON_PT


@dataclass(frozen=True)
class Rect:
    """An axis-aligned rectangle in PDF points, ``x0 ≤ x1``, ``y0 ≤ y1``."""

    x0: float
    y0: float
    x1: float
    y1: float

    @classmethod
    def from_box(cls, box: Sequence[float]) -> "Rect":
        """A rectangle from a PDF box array ``[llx lly urx ury]`` (any two opposite corners)."""
        ax, ay, bx, by = (float(v) for v in box)
        return cls(min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))

    @classmethod
    def from_size(cls, x0: float, y0: float, width: float, height: float) -> "Rect":
        """A rectangle from its lower-left corner and its size."""
        return cls(x0, y0, x0 + width, y0 + height)

    @property
    def width(self) -> float:
        return self.x1 - self.x0

    @property
    def height(self) -> float:
        return self.y1 - self.y0

    @property
    def centre(self) -> tuple[float, float]:
        return (self.x0 + self.x1) / 2, (self.y0 + self.y1) / 2

    def intersect(self, other: "Rect") -> "Rect":
        """The overlap of two rectangles (degenerate, never inverted, when they do not overlap)."""
        x0, y0 = max(self.x0, other.x0), max(self.y0, other.y0)
        return Rect(x0, y0, max(x0, min(self.x1, other.x1)), max(y0, min(self.y1, other.y1)))

    def expanded(self, left: float, bottom: float, right: float, top: float) -> "Rect":
        """This rectangle grown outward by the given distance on each edge (pt)."""
        return Rect(self.x0 - left, self.y0 - bottom, self.x1 + right, self.y1 + top)

    def overlaps(self, other: "Rect") -> bool:
        """True when the interiors overlap (touching edges do not count)."""
        return (
            self.x0 < other.x1 - EPSILON_PT
            and other.x0 < self.x1 - EPSILON_PT
            and self.y0 < other.y1 - EPSILON_PT
            and other.y0 < self.y1 - EPSILON_PT
        )

    def transformed(self, matrix: Matrix) -> "Rect":
        """The bounding rectangle of this rectangle's corners mapped through ``matrix``."""
        points = [matrix.transform(p) for p in ((self.x0, self.y0), (self.x0, self.y1),
                                                (self.x1, self.y0), (self.x1, self.y1))]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        return Rect(min(xs), min(ys), max(xs), max(ys))


@dataclass(frozen=True)
class PageBoxes:
    """What the planner needs to know of a source page, in the page's default user space.

    Attributes:
        crop: the visible region: CropBox ∩ MediaBox (PDF 32000-1 §14.11.2).
        trim: TrimBox ∩ crop (TrimBox defaults to the CropBox).
        bleed: BleedBox ∩ crop (BleedBox defaults to the CropBox).
        rotate_degrees_cw: /Rotate normalised to 0, 90, 180 or 270 (−90 ≡ 270).
        user_unit: /UserUnit, the size of one unit in points (default 1.0).
    """

    crop: Rect
    trim: Rect
    bleed: Rect
    rotate_degrees_cw: int = 0
    user_unit: float = 1.0


def normalise_rotate(rotate: float) -> int:
    """A /Rotate value as 0, 90, 180 or 270 degrees clockwise.

    Negative values count counter-clockwise (−90 ≡ 270). A value that is not a multiple of 90 is
    invalid (PDF 32000-1 Table 30) and is ignored (0), as pdf.js and pdfium do.
    """
    value = int(rotate)
    if value != rotate or value % 90:
        return 0
    return value % 360


@functools.lru_cache(maxsize=1024)  # pages of one document mostly share their boxes
def display_matrix(boxes: PageBoxes) -> Matrix:
    """The transform from default user space to display space (UserUnit and /Rotate applied, trim at
    the origin)."""
    turned = Matrix().scaled(boxes.user_unit, boxes.user_unit) @ Matrix().rotated(-boxes.rotate_degrees_cw)
    trim = boxes.trim.transformed(turned)
    return turned @ Matrix().translated(-trim.x0, -trim.y0)


@functools.lru_cache(maxsize=1024)
def displayed_size(boxes: PageBoxes) -> tuple[float, float]:
    """``(width_pt, height_pt)`` of the trimmed page as a viewer shows it (physical points)."""
    trim = boxes.trim.transformed(display_matrix(boxes))
    return trim.width, trim.height


@functools.lru_cache(maxsize=1024)
def available_bleed(boxes: PageBoxes) -> tuple[float, float, float, float]:
    """Bleed the page has beyond its trim on each displayed edge: ``(left, bottom, right, top)`` in pt."""
    matrix = display_matrix(boxes)
    trim, bleed = boxes.trim.transformed(matrix), boxes.bleed.transformed(matrix)
    return (
        max(0.0, trim.x0 - bleed.x0),
        max(0.0, trim.y0 - bleed.y0),
        max(0.0, bleed.x1 - trim.x1),
        max(0.0, bleed.y1 - trim.y1),
    )


def fit_scale(size: tuple[float, float], cell: tuple[float, float]) -> float:
    """Scale that shrinks ``size`` into ``cell`` without distortion, never above 1 (shrink only)."""
    width, height = size
    scale = min(1.0, cell[0] / width, cell[1] / height)
    return 1.0 if scale > 1.0 - EPSILON_PT / max(width, height) else scale


def placement_matrix(boxes: PageBoxes, scale: float, origin: tuple[float, float], *, upside_down: bool) -> Matrix:
    """The transform from the page's default user space to the sheet.

    The page's displayed trim, scaled by ``scale``, lands with its lower-left corner at ``origin``
    (pt on the sheet); ``upside_down`` turns it 180° in place (head to foot, work and tumble).
    """
    width, height = displayed_size(boxes)
    matrix = display_matrix(boxes) @ Matrix().scaled(scale, scale)
    if upside_down:
        matrix = matrix @ Matrix().rotated(180) @ Matrix().translated(width * scale, height * scale)
    return matrix @ Matrix().translated(*origin)
