"""Reading plate files back: labels with positions and direction (pdfminer.six), pixels (pdfium).

Every test page shows a big ``P<n>`` in its centre and a small ``bottom-left <n>`` near its
bottom-left corner; :func:`labels` finds both on each output page with where they sit and which
way they read, so a test can tell which page landed in which cell and which way up.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pikepdf
import pypdfium2
from pdfminer.high_level import extract_pages
from pdfminer.layout import LTChar, LTContainer, LTCurve

MM = 72 / 25.4


@dataclass(frozen=True)
class Label:
    """A run of text on a plate: its text, centre and bounding box (pt), reading direction (degrees ccw)."""

    text: str
    x: float
    y: float
    angle_degrees_ccw: int
    bbox: tuple[float, float, float, float]


def _chars(item):
    if isinstance(item, LTChar):
        yield item
    elif isinstance(item, LTContainer):
        for child in item:
            yield from _chars(child)


def _group(chars: list[LTChar]) -> list[Label]:
    labels, run = [], []

    def flush():
        if run:
            a, b = run[0].matrix[0], run[0].matrix[1]
            angle = round(math.degrees(math.atan2(b, a))) % 360
            x0, x1 = min(c.x0 for c in run), max(c.x1 for c in run)
            y0, y1 = min(c.y0 for c in run), max(c.y1 for c in run)
            text = "".join(c.get_text() for c in run).strip()
            labels.append(Label(text, (x0 + x1) / 2, (y0 + y1) / 2, angle, (x0, y0, x1, y1)))
            run.clear()

    for char in chars:
        if run:
            previous = run[-1]
            gap = math.dist(previous.matrix[4:6], char.matrix[4:6])
            if gap > 1.5 * max(previous.size, char.size) or previous.matrix[:4] != char.matrix[:4]:
                flush()
        run.append(char)
    flush()
    return labels


def labels(pdf_path: Path) -> list[list[Label]]:
    """The labels on every page of ``pdf_path``, in drawing order."""
    return [_group(list(_chars(page))) for page in extract_pages(str(pdf_path))]


def big_labels(pdf_path: Path) -> list[list[Label]]:
    """Only the ``P<n>`` labels of every page."""
    return [[label for label in page if label.text.startswith("P")] for page in labels(pdf_path)]


def lines(pdf_path: Path, page_index: int) -> list[tuple[float, float, float, float]]:
    """Straight path segments drawn directly on a plate (crop and fold marks): ``(x0, y0, x1, y1)``."""
    page = list(extract_pages(str(pdf_path), page_numbers=[page_index]))[0]
    return [
        (item.pts[0][0], item.pts[0][1], item.pts[-1][0], item.pts[-1][1])
        for item in page
        if isinstance(item, LTCurve) and len(item.pts) == 2
    ]


def page_sizes_mm(pdf_path: Path) -> list[tuple[float, float]]:
    """``(width_mm, height_mm)`` of every page's MediaBox."""
    with pikepdf.open(pdf_path) as pdf:
        return [(float(p.mediabox[2] - p.mediabox[0]) / MM, float(p.mediabox[3] - p.mediabox[1]) / MM) for p in pdf.pages]


class Raster:
    """A plate rendered by pdfium, addressed in PDF points (origin lower-left)."""

    def __init__(self, pdf_path: Path, page_index: int = 0, dots_per_pt: float = 1.0) -> None:
        document = pypdfium2.PdfDocument(str(pdf_path))
        page = document[page_index]
        self.height_pt = page.get_height()
        self.scale = dots_per_pt
        self.image = page.render(scale=dots_per_pt).to_pil().convert("RGB")
        document.close()

    def rgb(self, x_pt: float, y_pt: float) -> tuple[int, int, int]:
        """The colour at ``(x_pt, y_pt)``."""
        return self.image.getpixel((int(x_pt * self.scale), int((self.height_pt - y_pt) * self.scale)))

    def ink(self, x0: float, y0: float, x1: float, y1: float) -> int:
        """How many pixels in the rectangle are not white."""
        box = (int(x0 * self.scale), int((self.height_pt - y1) * self.scale),
               int(x1 * self.scale), int((self.height_pt - y0) * self.scale))
        return sum(1 for pixel in self.image.crop(box).get_flattened_data() if min(pixel) < 200)


