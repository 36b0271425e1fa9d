"""Limits against hostile input: pages, size, time, memory, cancellation. Each job fails cleanly."""

from __future__ import annotations

import threading
import time
import zlib

import pikepdf
import psutil
import pytest
from pikepdf import Array

from .imposition_pdfs import add_page, labelled_pdf
from imposition.engine import parse_layout
from imposition.engine.backends import PdfToolboxEngine, PikepdfEngine
from imposition.engine.errors import EngineCancelled, InputTooLarge, MemoryLimitExceeded, TimeLimitExceeded, TooManyPages
from devstack.stack import wait_for

BOOKLET = {"layout": "saddle_stitch", "sheet": "A4"}


@pytest.fixture
def children_before():
    """The processes this test process had before the test (the session's local AWS servers)."""
    return {child.pid for child in psutil.Process().children(recursive=True)}


def assert_clean(output, children_before):
    """Nothing at the output path, no partial file beside it, no child process left running."""
    assert not output.exists()
    assert [p.name for p in output.parent.iterdir() if p.name.endswith(".partial")] == []
    left = [c for c in psutil.Process().children(recursive=True) if c.pid not in children_before]
    assert left == []


def test_too_many_pages(settings, case, tmp_path, children_before):
    engine = PikepdfEngine(settings.model_copy(update={"max_pages": 5}))
    with pytest.raises(TooManyPages) as caught:
        engine.impose(case("a5_8p.pdf"), parse_layout(BOOKLET), tmp_path / "plate.pdf")
    assert "8 pages" in str(caught.value) and "max_pages=5" in str(caught.value)
    assert caught.value.code == "too_many_pages" and not caught.value.retryable
    assert_clean(tmp_path / "plate.pdf", children_before)


def test_input_too_large(settings, case, tmp_path):
    engine = PikepdfEngine(settings.model_copy(update={"max_input_bytes": 1000}))
    with pytest.raises(InputTooLarge) as caught:
        engine.impose(case("a5_8p.pdf"), parse_layout(BOOKLET), tmp_path / "plate.pdf")
    assert "max_input_bytes=1000" in str(caught.value) and caught.value.code == "input_too_large"


@pytest.fixture
def long_job(tmp_path):
    """A document whose imposition outlasts the child's start by far (hundreds of pages)."""
    return labelled_pdf(tmp_path / "long.pdf", 600)


def test_time_limit_kills_the_engine(engine, long_job, tmp_path, children_before):
    with pytest.raises(TimeLimitExceeded) as caught:
        engine.impose(long_job, parse_layout(BOOKLET), tmp_path / "plate.pdf", time_limit_s=0.05)
    assert "time limit of 0.05 s and was killed" in str(caught.value)  # killed while running, not after
    assert caught.value.code == "time_limit" and not caught.value.retryable
    assert_clean(tmp_path / "plate.pdf", children_before)


def decompression_bomb(path, inflated_bytes):
    """A page whose second content stream inflates to ``inflated_bytes`` of spaces."""
    packer = zlib.compressobj(9)
    chunk = b" " * (16 * 1024 * 1024)
    data = b"".join(packer.compress(chunk) for _ in range(inflated_bytes // len(chunk))) + packer.flush()
    with pikepdf.new() as pdf:
        page = add_page(pdf, 1)
        bomb = pikepdf.Stream(pdf, b"")
        bomb.write(data, filter=pikepdf.Name.FlateDecode)
        page.obj.Contents = Array([page.obj.Contents, bomb])
        pdf.save(path)
    return path


def test_memory_budget_stops_a_decompression_bomb(settings, tmp_path, children_before):
    """A content budget above what the memory budget holds (an operator's setting): RLIMIT_AS stops
    the stream the content budget lets through (with the default budget it is content_too_large,
    test_imp_bombs)."""
    source = decompression_bomb(tmp_path / "bomb.pdf", 768 * 1024 * 1024)
    engine = PikepdfEngine(settings.model_copy(update={"engine_memory_limit_bytes": 400 * 1024 * 1024,
                                                       "max_decoded_bytes_per_stream": 1024**3}))
    with pytest.raises(MemoryLimitExceeded) as caught:
        engine.impose(source, parse_layout(BOOKLET), tmp_path / "plate.pdf")
    assert caught.value.code == "memory_limit" and not caught.value.retryable
    assert_clean(tmp_path / "plate.pdf", children_before)


def test_cancel_kills_the_running_engine(engine, long_job, tmp_path, children_before):
    cancel = threading.Event()

    def cancel_once_the_child_runs():
        while not cancel.is_set():
            if any(c.pid not in children_before for c in psutil.Process().children(recursive=True)):
                cancel.set()
            time.sleep(0.005)

    threading.Thread(target=cancel_once_the_child_runs, daemon=True).start()
    try:
        with pytest.raises(EngineCancelled) as caught:
            engine.impose(long_job, parse_layout(BOOKLET), tmp_path / "plate.pdf", cancel=cancel)
    finally:
        cancel.set()  # stops the watching thread whatever happened
    assert "its process killed" in str(caught.value)  # stopped while running, not discarded after finishing
    assert caught.value.code == "cancelled"
    assert_clean(tmp_path / "plate.pdf", children_before)


def test_cancel_set_before_the_start_runs_nothing(any_engine, case, tmp_path, children_before):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(EngineCancelled, match="before it started"):  # not "started, then killed"
        any_engine.impose(case("a5_8p.pdf"), parse_layout(BOOKLET), tmp_path / "out" / "plate.pdf", cancel=cancel)
    assert not (tmp_path / "out").exists()  # not even the output directory was made
    assert [c for c in psutil.Process().children(recursive=True) if c.pid not in children_before] == []


@pytest.mark.parametrize("stop", ["time_limit", "cancel"])
def test_the_whole_pdftoolbox_process_group_dies(stand_in_settings, case, tmp_path, stop, children_before):
    pid_file = tmp_path / "grandchild.pid"
    variables = {"standin_sleep_s": "30", "standin_grandchild_pid_file": str(pid_file)}
    engine = PdfToolboxEngine(stand_in_settings.model_copy(update={"pdftoolbox_variables": variables}))
    cancel = threading.Event()

    def cancel_once_the_grandchild_runs() -> None:  # not a fixed delay: start-up is slow on a loaded machine
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 60, what="the stand-in's child")
        cancel.set()

    if stop == "cancel":
        threading.Thread(target=cancel_once_the_grandchild_runs, daemon=True).start()
    expected = TimeLimitExceeded if stop == "time_limit" else EngineCancelled
    with pytest.raises(expected):
        # the stand-in sleeps 30 s; 6 s leaves it ample time to start its child before the limit
        engine.impose(case("a5_8p.pdf"), parse_layout(BOOKLET), tmp_path / "out" / "plate.pdf",
                      cancel=cancel, time_limit_s=6 if stop == "time_limit" else 60)
    grandchild = int(pid_file.read_text())

    def gone() -> bool:
        try:
            return psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, 5, what="the stand-in's child to die with its process group")
    assert_clean(tmp_path / "out" / "plate.pdf", children_before)
