"""Synthetic documents with text and images, for the benchmark and the demo samples.

Every page carries a big ``P<n>`` label at its centre, a small ``bottom-left <n>`` near its
bottom-left corner and, optionally, its own 96 × 96 RGB image (so each page has distinct image data),
plus a /PageLabels entry ``P1, P2, ...`` (PDF 32000-1 §12.4.2).
"""

from __future__ import annotations

from pathlib import Path

import pikepdf
from pikepdf import Array, Dictionary, Name

MM = 72 / 25.4
A5_PT = (148 * MM, 210 * MM)
IMAGE_SIDE_PX = 96


def _image(pdf: pikepdf.Pdf, number: int) -> pikepdf.Stream:
    side = IMAGE_SIDE_PX
    red, green = (number * 37) % 256, (number * 91) % 256
    pixels = b"".join(b"".join(bytes((red, (green + y) % 256, (x * 255) // side)) for x in range(side)) for y in range(side))
    return pdf.make_stream(pixels, Type=Name.XObject, Subtype=Name.Image, Width=side, Height=side,
                           ColorSpace=Name.DeviceRGB, BitsPerComponent=8)


def labelled_document(path: Path, page_count: int, *, size_pt: tuple[float, float] = A5_PT, images: bool = True) -> Path:
    """Write a ``page_count``-page document of labelled pages of ``size_pt`` to ``path``."""
    width, height = size_pt
    with pikepdf.new() as pdf:
        font = pdf.make_indirect(Dictionary(Type=Name.Font, Subtype=Name.Type1, BaseFont=Name.Helvetica))
        for number in range(1, page_count + 1):
            label = f"P{number}"
            content = (
                f"BT /F1 40 Tf {width / 2 - 11 * len(label):.2f} {height / 2:.2f} Td ({label}) Tj ET\n"
                f"BT /F1 9 Tf 12 12 Td (bottom-left {number}) Tj ET\n"
                f"0.5 w 6 6 {width - 12:.2f} {height - 12:.2f} re S\n"
            )
            resources = Dictionary(Font=Dictionary(F1=font))
            if images:
                content += f"q 120 0 0 120 {width / 2 - 60:.2f} {height / 2 + 60:.2f} cm /Im0 Do Q\n"
                resources.XObject = Dictionary(Im0=_image(pdf, number))
            page = Dictionary(Type=Name.Page, MediaBox=Array([0, 0, width, height]),
                              Contents=pdf.make_stream(content.encode()), Resources=resources)
            pdf.pages.append(pikepdf.Page(page))
        pdf.Root.PageLabels = Dictionary(Nums=Array([0, Dictionary(S=Name.D, P=pikepdf.String("P"))]))
        pdf.save(path)
    return path