@dataclass(frozen=True)
class Placed:
    """A source page drawn on a plate, read from the plate's own operators: the form's ``P<n>`` label,
    where the source page's TrimBox lands (through the ``cm`` in force at its ``Do``), the clip
    rectangle (``re W n``) around it, the placement's scale and that ``cm`` matrix ``(a, b, c, d, e, f)``
    (the page's own space → the plate); rectangles ``(x0, y0, x1, y1)`` pt."""

    label: str
    trim: tuple[float, float, float, float]
    clip: tuple[float, float, float, float] | None
    scale: float
    matrix: tuple[float, float, float, float, float, float] = (1, 0, 0, 1, 0, 0)


def _bounds(points):
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs), max(ys)


def _label_of(data: bytes) -> str | None:
    match = re.search(rb"\((P\d+)\) Tj", data)
    return match.group(1).decode() if match else None


def placements(plate_path: Path, source_path: Path) -> list[list[Placed]]:
    """Every placed page on every plate of ``plate_path`` (pages labelled as in the handed cases)."""
    with pikepdf.open(source_path) as source:
        trims = {_label_of(page.obj.Contents.read_bytes()): [float(v) for v in page.trimbox] for page in source.pages}
    result = []
    with pikepdf.open(plate_path) as plate:
        for page in plate.pages:
            placed, stack, ctm, clip, pending_rect = [], [], pikepdf.Matrix(), None, None
            for operands, operator in pikepdf.parse_content_stream(page):
                op = str(operator)
                if op == "q":
                    stack.append((ctm, clip))
                elif op == "Q":
                    ctm, clip = stack.pop()
                elif op == "cm":
                    ctm = pikepdf.Matrix(*[float(v) for v in operands]) @ ctm
                elif op == "re":
                    x, y, w, h = (float(v) for v in operands)
                    pending_rect = _bounds([ctm.transform(p) for p in ((x, y), (x + w, y + h), (x, y + h), (x + w, y))])
                elif op == "W":
                    clip = pending_rect
                elif op == "Do":
                    form = page.obj.Resources.XObject[str(operands[0])]
                    label = _label_of(form.read_bytes())
                    x0, y0, x1, y1 = trims[label]
                    corners = [ctm.transform(p) for p in ((x0, y0), (x1, y0), (x0, y1), (x1, y1))]
                    placed.append(Placed(label, _bounds(corners), clip, math.hypot(ctm.a, ctm.b), ctm.shorthand))
            result.append(placed)
    return result


@dataclass(frozen=True)
class Segment:
    """A straight stroke drawn on the plate itself (a mark): ends in pt, dashed or solid."""

    x0: float
    y0: float
    x1: float
    y1: float
    dashed: bool


def segments(plate_path: Path, page_index: int) -> list[Segment]:
    """The ``m … l … S`` strokes of a plate's own content stream, with the dash pattern in force."""
    found, path, dashed, stack = [], [], False, []
    with pikepdf.open(plate_path) as plate:
        for operands, operator in pikepdf.parse_content_stream(plate.pages[page_index]):
            op = str(operator)
            if op == "q":
                stack.append(dashed)
            elif op == "Q":
                dashed = stack.pop()
            elif op == "d":
                dashed = len(operands[0]) > 0
            elif op in ("m", "l"):
                path.append((float(operands[0]), float(operands[1]), op))
            elif op == "S":
                for (xa, ya, _), (xb, yb, op_b) in zip(path, path[1:]):
                    if op_b == "l":
                        found.append(Segment(xa, ya, xb, yb, dashed))
                path = []
    return found


@dataclass(frozen=True)
class Fill:
    """A rectangle filled on the plate itself (``re … f``): its box (pt) and its colour, ``All`` for
    the registration colour (a /Separation named /All) or the DeviceCMYK tints."""

    rect: tuple[float, float, float, float]
    colour: str | tuple[float, float, float, float]


