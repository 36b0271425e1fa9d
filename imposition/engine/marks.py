"""Printer's marks: crop, fold, registration and collation marks, colour bars and the slug line, as
PDF content-stream operators.

Marks are drawn in the registration colour (a /Separation named /All, PDF 32000-1 §8.6.6.4: it
prints on every plate), 0.25 pt wide: the usual hairline of prepress software. Crop marks start
``offset`` outside the trim corner and never cross any page's trim or kept bleed, nor leave the
marks area (the printable area less the sheet's non-printing edges); fold marks are dashed and sit on
the fold line outside the trim, at head and foot (and, for a horizontal fold, left and right). A
fold is never marked as a cut: no crop mark runs along a fold line or a booklet page's spine edge
(folded or milled, never cut), and a fold mark is never dropped for a crop mark in its place. A mark that the printable
edge cuts short is a shortfall (:func:`shortfalls`): the planner reports it. Registration targets
(:class:`Target`, a circle and a cross) are in the registration colour too; a colour bar and the
collation marks are filled patches (:class:`Patch`): process colours in DeviceCMYK, or the
registration colour. Coordinates are sheet points.
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
#: Helvetica's font bounding box, below and above the baseline, in em (its AFM: FontBBox -225 … 931).
SLUG_DESCENT_EM, SLUG_ASCENT_EM = 0.225, 0.931
#: Helvetica's advance widths of the printable ASCII characters 32…126, in 1/1000 em (its AFM file).
_HELVETICA_WIDTHS = (
    278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278, 556, 556, 556, 556,
    556, 556, 556, 556, 556, 556, 278, 278, 584, 584, 584, 556, 1015, 667, 667, 722, 722, 667, 611, 778,
    722, 278, 500, 667, 556, 833, 722, 778, 667, 778, 722, 667, 611, 722, 667, 944, 667, 667, 611, 278,
    278, 278, 469, 556, 333, 556, 556, 500, 556, 556, 278, 556, 556, 222, 222, 500, 222, 833, 556, 556,
    556, 556, 333, 500, 278, 556, 500, 722, 500, 500, 500, 334, 260, 334, 584,
)
#: Width assumed for any other character (the widest of the table), 1/1000 em.
_WIDEST = max(_HELVETICA_WIDTHS)


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


def _free_length(mark: Mark, keep_clear: Sequence[Rect]) -> float:
    """How much of ``mark``, from its start outward, runs before it meets any area (pt; negative
    when it starts inside one)."""
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
    return free


def _clipped(mark: Mark, keep_clear: Sequence[Rect]) -> Mark | None:
    """The part of ``mark`` (drawn from its start outward) before it runs into any area, or None when
    that part is shorter than :data:`MIN_MARK_LENGTH_PT` (so a mark shortens to fit a narrow gutter)."""
    free = _free_length(mark, keep_clear)
    if free < MIN_MARK_LENGTH_PT:
        return None
    length = abs(mark.x1 - mark.x0) + abs(mark.y1 - mark.y0)
    dx, dy = (mark.x1 - mark.x0) / length, (mark.y1 - mark.y0) / length
    return Mark(mark.x0, mark.y0, mark.x0 + dx * free, mark.y0 + dy * free, mark.kind)


def kept_marks(candidates: Iterable[Mark], keep_clear: Sequence[Rect], printable: Rect) -> list[Mark]:
    """The candidates as drawn: each cut short before any area of ``keep_clear`` (trims plus kept
    bleed) and the edge of ``printable``; shorter than 1 mm dropped; duplicates of a kind drawn once."""
    kept: dict[tuple[object, ...], Mark] = {}
    outside = _outside(printable)
    for candidate in candidates:
        mark = _clipped(candidate, [*keep_clear, *outside])
        if mark is not None:
            kept.setdefault((mark.kind, *(round(v, 2) for v in (mark.x0, mark.y0, mark.x1, mark.y1))), mark)
    return list(kept.values())


#: The edge of the sheet a mark points toward.
Edge = Literal["left", "right", "head", "foot"]


def shortfalls(candidates: Iterable[Mark], keep_clear: Sequence[Rect], printable: Rect) -> dict[tuple[str, Edge], float]:
    """How much of the outer marks the printable edge cuts off: ``{(kind, edge): most missing pt}``.

    A mark that meets another page first (a mark in a gutter) is not counted: the same cut is marked
    outside the block. Only the marks pointing off the block count, and only what the edge of the
    printable area (sheet less margins and gripper) takes from them.
    """
    missing: dict[tuple[str, Edge], float] = {}
    for mark in candidates:
        length = abs(mark.x1 - mark.x0) + abs(mark.y1 - mark.y0)
        if mark.y0 == mark.y1:
            edge: Edge = "right" if mark.x1 > mark.x0 else "left"
            to_edge = printable.x1 - mark.x0 if edge == "right" else mark.x0 - printable.x0
        else:
            edge = "head" if mark.y1 > mark.y0 else "foot"
            to_edge = printable.y1 - mark.y0 if edge == "head" else mark.y0 - printable.y0
        if to_edge >= length - EPSILON_PT or _free_length(mark, keep_clear) < length - EPSILON_PT:
            continue
        key = (mark.kind, edge)
        missing[key] = max(missing.get(key, 0.0), length - to_edge)
    return missing


def _outside(printable: Rect) -> list[Rect]:
    """Four areas around the printable area, so a mark stops at its edge."""
    far = 1e6
    return [Rect(-far, -far, printable.x0, far), Rect(printable.x1, -far, far, far),
            Rect(-far, -far, far, printable.y0), Rect(-far, printable.y1, far, far)]


def crop_marks(trims: Sequence[Rect], *, length_pt: float, offset_pt: float,
               uncut_x: Sequence[float] = (), uncut_y: Sequence[float] = ()) -> list[Mark]:
    """Two whole marks at every corner of every trim: one along each trim edge's extension, pointing
    outward (candidates: :func:`kept_marks` cuts them to what the sheet and the pages leave); none
    along a line that is folded, not cut: a vertical one at an x of ``uncut_x``, a horizontal one at
    a y of ``uncut_y`` (a booklet's fold lines and its pages' spine edges)."""
    def cut(value: float, uncut: Sequence[float]) -> bool:
        return all(abs(value - line) > EPSILON_PT for line in uncut)

    candidates = []
    for trim in trims:
        for x, dx in ((trim.x0, -1), (trim.x1, 1)):
            for y, dy in ((trim.y0, -1), (trim.y1, 1)):
                if cut(y, uncut_y):
                    candidates.append(Mark(x + dx * offset_pt, y, x + dx * (offset_pt + length_pt), y, "crop"))
                if cut(x, uncut_x):
                    candidates.append(Mark(x, y + dy * offset_pt, x, y + dy * (offset_pt + length_pt), "crop"))
    return candidates


def fold_marks(folds: Sequence[tuple[float, Rect]], *, length_pt: float, offset_pt: float) -> list[Mark]:
    """Whole marks on each vertical fold line ``x`` of a spread ``trim``: above its head and below its
    foot (candidates, as :func:`crop_marks`)."""
    candidates = []
    for x, trim in folds:
        candidates.append(Mark(x, trim.y1 + offset_pt, x, trim.y1 + offset_pt + length_pt, "fold"))
        candidates.append(Mark(x, trim.y0 - offset_pt, x, trim.y0 - offset_pt - length_pt, "fold"))
    return candidates


def fold_marks_across(folds: Sequence[tuple[float, Rect]], *, length_pt: float, offset_pt: float) -> list[Mark]:
    """Whole marks on each horizontal fold line ``y`` of a block ``trim``: left and right of it."""
    candidates = []
    for y, trim in folds:
        candidates.append(Mark(trim.x1 + offset_pt, y, trim.x1 + offset_pt + length_pt, y, "fold"))
        candidates.append(Mark(trim.x0 - offset_pt, y, trim.x0 - offset_pt - length_pt, y, "fold"))
    return candidates


@dataclass(frozen=True)
class Target:
    """A registration target centred at ``(x, y)``: a cross ``size_pt`` across and a circle of
    :data:`TARGET_CIRCLE_RATIO` × ``size_pt`` diameter, stroked in the registration colour."""

    x: float
    y: float
    size_pt: float

    @property
    def bounds(self) -> Rect:
        half = self.size_pt / 2 + MARK_LINE_WIDTH_PT / 2
        return Rect(self.x - half, self.y - half, self.x + half, self.y + half)


#: A registration target's circle diameter, as a share of its cross.
TARGET_CIRCLE_RATIO = 0.6
#: Control-point distance of a quarter circle drawn as one cubic Bézier curve, times the radius.
BEZIER_CIRCLE_K = 0.5523


@dataclass(frozen=True)
class Patch:
    """A filled rectangle: ``cmyk`` tints 0…1 (DeviceCMYK), or None for the registration colour;
    ``kind`` says which mark it belongs to (the JDF Layout names them apart)."""

    rect: Rect
    cmyk: tuple[float, float, float, float] | None
    kind: Literal["colour_bar", "collation"] = "colour_bar"


#: The patches of one run of a colour bar: C, M, Y, K solid, the registration colour, C, M, Y, K 50 %.
COLOUR_BAR_PATCHES: tuple[tuple[float, float, float, float] | None, ...] = (
    (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), None,
    (0.5, 0, 0, 0), (0, 0.5, 0, 0), (0, 0, 0.5, 0), (0, 0, 0, 0.5),
)


def colour_bar(x0: float, x1: float, y0: float, height_pt: float) -> list[Patch]:
    """Square patches of ``height_pt`` from ``x0`` to at most ``x1`` at height ``y0``, cycling through
    :data:`COLOUR_BAR_PATCHES` (only whole patches)."""
    count = int((x1 - x0 + EPSILON_PT) // height_pt)
    return [Patch(Rect.from_size(x0 + i * height_pt, y0, height_pt, height_pt),
                  COLOUR_BAR_PATCHES[i % len(COLOUR_BAR_PATCHES)]) for i in range(count)]


#: The patches of one ink zone in a press's colour bar: a solid of each process ink.
INK_ZONE_PATCHES: tuple[tuple[float, float, float, float], ...] = ((1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1))


def ink_zone_bar(centre_x: float, zone_pt: float, zones: int, x0: float, x1: float, y0: float,
                 height_pt: float) -> list[Patch]:
    """A press's colour bar: the ``zones`` ink zones of ``zone_pt`` centred on ``centre_x``, each whole
    zone between ``x0`` and ``x1`` filled with :data:`INK_ZONE_PATCHES` side by side, ``height_pt`` high
    at height ``y0``; so a densitometer reads every ink in every zone the sheet covers."""
    first = centre_x - zones * zone_pt / 2
    width = zone_pt / len(INK_ZONE_PATCHES)
    patches = []
    for zone in range(zones):
        left = first + zone * zone_pt
        if left < x0 - EPSILON_PT or left + zone_pt > x1 + EPSILON_PT:
            continue
        patches += [Patch(Rect.from_size(left + i * width, y0, width, height_pt), colour)
                    for i, colour in enumerate(INK_ZONE_PATCHES)]
    return patches


def _number(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def targets_operators(targets: Sequence[Target]) -> bytes:
    """Content-stream operators stroking ``targets`` in the registration colour: each a closed circle
    of four Bézier curves (``c``) and two straight lines (``m … l``)."""
    if not targets:
        return b""
    lines = [f"q {REGISTRATION_COLOUR_SPACE} CS 1 SCN {_number(MARK_LINE_WIDTH_PT)} w 0 J [] 0 d"]
    for t in targets:
        r = t.size_pt * TARGET_CIRCLE_RATIO / 2
        k = r * BEZIER_CIRCLE_K
        x, y, n = t.x, t.y, _number
        lines.append(
            f"{n(x + r)} {n(y)} m "
            f"{n(x + r)} {n(y + k)} {n(x + k)} {n(y + r)} {n(x)} {n(y + r)} c "
            f"{n(x - k)} {n(y + r)} {n(x - r)} {n(y + k)} {n(x - r)} {n(y)} c "
            f"{n(x - r)} {n(y - k)} {n(x - k)} {n(y - r)} {n(x)} {n(y - r)} c "
            f"{n(x + k)} {n(y - r)} {n(x + r)} {n(y - k)} {n(x + r)} {n(y)} c h S"
        )
        half = t.size_pt / 2
        lines.append(f"{n(x - half)} {n(y)} m {n(x + half)} {n(y)} l {n(x)} {n(y - half)} m {n(x)} {n(y + half)} l S")
    lines.append("Q")
    return ("\n".join(lines) + "\n").encode("ascii")


def patches_operators(patches: Sequence[Patch]) -> bytes:
    """Content-stream operators filling ``patches`` (``k`` for DeviceCMYK, the registration colour by
    its colour space)."""
    if not patches:
        return b""
    lines = ["q"]
    for p in patches:
        colour = (f"{REGISTRATION_COLOUR_SPACE} cs 1 scn" if p.cmyk is None
                  else " ".join(_number(v) for v in p.cmyk) + " k")
        r = p.rect
        lines.append(f"{colour} {_number(r.x0)} {_number(r.y0)} {_number(r.width)} {_number(r.height)} re f")
    lines.append("Q")
    return ("\n".join(lines) + "\n").encode("ascii")


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
    """The slug line: ``job <id> | tenant <id> | sheet n of m | <side> | <date>`` (no date part when
    ``slug.date`` is None)."""
    date = f" | {slug.date}" if slug.date else ""
    return f"job {slug.job_id} | tenant {slug.tenant_id} | sheet {sheet_number} of {sheet_count} | {side}{date}"


def slug_width_pt(text: str, size_pt: float) -> float:
    """The advance width of ``text`` in Helvetica at ``size_pt`` (pt), as :func:`slug_operators` draws it."""
    return sum(_HELVETICA_WIDTHS[ord(c) - 32] if 32 <= ord(c) < 127 else _WIDEST for c in text) * size_pt / 1000


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
