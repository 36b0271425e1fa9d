"""The PDF features a print shop's files use, on synthetic PDFs, read back as text and as pixels."""

from __future__ import annotations

import io
import time

import pikepdf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pikepdf import Array, Dictionary, Name

from .imposition_pdfs import A5_PT, add_page, helvetica, label_content, labelled_pdf
from imposition.engine import SlugInfo, parse_layout
from imposition.common.settings import Settings
from imposition.engine.errors import BindingLimitExceeded, DamagedPdf
from .imposition_readback import MM, Raster, big_labels, labels

ONE_UP_A4 = {"layout": "n_up", "sheet": "A4", "orientation": "portrait", "columns": 1, "rows": 1}
TWO_UP_A4 = {"layout": "n_up", "sheet": "A4", "orientation": "landscape", "columns": 2, "rows": 1, "scaling": "fit"}


def build(path, pages):
    """Save a PDF whose pages are made by ``pages(pdf)``."""
    with pikepdf.new() as pdf:
        pages(pdf)
        pdf.save(path)
    return path


def run(engine, source, layout, tmp_path):
    output = tmp_path / "plate.pdf"
    engine.impose(source, parse_layout(layout), output)
    return output


def red(pixel):
    return pixel[0] > 200 and pixel[1] < 80 and pixel[2] < 80


def blue(pixel):
    return pixel[2] > 200 and pixel[0] < 80 and pixel[1] < 80


def count(raster, x0, y0, x1, y1, test):
    box = (int(x0 * raster.scale), int((raster.height_pt - y1) * raster.scale),
           int(x1 * raster.scale), int((raster.height_pt - y0) * raster.scale))
    return sum(1 for pixel in raster.image.crop(box).get_flattened_data() if test(pixel))


def test_negative_rotate_is_the_same_as_270(engine, tmp_path):
    def pages(pdf):
        add_page(pdf, 1, Rotate=-90)
        add_page(pdf, 2, Rotate=270)

    output = run(engine, build(tmp_path / "in.pdf", pages), TWO_UP_A4, tmp_path)
    first, second = big_labels(output)[0]
    assert first.angle_degrees_ccw == second.angle_degrees_ccw == 90  # turned 270° clockwise = 90° ccw
    half = 297 * MM / 2
    assert first.x == pytest.approx(second.x - half, abs=0.5) and first.y == pytest.approx(second.y, abs=0.5)


def test_only_the_cropbox_shows_positioned_by_its_own_origin(engine, tmp_path):
    crop = (100.0, 150.0, 100.0 + A5_PT[0], 150.0 + A5_PT[1])
    outside = b"1 0 0 rg 0 0 90 900 re f 0 0 900 140 re f 0 g\n"  # red, all outside the CropBox

    def pages(pdf):
        add_page(pdf, 1, (800.0, 900.0), content=outside + label_content(1, crop), CropBox=Array(crop))

    output = run(engine, build(tmp_path / "in.pdf", pages), {**ONE_UP_A4, "sheet": "A5"}, tmp_path)
    raster = Raster(output)
    assert count(raster, 0, 0, A5_PT[0], A5_PT[1], red) == 0
    (label,) = [l for l in labels(output)[0] if l.text == "bottom-left 1"]
    assert label.bbox[0] == pytest.approx(12, abs=1) and label.bbox[1] == pytest.approx(12, abs=3)


def test_user_unit_gives_the_physical_size(engine, tmp_path):
    def pages(pdf):
        add_page(pdf, 1, (A5_PT[0] / 2, A5_PT[1] / 2), UserUnit=2)

    source = build(tmp_path / "in.pdf", pages)
    output = run(engine, source, {**ONE_UP_A4, "sheet": "A5", "scaling": "none"}, tmp_path)
    (source_label,), (placed,) = big_labels(source)[0], big_labels(output)[0]
    def width(label):
        return label.bbox[2] - label.bbox[0]
    assert width(placed) == pytest.approx(2 * width(source_label), rel=0.01)  # an A5 page at 100 %


def test_attributes_inherited_from_the_page_tree(engine, tmp_path):
    def pages(pdf):
        add_page(pdf, 1)
        add_page(pdf, 2)
        tree = pdf.Root.Pages
        tree.MediaBox = Array([0, 0, *A5_PT])
        tree.Rotate = 90
        tree.Resources = Dictionary(Font=Dictionary(F1=helvetica(pdf)))
        for page in pdf.pages:
            for key in ("/MediaBox", "/Resources"):
                del page.obj[key]

    output = run(engine, build(tmp_path / "in.pdf", pages), {**TWO_UP_A4, "orientation": "portrait", "rows": 2, "columns": 1}, tmp_path)
    found = big_labels(output)[0]
    assert [l.text for l in found] == ["P1", "P2"]
    assert all(l.angle_degrees_ccw == 270 for l in found)  # the inherited /Rotate 90


