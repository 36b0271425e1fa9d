"""Hostile PDFs through the real engine child: a malformed page fails once as ``damaged`` (never an
engine crash that would be retried), a tiny page cannot make step and repeat lay out millions of
cells, and no tenant-facing message carries a traceback or a path of the worker's."""

from __future__ import annotations

import logging

import pytest

from imposition.engine import parse_layout
from imposition.engine.errors import DamagedPdf, EngineCrashed, TooManyCells
from imposition.engine.spec import NUp
from tests.adversarial.support import SQUARE, a5_pdf, raw_pdf

SADDLE_A4 = {"layout": "saddle_stitch", "sheet": "A4"}
#: A number with more digits than qpdf's 64-bit integers (and its reals' doubles) can hold.
HUGE = b"9" * 400
#: Nesting far past qpdf's parser limit (500).
DEEP = 100_000


def one_broken_page(entries: bytes) -> bytes:
    """Eight A5 pages, the third with ``entries`` added (qpdf cannot parse that page object), the
    cross-reference table exact, so qpdf has nothing else to repair."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count 8 >>" % b" ".join(b"%d 0 R" % (4 + i) for i in range(8)),
        3: b"<< /Length %d >>\nstream\n" % len(SQUARE) + SQUARE + b"\nendstream",
    }
    for index in range(8):
        extra = entries if index == 2 else b""
        objects[4 + index] = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 420 595] /Contents 3 0 R %s >>" % extra
    return raw_pdf(objects)


def assert_public(message: str, tmp_path) -> None:
    """A message a tenant may read: no traceback, no path of the worker's, not huge."""
    assert "Traceback" not in message and 'File "' not in message
    assert str(tmp_path) not in message
    assert len(message) < 1000


@pytest.mark.parametrize("pdf", [
    pytest.param(a5_pdf(page_entries=b"/Contents 7"), id="contents-is-an-integer"),
    pytest.param(a5_pdf(count=999_999_999), id="page-tree-count-lies"),
    pytest.param(a5_pdf(page_entries=b"/Contents 3 0 R /Rotate " + HUGE), id="rotate-400-digits"),
    pytest.param(a5_pdf(page_entries=b"/Contents 3 0 R /UserUnit " + HUGE), id="user-unit-400-digits"),
    pytest.param(a5_pdf(page_entries=b"/Contents 3 0 R /MediaBox [0 0 " + HUGE + b" 595]"), id="media-box-400-digits"),
    pytest.param(a5_pdf(page_entries=b"/Contents 3 0 R /UserUnit " + HUGE + b".5"), id="user-unit-overflows-a-double"),
    pytest.param(a5_pdf(page_entries=b"/Contents 3 0 R /X " + b"<< /A " * DEEP + b">> " * DEEP), id="page-nested-deep"),
    pytest.param(one_broken_page(b"/Rotate " + HUGE), id="one-page-of-eight-unreadable"),
    pytest.param(a5_pdf(page_entries=b"/Contents 3 0 R /Group 7"), id="group-is-an-integer"),
])
def test_a_malformed_page_fails_once_as_damaged(engine, tmp_path, pdf):
    source = tmp_path / "input.pdf"
    source.write_bytes(pdf)
    with pytest.raises(DamagedPdf) as caught:
        engine.impose(source, parse_layout(SADDLE_A4), tmp_path / "plate.pdf")
    assert caught.value.code == "damaged" and not caught.value.retryable
    assert_public(str(caught.value), tmp_path)
    assert not (tmp_path / "plate.pdf").exists()


def test_qpdf_messages_name_the_file_not_the_workers_path(engine, tmp_path):
    source = tmp_path / "input.pdf"
    source.write_bytes(a5_pdf(page_entries=b"/Contents 3 0 R /Rotate " + HUGE))
    with pytest.raises(DamagedPdf) as caught:
        engine.impose(source, parse_layout(SADDLE_A4), tmp_path / "plate.pdf")
    message = str(caught.value)
    assert "input.pdf (object 4 0" in message and "overflow" in message  # qpdf's own words, cut short
    assert message.endswith("…")


def test_a_tiny_page_in_step_and_repeat_is_too_many_cells_not_a_memory_blow_up(engine, tmp_path):
    """A 0.06 pt page would fill an A4 side with ~14 million copies (it used 2 GB and failed as
    memory_limit); the cell count is refused before anything is laid out."""
    source = tmp_path / "input.pdf"
    source.write_bytes(a5_pdf(page_entries=b"/Contents 3 0 R /TrimBox [0 0 0.06 0.06]"))
    with pytest.raises(TooManyCells) as caught:
        engine.impose(source, parse_layout({"layout": "step_and_repeat", "sheet": "A4"}), tmp_path / "plate.pdf")
    assert caught.value.code == "too_many_cells" and not caught.value.retryable
    assert f"max_cells_per_sheet={engine.settings.max_cells_per_sheet}" in str(caught.value)


def test_an_internal_error_is_a_crash_whose_traceback_goes_to_the_log_only(engine, case, tmp_path, caplog):
    """A layout that skipped validation (0 columns) makes the planner divide by zero: a bug of
    ours, so a retryable crash; the tenant's message has no traceback, the worker's log has it."""
    unchecked = NUp.model_construct(layout="n_up", sheet="A4", columns=0)
    with caplog.at_level(logging.ERROR, logger="imposition.engine.backends.base"):
        with pytest.raises(EngineCrashed) as caught:
            engine.impose(case("a5_8p.pdf"), unchecked, tmp_path / "plate.pdf")
    assert caught.value.retryable
    assert_public(str(caught.value), tmp_path)
    assert "ZeroDivisionError" in caplog.text and "Traceback" in caplog.text
