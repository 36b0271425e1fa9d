"""Decompression bombs through the real engine child: each fails at once as ``content_too_large``
naming the limit, and nothing bigger than the content budget reaches a plate.

Every bomb is built in milliseconds (``tests.adversarial.support.bomb_pdf``): a few KB that inflate
to GiBs. Each test prints the engine's wall and CPU time (``-s`` shows them); the figures are
reported, not asserted.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pikepdf
import pytest
from pikepdf import Dictionary, Name

from .imposition_pdfs import add_page
from imposition.engine import parse_layout
from imposition.engine.backends import PdfToolboxEngine, PikepdfEngine
from imposition.engine.errors import ContentTooLarge
from tests.adversarial.support import bomb_pdf, flate_bomb, save_as_written

BOOKLET = {"layout": "saddle_stitch", "sheet": "A4"}


def timed_impose(engine: PikepdfEngine, source: Path, output: Path, label: str):
    """``engine.impose``; prints the wall and child CPU time it took. Returns the report or the error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    try:
        outcome = engine.impose(source, parse_layout(BOOKLET), output)
    except ContentTooLarge as exc:
        outcome = exc
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"\n[bomb] {label}: {source.stat().st_size} bytes, engine wall {time.monotonic() - started:.2f} s, "
          f"engine CPU {cpu_s:.2f} s: {getattr(outcome, 'code', 'imposed')}")
    return outcome


@pytest.mark.parametrize("where, chain, what", [
    ("content", "flate-flate", "its content stream"),
    ("form", "flate-flate", "a form XObject"),
    ("appearance", "flate-flate", "a form XObject"),
    ("image", "flate-flate", "an image"),
    ("form", "a85-flate-flate-flate", "a form XObject"),
    ("content", "flate-lzw", "its content stream"),
])
def test_a_bomb_fails_at_once_as_content_too_large(engine, tmp_path, where, chain, what):
    source = bomb_pdf(tmp_path / "bomb.pdf", where, chain)
    assert source.stat().st_size < 64 * 1024
    outcome = timed_impose(engine, source, tmp_path / "plate.pdf", f"{where} ({chain})")
    assert isinstance(outcome, ContentTooLarge), outcome
    assert (outcome.code, outcome.retryable) == ("content_too_large", False)
    limit = engine.settings.max_decoded_bytes_per_stream
    message = str(outcome)
    assert f"max_decoded_bytes_per_stream={limit}" in message and "page 1" in message and what in message, message
    assert "bomb.pdf" in message and str(tmp_path) not in message
    assert not (tmp_path / "plate.pdf").exists()


def _plate_streams(path: Path) -> list[int]:
    """The decoded size of every stream of the plate file at ``path`` (bytes)."""
    with pikepdf.open(path) as plate:
        return [len(obj.read_bytes()) for obj in plate.objects if isinstance(obj, pikepdf.Stream)]


def test_pdftoolbox_gets_no_bomb_either(stand_in_settings, tmp_path):
    """The licensed engine's inspection runs the same budget before pdfToolbox is started."""
    source = bomb_pdf(tmp_path / "bomb.pdf", "form")
    marker = tmp_path / "started.pid"
    engine = PdfToolboxEngine(stand_in_settings.model_copy(
        update={"pdftoolbox_variables": {"standin_grandchild_pid_file": str(marker)}}))
    outcome = timed_impose(engine, source, tmp_path / "plate.pdf", "form, pdfToolbox engine")
    assert isinstance(outcome, ContentTooLarge), outcome
    assert not marker.exists() and not (tmp_path / "plate.pdf").exists()


def test_a_bomb_no_page_reaches_is_neither_decoded_nor_copied(engine, tmp_path):
    source = bomb_pdf(tmp_path / "bomb.pdf", "unused")
    report = timed_impose(engine, source, tmp_path / "plate.pdf", "unused embedded file")
    assert not isinstance(report, ContentTooLarge), report
    assert report.sides == 2
    sizes = _plate_streams(tmp_path / "plate.pdf")
    assert sizes and max(sizes) < 64 * 1024  # the plate's content and the page's form only


