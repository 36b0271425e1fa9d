"""The content budget's shortcut (a stream held by its raw length alone is not decoded) refuses exactly
what measuring every stream refuses, with the same message; and the plate's /ID is a digest of it.

Every figure in these messages is worked out here from what the documents are made of: the budget
must count the same bytes as if it had decoded every stream in turn.
"""

from __future__ import annotations

import io
import os
import zlib

import pikepdf
import pytest
from pikepdf import Array, Dictionary, Name

from .imposition_pdfs import add_page, labelled_pdf
from imposition.engine import parse_layout
from imposition.engine.drawing import STATIC_ID_HEX
from imposition.engine.backends import PikepdfEngine
from imposition.engine.errors import ContentTooLarge
from tests.adversarial.support import flate_bomb, save_as_written

MIB = 1024 * 1024
BOOKLET = {"layout": "saddle_stitch", "sheet": "A4"}


def _image(pdf: pikepdf.Pdf, data: bytes, **filters) -> pikepdf.Stream:
    """A 1024 × 1024 grey image XObject holding ``data`` as written (``filters``: its /Filter)."""
    image = pikepdf.Stream(pdf, b"")
    image.write(data, **filters)
    image.Type, image.Subtype, image.ColorSpace = Name.XObject, Name.Image, Name.DeviceGray
    image.Width, image.Height, image.BitsPerComponent = 1024, 1024, 8
    return image


def _one_image_a_page(path, page_count: int):
    """``page_count`` pages, page n drawing its own image that inflates to exactly 1 MiB (a few KB
    written, so its raw length bounds it at about 1.01 MiB); returns the file and the decoded size of
    each page's own content stream (written unfiltered)."""
    with pikepdf.new() as pdf:
        contents = []
        for number in range(1, page_count + 1):
            page = add_page(pdf, number)
            page.obj.Resources.XObject = Dictionary(Im0=_image(pdf, flate_bomb(MIB, byte=number),
                                                               filter=Name.FlateDecode))
            page.obj.Contents = pdf.make_stream(b"q 100 0 0 100 10 10 cm /Im0 Do Q")
            contents.append(len(page.obj.Contents.read_bytes()))
        return save_as_written(pdf, path), contents


def test_the_job_limit_refuses_at_the_same_stream_with_the_same_count(settings, tmp_path):
    """Four 1 MiB images against a job limit of 3.5 MiB: three fit even at their most, the fourth does
    not, and the refusal counts what the streams decode to, not their bounds: all four pages' content,
    three whole images and the first MiB of the fourth."""
    source, contents = _one_image_a_page(tmp_path / "four.pdf", 4)
    limit = 3 * MIB + MIB // 2
    engine = PikepdfEngine(settings.model_copy(update={"max_decoded_bytes_per_job": limit}))
    with pytest.raises(ContentTooLarge) as caught:
        engine.impose(source, parse_layout(BOOKLET), tmp_path / "plate.pdf")
    message = str(caught.value)
    assert "page 4: an image" in message and f"max_decoded_bytes_per_job={limit}" in message, message
    assert f"(refused after {sum(contents) + 4 * MIB} decoded bytes)" in message, message
    assert not (tmp_path / "plate.pdf").exists()