def _separation_names(page) -> dict[str, str]:
    """Colour space resource name → separation name, for the /Separation spaces of a plate."""
    spaces = page.obj.Resources.get("/ColorSpace", {})
    return {str(key): str(space[1])[1:] for key, space in spaces.items()
            if isinstance(space, pikepdf.Array) and space[0] == pikepdf.Name.Separation}


def _walk(page, **state):
    """Each operator of a plate's content as ``(operands, operator, state)``: ``state`` (starting as
    the keyword arguments) is the caller's to change, saved by ``q`` and restored by ``Q``."""
    saved = []
    for operands, operator in pikepdf.parse_content_stream(page):
        op = str(operator)
        if op == "q":
            saved.append(dict(state))
        elif op == "Q":
            state.clear()
            state.update(saved.pop())
        yield operands, op, state


def fills(plate_path: Path, page_index: int) -> list[Fill]:
    """The filled rectangles drawn directly on a plate (colour bar patches, collation marks)."""
    found, pending = [], []
    with pikepdf.open(plate_path) as plate:
        page = plate.pages[page_index]
        names = _separation_names(page)
        for operands, op, state in _walk(page, colour=None, space=None):
            if op == "cs":
                state["space"] = names.get(str(operands[0]))
            elif op == "scn" and state["space"] is not None:
                state["colour"] = state["space"]
            elif op == "k":
                state["colour"], state["space"] = tuple(float(v) for v in operands), None
            elif op == "re":
                x, y, w, h = (float(v) for v in operands)
                pending.append((x, y, x + w, y + h))
            elif op in ("f", "F", "f*"):
                found.extend(Fill(rect, state["colour"]) for rect in pending)
                pending = []
            elif op in ("n", "S", "B"):
                pending = []
    return found


@dataclass(frozen=True)
class Circle:
    """A closed path of four Bézier curves stroked on the plate (a registration target's circle),
    with its centre, radius (pt) and the separation its stroke colour names."""

    x: float
    y: float
    radius: float
    colour: str | None


def circles(plate_path: Path, page_index: int) -> list[Circle]:
    """The stroked circles (``m`` then four ``c``, ``h S``) drawn directly on a plate."""
    found, points, curves = [], [], 0
    with pikepdf.open(plate_path) as plate:
        page = plate.pages[page_index]
        names = _separation_names(page)
        for operands, op, state in _walk(page, colour=None):
            if op == "CS":
                state["colour"] = names.get(str(operands[0]))
            elif op == "m":
                points, curves = [(float(operands[0]), float(operands[1]))], 0
            elif op == "c":
                points.append((float(operands[4]), float(operands[5])))
                curves += 1
            elif op == "S" and curves == 4:
                xs, ys = [p[0] for p in points], [p[1] for p in points]
                found.append(Circle((max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2, (max(xs) - min(xs)) / 2,
                                    state["colour"]))
                curves = 0
    return found


def marks_extent(plate_path: Path, page_index: int) -> tuple[float, float, float, float] | None:
    """The bounding box ``(x0, y0, x1, y1)`` pt of everything a plate draws itself: strokes (crop,
    fold marks, the targets' crosses), circles, filled patches (colour bar, collation marks) and the
    slug line's text; None when it draws none."""
    points = []
    for s in segments(plate_path, page_index):
        points += [(s.x0, s.y0), (s.x1, s.y1)]
    for f in fills(plate_path, page_index):
        points += [f.rect[:2], f.rect[2:]]
    for c in circles(plate_path, page_index):
        points += [(c.x - c.radius, c.y - c.radius), (c.x + c.radius, c.y + c.radius)]
    for label in labels(plate_path)[page_index]:
        if label.text.startswith("job "):
            points += [label.bbox[:2], label.bbox[2:]]
    if not points:
        return None
    return (min(p[0] for p in points), min(p[1] for p in points), max(p[0] for p in points),
            max(p[1] for p in points))