def test_a_page_within_the_budget_reaches_the_plate_whole(engine, tmp_path):
    """A page whose form decodes to 1 MiB of operators (under every limit): imposed, the form whole."""
    with pikepdf.new() as pdf:
        page = add_page(pdf, 1)
        body = b"0 0 m 10 10 l S\n" * (1024 * 1024 // 16)
        form = pikepdf.Stream(pdf, b"")
        form.write(zlib.compress(body), filter=Name.FlateDecode)
        form.Type, form.Subtype, form.BBox = Name.XObject, Name.Form, [0, 0, 100, 100]
        page.obj.Resources.XObject = Dictionary(Fm0=form)
        page.obj.Contents = pdf.make_stream(b"q /Fm0 Do Q")
        source = save_as_written(pdf, tmp_path / "fine.pdf")
    report = engine.impose(source, parse_layout(BOOKLET), tmp_path / "plate.pdf")
    assert report.sides == 2
    assert len(body) in _plate_streams(tmp_path / "plate.pdf")


def test_too_many_operators_in_one_stream(engine, tmp_path):
    """12 million one-letter operators (24 MB decoded, far under the byte limit) in one form."""
    with pikepdf.new() as pdf:
        page = add_page(pdf, 1)
        form = pikepdf.Stream(pdf, b"")
        form.write(zlib.compress(b"n\n" * 12_000_000, 9), filter=Name.FlateDecode)
        form.Type, form.Subtype, form.BBox = Name.XObject, Name.Form, [0, 0, 100, 100]
        page.obj.Resources.XObject = Dictionary(Fm0=form)
        page.obj.Contents = pdf.make_stream(b"q /Fm0 Do Q")
        source = save_as_written(pdf, tmp_path / "operators.pdf")
    outcome = timed_impose(engine, source, tmp_path / "plate.pdf", "12 M operators")
    assert isinstance(outcome, ContentTooLarge), outcome
    limit = engine.settings.max_content_operators_per_stream
    assert f"max_content_operators_per_stream={limit}" in str(outcome) and "a form XObject" in str(outcome)


def test_the_job_budget_counts_every_stream_once(settings, tmp_path):
    """Six images of 20 MiB each, one of them drawn on every page: under the per-stream limit, over a
    job limit of 101 MiB (five images and the pages' own content fit), which names the setting; drawn
    again, a stream is not counted again."""
    with pikepdf.new() as pdf:
        images = []
        for index in range(6):
            image = pikepdf.Stream(pdf, b"")
            image.write(flate_bomb(20 * 1024 * 1024, byte=index), filter=Name.FlateDecode)
            image.Type, image.Subtype, image.ColorSpace = Name.XObject, Name.Image, Name.DeviceGray
            image.Width, image.Height, image.BitsPerComponent = 4096, 5120, 8
            images.append(image)
        for number in range(1, 7):
            page = add_page(pdf, number)
            page.obj.Resources.XObject = Dictionary(Im0=images[0], Im1=images[number - 1])
            page.obj.Contents = pdf.make_stream(b"q 100 0 0 100 10 10 cm /Im0 Do /Im1 Do Q")
        source = save_as_written(pdf, tmp_path / "six.pdf")
    small_job = settings.model_copy(update={"max_decoded_bytes_per_job": 101 * 1024 * 1024})
    outcome = timed_impose(PikepdfEngine(small_job), source, tmp_path / "plate.pdf", "6 × 20 MiB, job limit 101 MiB")
    assert isinstance(outcome, ContentTooLarge), outcome
    message = str(outcome)
    assert "max_decoded_bytes_per_job=105906176" in message and "page 6" in message, message
    report = PikepdfEngine(settings).impose(source, parse_layout(BOOKLET), tmp_path / "plate.pdf")
    assert report.sides == 4


def test_the_cli_refuses_a_bomb_with_exit_1_and_no_plate(tmp_path):
    source = bomb_pdf(tmp_path / "bomb.pdf", "image")
    plate = tmp_path / "plate.pdf"
    command = Path(sys.executable).with_name("imposition")
    started = time.monotonic()
    result = subprocess.run([str(command), "impose", str(source), "--layout", '{"layout": "saddle_stitch", "sheet": "A4"}',
                             "-o", str(plate)], capture_output=True, text=True, timeout=300)
    print(f"\n[bomb] CLI impose of an image bomb: exit {result.returncode} in {time.monotonic() - started:.2f} s")
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "content_too_large" in result.stderr and "max_decoded_bytes_per_stream=" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not plate.exists()


def test_a_content_array_repeating_one_stream_counts_every_repeat(engine, tmp_path):
    """A page whose /Contents names one 100 MiB stream three times: the engine would concatenate
    300 MiB into the page's form, past the per-stream limit, though the stream itself is under it."""
    with pikepdf.new() as pdf:
        page = add_page(pdf, 1)
        part = pdf.make_indirect(pikepdf.Stream(pdf, b""))
        part.write(flate_bomb(100 * 1024 * 1024), filter=Name.FlateDecode)
        page.obj.Contents = pikepdf.Array([part, part, part])
        source = save_as_written(pdf, tmp_path / "thrice.pdf")
    outcome = timed_impose(engine, source, tmp_path / "plate.pdf", "one 100 MiB part three times")
    assert isinstance(outcome, ContentTooLarge), outcome
    assert "up to part 3" in str(outcome) and "max_decoded_bytes_per_stream=" in str(outcome), str(outcome)
