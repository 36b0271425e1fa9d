"""Reading plate files back: labels with positions and direction (pdfminer.six), pixels (pdfium).

Every test page shows a big ``P<n>`` in its centre and a small ``bottom-left <n>`` near its
bottom-left corner; :func:`labels` finds both on each output page with where they sit and which
way they read, so a test can tell which page landed in which cell and which way up.
"""

from __future__ import annotations

import math
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
            x0 = min(c.x0 for c in run); x1 = max(c.x1 for c in run)
            y0 = min(c.y0 for c in run); y1 = max(c.y1 for c in run)
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