def test_pages_sharing_one_content_stream_keep_their_own_boxes(engine, tmp_path):
    drawing = b"0 0 1 rg 100 200 200 200 re f 1 0 0 rg 500 200 200 200 re f\n"  # blue left, red right

    def pages(pdf):
        shared = pdf.make_stream(drawing)
        for number, crop in ((1, [0, 0, 400, 600]), (2, [400, 0, 800, 600])):
            add_page(pdf, number, (800.0, 600.0), content=b"", CropBox=Array(crop))
            pdf.pages[-1].obj.Contents = shared

    output = run(engine, build(tmp_path / "in.pdf", pages), TWO_UP_A4, tmp_path)
    raster, half = Raster(output), 297 * MM / 2
    left, right = (0, 0, half, 210 * MM), (half, 0, 2 * half, 210 * MM)
    assert count(raster, *left, blue) > 0 and count(raster, *left, red) == 0
    assert count(raster, *right, red) > 0 and count(raster, *right, blue) == 0


def test_each_page_keeps_its_own_resources(engine, tmp_path):
    def pages(pdf):
        for number, colour in ((1, b"\xff\x00\x00"), (2, b"\x00\x00\xff")):
            image = pdf.make_stream(colour, Type=Name.XObject, Subtype=Name.Image, Width=1, Height=1,
                                    ColorSpace=Name.DeviceRGB, BitsPerComponent=8)
            add_page(pdf, number, content=b"q 50 0 0 50 300 400 cm /Im0 Do Q\n",
                     resources=Dictionary(XObject=Dictionary(Im0=image)))

    output = run(engine, build(tmp_path / "in.pdf", pages), TWO_UP_A4, tmp_path)
    raster, half = Raster(output), 297 * MM / 2
    assert count(raster, 0, 0, half, 210 * MM, red) > 0 and count(raster, 0, 0, half, 210 * MM, blue) == 0
    assert count(raster, half, 0, 2 * half, 210 * MM, blue) > 0 and count(raster, half, 0, 2 * half, 210 * MM, red) == 0


def test_annotations_are_flattened_onto_the_sheet(engine, tmp_path):
    def pages(pdf):
        page = add_page(pdf, 1)
        appearance = pdf.make_stream(b"0 0 1 rg 0 0 60 60 re f", Type=Name.XObject, Subtype=Name.Form, BBox=[0, 0, 60, 60])
        page.obj.Annots = pdf.make_indirect(Array([pdf.make_indirect(Dictionary(
            Type=Name.Annot, Subtype=Name.Square, Rect=[200, 300, 260, 360], F=4, AP=Dictionary(N=appearance),
        ))]))

    output = run(engine, build(tmp_path / "in.pdf", pages), {**ONE_UP_A4, "sheet": "A5"}, tmp_path)
    assert count(Raster(output), 205, 305, 255, 355, blue) > 0
    with pikepdf.open(output) as plates:
        assert "/Annots" not in plates.pages[0].obj


def test_unbalanced_graphics_state_does_not_leak_into_the_next_cell(engine, tmp_path):
    def pages(pdf):
        add_page(pdf, 1, content=b"q q q 4 0 0 4 0 0 cm 1 0 0 rg 1 0 0 RG " + label_content(1, (0, 0, *A5_PT)))
        add_page(pdf, 2, content=b"Q Q Q Q " + label_content(2, (0, 0, *A5_PT)))

    source = build(tmp_path / "in.pdf", pages)
    output = run(engine, source, TWO_UP_A4, tmp_path)
    raster, half = Raster(output), 297 * MM / 2
    assert count(raster, half, 0, 2 * half, 210 * MM, red) == 0  # page 1's red and 4× scale stay in its cell
    assert count(raster, half, 0, 2 * half, 210 * MM, lambda p: max(p) < 80) > 0  # page 2 drawn in black
    (p2,) = [l for l in big_labels(output)[0] if l.text == "P2"]
    (original,) = big_labels(source)[1]
    assert p2.bbox[2] - p2.bbox[0] == pytest.approx(original.bbox[2] - original.bbox[0], rel=0.01)


