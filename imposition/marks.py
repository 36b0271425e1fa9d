"""Printer's marks: crop marks, fold marks and the slug line, as PDF content-stream operators.

Marks are drawn in the registration colour (a /Separation named /All, PDF 32000-1 §8.6.6.4: it
prints on every plate), 0.25 pt wide: the usual hairline of prepress software. Crop marks start
``offset`` outside the trim corner and never cross any page's trim or kept bleed; fold marks are
dashed and sit on the fold line outside the trim, at head and foot. Coordinates are sheet points.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from .geometry import EPSILON_PT, Rect
from .job import SlugInfo  # defined with the other plain job data; importable from here as before

#: Resource name of the registration colour space on every plate.
REGISTRATION_COLOUR_SPACE = "/Registration"
#: Resource name of the slug line's font (Helvetica, one of the standard 14 fonts, PDF 32000-1 §9.6.2.2).
SLUG_FONT = "/SlugFont"
#: Slug line text size, pt.
SLUG_FONT_SIZE_PT = 6.0
#: Shortest mark worth drawing (1 mm), pt.
MIN_MARK_LENGTH_PT = 72 / 25.4
#: Width of every mark, pt.
MARK_LINE_WIDTH_PT = 0.25


@dataclass(frozen=True)
class Mark:
    """A horizontal or vertical mark from ``(x0, y0)`` to ``(x1, y1)`` on the sheet (pt)."""

    x0: float
    y0: float
    x1: float
    y1: float
    kind: Literal["crop", "fold"]

    def crosses(self, area: Rect) -> bool:
        """True when the mark runs into ``area`` or along its edge; ending where it begins does not count."""
        if self.y0 == self.y1:  # horizontal: within the area's height, overlapping its width
            return (area.y0 - EPSILON_PT <= self.y0 <= area.y1 + EPSILON_PT
                    and min(self.x0, self.x1) < area.x1 - EPSILON_PT and max(self.x0, self.x1) > area.x0 + EPSILON_PT)
        return (area.x0 - EPSILON_PT <= self.x0 <= area.x1 + EPSILON_PT
                and min(self.y0, self.y1) < area.y1 - EPSILON_PT and max(self.y0, self.y1) > area.y0 + EPSILON_PT)


def _clipped(mark: Mark, keep_clear: Sequence[Rect]) -> Mark | None:
    """The part of ``mark`` (drawn from its start outward) before it runs into any area, or None when
    that part is shorter than :data:`MIN_MARK_LENGTH_PT` (so a mark shortens to fit a narrow gutter)."""
    length = abs(mark.x1 - mark.x0) + abs(mark.y1 - mark.y0)
    dx, dy = (mark.x1 - mark.x0) / length, (mark.y1 - mark.y0) / length
    free = length
    for area in keep_clear:
        if not mark.crosses(area):
            continue
        if dx:  # horizontal: distance to the area's near edge
            entry = (area.x0 - mark.x0) / dx if dx > 0 else (area.x1 - mark.x0) / dx
        else:
            entry = (area.y0 - mark.y0) / dy if dy > 0 else (area.y1 - mark.y0) / dy
        free = min(free, entry)
    if free < MIN_MARK_LENGTH_PT:
        return None
    return Mark(mark.x0, mark.y0, mark.x0 + dx * free, mark.y0 + dy * free, mark.kind)


def _kept(candidates: Iterable[Mark], keep_clear: Sequence[Rect], sheet: Rect) -> list[Mark]:
    kept: dict[tuple[float, ...], Mark] = {}
    for candidate in candidates:
        mark = _clipped(candidate, [*keep_clear, *_outside(sheet)])
        if mark is not None:
            kept.setdefault(tuple(round(v, 2) for v in (mark.x0, mark.y0, mark.x1, mark.y1)), mark)
    return list(kept.values())


def _outside(sheet: Rect) -> list[Rect]:
    """Four areas around the sheet, so a mark stops at the sheet's edge."""
    far = 1e6
    return [Rect(-far, -far, sheet.x0, far), Rect(sheet.x1, -far, far, far),
            Rect(-far, -far, far, sheet.y0), Rect(-far, sheet.y1, far, far)]


def crop_marks(
    trims: Sequence[Rect], keep_clear: Sequence[Rect], sheet: Rect, *, length_pt: float, offset_pt: float
) -> list[Mark]:
    """Two marks at every corner of every trim: one along each trim edge's extension, pointing outward.

    A mark stops short of any page's printed area (``keep_clear``: trims plus kept bleed) and of the
    sheet's edge, so marks never print over a neighbouring page; one left shorter than 1 mm is dropped.
    """
    candidates = []
    for trim in trims:
        for x, dx in ((trim.x0, -1), (trim.x1, 1)):
            for y, dy in ((trim.y0, -1), (trim.y1, 1)):
                candidates.append(Mark(x + dx * offset_pt, y, x + dx * (offset_pt + length_pt), y, "crop"))
                candidates.append(Mark(x, y + dy * offset_pt, x, y + dy * (offset_pt + length_pt), "crop"))
    return _kept(candidates, keep_clear, sheet)


def fold_marks(
    folds: Sequence[tuple[float, Rect]], keep_clear: Sequence[Rect], sheet: Rect, *, length_pt: float, offset_pt: float
) -> list[Mark]:
    """Marks on each vertical fold line ``x`` of a spread ``trim``: above its head and below its foot."""
    candidates = []
    for x, trim in folds:
        candidates.append(Mark(x, trim.y1 + offset_pt, x, trim.y1 + offset_pt + length_pt, "fold"))
        candidates.append(Mark(x, trim.y0 - offset_pt, x, trim.y0 - offset_pt - length_pt, "fold"))
    return _kept(candidates, keep_clear, sheet)


def _number(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def marks_operators(marks: Sequence[Mark]) -> bytes:
    """Content-stream operators drawing ``marks`` (crop marks solid, fold marks dashed)."""
    if not marks:
        return b""
    lines = [f"q {REGISTRATION_COLOUR_SPACE} CS 1 SCN {_number(MARK_LINE_WIDTH_PT)} w 0 J"]
    for kind, dash in (("crop", "[] 0 d"), ("fold", "[3 2] 0 d")):
        segments = [m for m in marks if m.kind == kind]
        if segments:
            lines.append(dash)
            lines.extend(f"{_number(m.x0)} {_number(m.y0)} m {_number(m.x1)} {_number(m.y1)} l" for m in segments)
            lines.append("S")
    lines.append("Q")
    return ("\n".join(lines) + "\n").encode("ascii")


def slug_text(slug: SlugInfo, sheet_number: int, sheet_count: int, side: str) -> str:
    """The slug line: ``job <id> | tenant <id> | sheet n of m | <side>``."""
    return f"job {slug.job_id} | tenant {slug.tenant_id} | sheet {sheet_number} of {sheet_count} | {side}"


def _pdf_literal(text: str) -> bytes:
    """A PDF literal string (PDF 32000-1 §7.3.4.2) in WinAnsiEncoding; unmappable characters become '?'."""
    raw = text.encode("cp1252", errors="replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def slug_operators(text: str, x_pt: float, y_pt: float) -> bytes:
    """Content-stream operators writing ``text`` at ``(x_pt, y_pt)`` (baseline start) in registration colour."""
    return (
        f"q {REGISTRATION_COLOUR_SPACE} cs 1 scn BT {SLUG_FONT} {_number(SLUG_FONT_SIZE_PT)} Tf "
        f"{_number(x_pt)} {_number(y_pt)} Td ".encode("ascii")
        + _pdf_literal(text)
        + b" Tj ET Q\n"
    )