def test_streams_that_fit_at_their_most_are_imposed_whole(settings, tmp_path):
    """The same four images under a job limit of 4.5 MiB, which holds them even at their most: imposed,
    every image on the plate as written."""
    source, _ = _one_image_a_page(tmp_path / "four.pdf", 4)
    engine = PikepdfEngine(settings.model_copy(update={"max_decoded_bytes_per_job": 4 * MIB + MIB // 2}))
    report = engine.impose(source, parse_layout(BOOKLET), tmp_path / "plate.pdf")
    assert report.sides == 2
    with pikepdf.open(tmp_path / "plate.pdf") as plate:
        images = [obj for obj in plate.objects if isinstance(obj, pikepdf.Stream) and obj.get("/Subtype") == Name.Image]
        assert sorted(len(image.read_bytes()) for image in images) == [MIB] * 4


def test_a_stream_over_its_bound_but_under_the_limit_is_measured(settings, tmp_path):
    """A 200 KB image of incompressible bytes: its raw length bounds it far above a per-stream limit of
    1 MiB (deflate's best ratio is 1032:1), so it is decoded and measured: 200 KB, imposed. Under a
    limit of 100 KB it is refused after the first 200 KB, its whole decoded size."""
    noise = os.urandom(200_000)
    with pikepdf.new() as pdf:
        page = add_page(pdf, 1)
        page.obj.Resources.XObject = Dictionary(Im0=_image(pdf, zlib.compress(noise), filter=Name.FlateDecode))
        page.obj.Contents = pdf.make_stream(b"q 100 0 0 100 10 10 cm /Im0 Do Q")
        source = save_as_written(pdf, tmp_path / "noise.pdf")
    roomy = PikepdfEngine(settings.model_copy(update={"max_decoded_bytes_per_stream": MIB}))
    assert roomy.impose(source, parse_layout(BOOKLET), tmp_path / "plate.pdf").sides == 2
    tight = PikepdfEngine(settings.model_copy(update={"max_decoded_bytes_per_stream": 100_000}))
    with pytest.raises(ContentTooLarge) as caught:
        tight.impose(source, parse_layout(BOOKLET), tmp_path / "plate2.pdf")
    assert "max_decoded_bytes_per_stream=100000" in str(caught.value) and "an image" in str(caught.value)
    assert "(refused after 200000 decoded bytes)" in str(caught.value), str(caught.value)


def test_an_image_drawn_as_content_counts_what_it_decodes_to(settings, tmp_path):
    """One stream that inflates to 1 MiB is page 1's image (left undecoded: it fits at its most) and
    three times page 2's /Contents: the parts count their decoded size, so the third passes a
    per-stream limit of 2.5 MiB, as when every stream is measured."""
    with pikepdf.new() as pdf:
        shared = pdf.make_indirect(_image(pdf, flate_bomb(MIB), filter=Name.FlateDecode))
        first = add_page(pdf, 1)
        first.obj.Resources.XObject = Dictionary(Im0=shared)
        first.obj.Contents = pdf.make_stream(b"q 100 0 0 100 10 10 cm /Im0 Do Q")
        second = add_page(pdf, 2)
        second.obj.Contents = Array([shared, shared, shared])
        source = save_as_written(pdf, tmp_path / "shared.pdf")
    limit = 2 * MIB + MIB // 2
    engine = PikepdfEngine(settings.model_copy(update={"max_decoded_bytes_per_stream": limit}))
    with pytest.raises(ContentTooLarge) as caught:
        engine.impose(source, parse_layout(BOOKLET), tmp_path / "plate.pdf")
    message = str(caught.value)
    assert "page 2: its content (3 streams, up to part 3)" in message, message
    assert f"max_decoded_bytes_per_stream={limit}" in message and f"(refused after {3 * MIB} decoded bytes)" in message


def _ids(path) -> list[str]:
    with pikepdf.open(path) as plate:
        return [bytes(part).hex() for part in plate.trailer.ID]


def test_the_plate_id_is_a_digest_of_the_plate(engine, tmp_path):
    """Two different inputs: plates with different second /ID strings, neither qpdf's fixed one; the
    first is the source's own first /ID string, as qpdf keeps it."""
    ids = []
    for pages in (4, 8):
        source = labelled_pdf(tmp_path / f"in{pages}.pdf", pages)
        engine.impose(source, parse_layout(BOOKLET), tmp_path / f"plate{pages}.pdf")
        with pikepdf.open(source) as pdf:
            source_first = bytes(pdf.trailer.ID[0]).hex()
        first, second = _ids(tmp_path / f"plate{pages}.pdf")
        assert first == source_first and second != STATIC_ID_HEX.decode() and len(second) == 32
        assert STATIC_ID_HEX not in (tmp_path / f"plate{pages}.pdf").read_bytes()
        ids.append(second)
    assert ids[0] != ids[1]


def test_a_source_without_an_id_gives_a_plate_whose_id_is_the_digest_twice(engine, tmp_path):
    """qpdf writes its fixed string as both halves of the /ID of a file that had none: both become the digest."""
    written = labelled_pdf(tmp_path / "with-id.pdf", 4).read_bytes()
    at = written.rindex(b"/ID [")
    end = written.index(b"]", at) + 1
    source = tmp_path / "without-id.pdf"
    source.write_bytes(written[:at] + b" " * (end - at) + written[end:])  # the same offsets, no /ID
    with pikepdf.open(source) as pdf:
        assert "/ID" not in pdf.trailer
    engine.impose(source, parse_layout(BOOKLET), tmp_path / "plate.pdf")
    first, second = _ids(tmp_path / "plate.pdf")
    assert first == second and second != STATIC_ID_HEX.decode()


def test_a_plate_in_object_streams_gets_its_digest_and_none_of_the_source_trailer(engine, tmp_path):
    """A source in object streams (its plate then ends with a cross-reference stream, whose dictionary
    holds the /ID) and with a 100 KB entry of its own in its trailer: the plate's trailer keeps none of
    it, its /ID is a digest, and two runs give the same bytes."""
    with pikepdf.new() as pdf:
        for number in range(1, 5):
            add_page(pdf, number)
        pdf.trailer.Junk = pikepdf.String("x" * 100_000)
        source = tmp_path / "in-object-streams.pdf"
        pdf.save(source, object_stream_mode=pikepdf.ObjectStreamMode.generate)
    plates = []
    for run in range(2):
        engine.impose(source, parse_layout(BOOKLET), tmp_path / f"plate{run}.pdf")
        plates.append((tmp_path / f"plate{run}.pdf").read_bytes())
    assert plates[0] == plates[1]
    assert b"/Type /XRef" in plates[0] and STATIC_ID_HEX not in plates[0]
    with pikepdf.open(io.BytesIO(plates[0])) as plate:
        assert "/Junk" not in plate.trailer and len(plate.pages) == 2
        assert bytes(plate.trailer.ID[1]).hex() != STATIC_ID_HEX.decode()


_GOOD_CONTENT = zlib.compress(b"0 0 m 100 100 l S\n" * 50)
#: Content streams as written (each /FlateDecode but the first): whether the budget reads them whole.
_CONTENT_VARIANTS = {
    "unfiltered": (b"0 0 m 100 100 l S\n", False, True),
    "whole": (_GOOD_CONTENT, True, True),
    "trailing-bytes": (_GOOD_CONTENT + b"\r\n", True, True),
    "truncated": (_GOOD_CONTENT[:-6], True, False),
    "bad-checksum": (_GOOD_CONTENT[:-1] + bytes([_GOOD_CONTENT[-1] ^ 1]), True, False),
    "bad-header": (b"\x00" + _GOOD_CONTENT[1:], True, False),
}


@pytest.mark.parametrize("variant", list(_CONTENT_VARIANTS))
def test_a_content_stream_read_whole_is_not_decoded_again_and_the_verdict_is_the_same(settings, tmp_path, variant):
    """The damage check skips qpdf's decode of a content stream the budget read whole (unfiltered, or
    inflated to zlib's end and checksum); for every variant its verdict (the ``repaired`` warning or
    the ``damaged`` message) is the one it gives when it decodes every stream itself."""
    from imposition.engine.budget import check_content_budget
    from imposition.engine.job import ContentBudget
    from imposition.engine.source import content_damage, open_source, read_pages

    data, flated, read_whole = _CONTENT_VARIANTS[variant]
    with pikepdf.new() as pdf:
        page = add_page(pdf, 1)
        page.obj.Contents = pdf.make_stream(b"")
        page.obj.Contents.write(data, filter=Name.FlateDecode if flated else None)
        source = save_as_written(pdf, tmp_path / f"{variant}.pdf")

    def verdict(skip: bool) -> tuple[str, str | None, frozenset]:
        warnings: list[str] = []
        with open_source(source, max_pages=10, warnings_out=warnings) as pdf:
            pages = read_pages(pdf)
            whole = check_content_budget(pdf, ContentBudget.of(settings), source, pages).read_whole
            try:
                return "ok", content_damage(pdf, source, warnings, pages, whole if skip else frozenset()), whole
            except Exception as exc:  # noqa: BLE001 (the verdicts are compared, whatever they are)
                return type(exc).__name__, str(exc), whole

    skipped, decoded = verdict(True), verdict(False)
    assert skipped[:2] == decoded[:2]
    assert bool(skipped[2]) is read_whole