def test_a_damaged_xref_is_reconstructed(engine, case, tmp_path):
    data = case("a5_8p.pdf").read_bytes()
    start = data.rindex(b"startxref")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(data[:start] + b"startxref\n999999\n%%EOF\n")
    output = run(engine, broken, {"layout": "saddle_stitch", "sheet": "A4"}, tmp_path)
    assert sorted(l.text for side in big_labels(output) for l in side) == sorted(f"P{n}" for n in range(1, 9))


def test_damaged_beyond_repair_is_a_typed_error(engine, tmp_path):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 20)
    with pytest.raises(DamagedPdf) as caught:
        engine.impose(broken, parse_layout({"layout": "saddle_stitch", "sheet": "A4"}), tmp_path / "out.pdf")
    assert caught.value.code == "damaged" and not caught.value.retryable


SAME_BYTES_JOBS = [
    ("a5_13p_odd.pdf", {"layout": "saddle_stitch", "sheet": "A4", "slug": True, "fold_marks": True}),
    ("trim_bleed_3mm_8p.pdf", {"layout": "n_up", "sheet": "SRA3", "gutter_mm": 5, "bleed_mm": 3, "crop_marks": True}),
    ("encrypted_owner_only_8p.pdf", {"layout": "cut_and_stack", "sheet": "A3", "duplex": "sheetwise"}),
]


def test_the_same_job_gives_the_same_bytes(engine, case, tmp_path):
    """The service relies on it: a fenced-out worker that finishes late can only rewrite identical bytes.

    qpdf's non-deterministic /ID mixes in the time in whole seconds, so the second runs wait for the
    next second: only a content-derived /ID then makes the files equal.
    """
    def run_all(directory):
        directory.mkdir()
        for index, (name, layout) in enumerate(SAME_BYTES_JOBS):  # each run its own child process and hash seed
            engine.impose(case(name), parse_layout(layout), directory / f"{index}.pdf", slug=SlugInfo("job-1", "tenant-1"))
        return [(directory / f"{index}.pdf").read_bytes() for index in range(len(SAME_BYTES_JOBS))]

    first = run_all(tmp_path / "first")
    second_started = int(time.time())
    while int(time.time()) == second_started:
        time.sleep(0.01)
    second = run_all(tmp_path / "second")
    for (name, _), one, other in zip(SAME_BYTES_JOBS, first, second):
        assert one == other, f"{name}: two runs of the same job wrote different bytes"
        with pikepdf.open(io.BytesIO(one)) as plates:
            assert len(plates.pages) > 0 and "/ID" in plates.trailer and not plates.is_encrypted


LAYOUTS = [
    {"layout": "saddle_stitch", "sheet": "A4"},
    {"layout": "perfect_bound", "sheet": "A4", "signature_pages": 8, "fold_scheme": "sections"},
    {"layout": "perfect_bound", "sheet": "SRA2", "signature_pages": 8},  # F8-7: one sheet per signature
    {"layout": "n_up", "sheet": "SRA3", "columns": 2, "rows": 2},
    {"layout": "cut_and_stack", "sheet": "SRA3", "columns": 2, "rows": 2, "duplex": "sheetwise"},
]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(page_count=st.integers(1, 200), layout=st.sampled_from(LAYOUTS))
def test_the_engine_places_every_page_exactly_once(engine, tmp_path_factory, page_count, layout):
    directory = tmp_path_factory.mktemp("pages")
    source = labelled_pdf(directory / "in.pdf", page_count)
    output = directory / "plate.pdf"
    if layout["layout"] == "saddle_stitch" and -(-page_count // 4) > Settings().saddle_stitch_max_sheets:
        with pytest.raises(BindingLimitExceeded, match="bind it as perfect_bound"):
            engine.impose(source, parse_layout(layout), output)
        return
    report = engine.impose(source, parse_layout(layout), output)
    found = sorted(int(l.text[1:]) for side in big_labels(output) for l in side)
    assert found == list(range(1, page_count + 1))
    assert report.pages_in == page_count
    assert report.blank_pages == expected_blanks(layout, page_count)


def expected_blanks(layout, page_count):
    """Padding: saddle-stitched 2-up booklets to a multiple of 4, every perfect-bound book to whole
    signatures (nested sections and fold schemes alike), duplex grids to whole leaves."""
    if layout["layout"] == "saddle_stitch":
        return -page_count % 4
    if "signature_pages" in layout:
        return -page_count % layout["signature_pages"]
    return page_count % 2 if "duplex" in layout else 0
