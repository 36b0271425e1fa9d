"""Synthetic test PDFs: every page labelled like the handed cases.

A big ``P<n>`` at the centre of the page's visible region and a small ``bottom-left <n>`` near its
bottom-left corner, in Helvetica.
"""

from __future__ import annotations

from pathlib import Path

import pikepdf
from pikepdf import Array, Dictionary, Name

MM = 72 / 25.4
A5_PT = (148 * MM, 210 * MM)


def label_content(number: int, box: tuple[float, float, float, float]) -> bytes:
    """Operators that draw the two labels of page ``number`` inside ``box`` (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box
    big = f"P{number}"
    return (
        f"BT /F1 40 Tf {(x0 + x1) / 2 - 11 * len(big):.2f} {(y0 + y1) / 2:.2f} Td ({big}) Tj ET\n"
        f"BT /F1 9 Tf {x0 + 12:.2f} {y0 + 12:.2f} Td (bottom-left {number}) Tj ET\n"
    ).encode()


def helvetica(pdf: pikepdf.Pdf) -> pikepdf.Object:
    return pdf.make_indirect(Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica))


def add_page(
    pdf: pikepdf.Pdf, number: int, size: tuple[float, float] = A5_PT, *, content: bytes | None = None,
    label_box: tuple[float, float, float, float] | None = None, resources: Dictionary | None = None, **attrs,
) -> pikepdf.Page:
    """Append a labelled page; ``attrs`` become page dictionary entries (``Rotate=90``, ``CropBox=[...]``)."""
    width, height = size
    box = label_box or tuple(float(v) for v in attrs.get("CropBox", (0, 0, width, height)))
    data = label_content(number, box) if content is None else content
    page = pikepdf.Dictionary(
        Type=Name.Page,
        MediaBox=Array([0, 0, width, height]),
        Contents=pdf.make_stream(data),
        Resources=resources if resources is not None else Dictionary(Font=Dictionary(F1=helvetica(pdf))),
    )
    for key, value in attrs.items():
        page[f"/{key}"] = value
    pdf.pages.append(pikepdf.Page(page))
    return pdf.pages[-1]


def labelled_pdf(path: Path, page_count: int, size: tuple[float, float] = A5_PT) -> Path:
    """A plain document of ``page_count`` labelled pages of ``size`` pt (A5 by default)."""
    with pikepdf.new() as pdf:
        font = helvetica(pdf)
        for number in range(1, page_count + 1):
            add_page(pdf, number, size, resources=Dictionary(Font=Dictionary(F1=font)))
        pdf.save(path)
    return path
