"""The warm engine child (``imposition.engine.isolation.keep_warm``): reused from job to job, replaced after a
crash, a kill, a time or memory limit, or past its bounds; every failure stays its own job's.

Real child processes throughout; the pids are read from the process table (psutil)."""

from __future__ import annotations

import os
import signal
import threading

import pikepdf
import psutil
import pytest

from .imposition_pdfs import labelled_pdf
from .test_imp_limits import BOOKLET, decompression_bomb
from imposition.engine import isolation, parse_layout
from imposition.engine.backends import PikepdfEngine
from imposition.engine.errors import EngineCrashed, MemoryLimitExceeded, TimeLimitExceeded
from devstack.stack import wait_for

POLICY = isolation.WarmPolicy(max_jobs=100, max_rss_bytes=512 * 1024**2)


@pytest.fixture
def warm():
    """Keep a warm child for the test; afterwards none is left running."""
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    isolation.keep_warm(POLICY)
    try:
        yield
    finally:
        isolation.stop_warm()
        left = [c for c in psutil.Process().children(recursive=True) if c.pid not in before]
        assert [c for c in left if c.status() != psutil.STATUS_ZOMBIE] == []


def engine_children() -> set[int]:
    """Pids of the engine children of this process now (the trampoline running imposition.engine.child)."""
    return {c.pid for c in psutil.Process().children() if "imposition.engine.child" in " ".join(c.cmdline())}


def started(pid: int) -> bool:
    """The warm child ``pid`` shows as an engine child: a child just spawned has its parent's command
    line until its exec has run (a flake under load: the pre-started child was not found yet)."""
    wait_for(lambda: pid in engine_children(), 10, interval_s=0.01, what=f"engine child {pid}'s exec")
    return True


def impose(engine, source, tmp_path, name="plate.pdf", **options):
    return engine.impose(source, parse_layout(BOOKLET), tmp_path / name, **options)


def test_two_jobs_run_in_the_same_warm_child(warm, engine, case, tmp_path):
    pid, jobs = isolation.warm_child()
    assert jobs == 0 and started(pid) and engine_children() == {pid}  # pre-started, before any job
    impose(engine, case("a5_8p.pdf"), tmp_path, "one.pdf")
    impose(engine, case("a5_8p.pdf"), tmp_path, "two.pdf")
    assert isolation.warm_child() == (pid, 2)  # both jobs answered by it
    assert engine_children() == {pid}
    with pikepdf.open(tmp_path / "two.pdf") as plate:
        assert len(plate.pages) == 4


def test_a_child_killed_between_jobs_is_replaced_and_the_next_job_succeeds(warm, engine, case, tmp_path):
    pid, _ = isolation.warm_child()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10, what="the killed child")
    report = impose(engine, case("a5_8p.pdf"), tmp_path)
    assert report.sides == 4
    new_pid, jobs = isolation.warm_child()
    assert new_pid != pid and jobs == 1


def test_a_child_killed_during_a_job_fails_only_that_job(warm, engine, tmp_path, case):
    long_job = labelled_pdf(tmp_path / "long.pdf", 600)
    pid, _ = isolation.warm_child()
    idle_cpu_s = sum(psutil.Process(pid).cpu_times()[:2])

    def kill_once_it_works():  # not a fixed delay: the job has begun once the idle child uses CPU again
        wait_for(lambda: sum(psutil.Process(pid).cpu_times()[:2]) > idle_cpu_s + 0.02, 30, interval_s=0.005,
                 what="the warm child to start the job")
        os.kill(pid, signal.SIGKILL)

    threading.Thread(target=kill_once_it_works, daemon=True).start()
    with pytest.raises(EngineCrashed) as caught:
        impose(engine, long_job, tmp_path, "long-plate.pdf")
    assert f"status {-signal.SIGKILL}" in str(caught.value) and caught.value.retryable
    assert not (tmp_path / "long-plate.pdf").exists()
    replacement, jobs = isolation.warm_child()
    assert replacement != pid and jobs == 0  # started at once, before the next job asks
    assert impose(engine, case("a5_8p.pdf"), tmp_path).sides == 4
    assert isolation.warm_child() == (replacement, 1)


def test_the_time_limit_fails_its_job_and_the_next_one_gets_a_fresh_child(warm, engine, tmp_path, case):
    long_job = labelled_pdf(tmp_path / "long.pdf", 600)
    pid, _ = isolation.warm_child()
    with pytest.raises(TimeLimitExceeded, match="time limit of 0.05 s and was killed"):
        impose(engine, long_job, tmp_path, "long-plate.pdf", time_limit_s=0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert impose(engine, case("a5_8p.pdf"), tmp_path).sides == 4
    new_pid, jobs = isolation.warm_child()
    assert new_pid != pid and jobs == 1


def test_the_memory_limit_fails_its_job_and_the_next_one_gets_a_fresh_child(warm, settings, tmp_path, case):
    # a content budget above what the memory budget holds, as in test_imp_limits: RLIMIT_AS stops the bomb
    engine = PikepdfEngine(settings.model_copy(update={"engine_memory_limit_bytes": 400 * 1024 * 1024,
                                                       "max_decoded_bytes_per_stream": 1024**3}))
    bomb = decompression_bomb(tmp_path / "bomb.pdf", 768 * 1024 * 1024)
    pid, _ = isolation.warm_child()
    with pytest.raises(MemoryLimitExceeded):
        impose(engine, bomb, tmp_path, "bomb-plate.pdf")
    first_after, jobs = isolation.warm_child()
    assert first_after != pid and jobs == 0  # a child whose allocation failed never serves again
    assert impose(engine, case("a5_8p.pdf"), tmp_path).sides == 4
    assert isolation.warm_child() == (first_after, 1)


def test_a_child_is_replaced_after_its_job_budget(settings, case, tmp_path):
    isolation.keep_warm(isolation.WarmPolicy(max_jobs=2, max_rss_bytes=512 * 1024**2))
    try:
        engine = PikepdfEngine(settings)
        pid, _ = isolation.warm_child()
        impose(engine, case("a5_8p.pdf"), tmp_path, "1.pdf")
        assert isolation.warm_child() == (pid, 1)
        impose(engine, case("a5_8p.pdf"), tmp_path, "2.pdf")
        replacement, jobs = isolation.warm_child()
        assert replacement != pid and jobs == 0
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        isolation.stop_warm()


def test_a_child_above_its_memory_bound_is_replaced(settings, case, tmp_path):
    isolation.keep_warm(isolation.WarmPolicy(max_jobs=100, max_rss_bytes=1))  # every child is above 1 byte
    try:
        engine = PikepdfEngine(settings)
        pid, _ = isolation.warm_child()
        impose(engine, case("a5_8p.pdf"), tmp_path)
        replacement, jobs = isolation.warm_child()
        assert replacement != pid and jobs == 0
    finally:
        isolation.stop_warm()


def test_the_next_tenants_plate_holds_nothing_of_the_job_before(warm, engine, tmp_path):
    """Two jobs in one child: the second plate carries none of the first input's content (its
    unique text), and the second job's child held no document of the first (it would have exited)."""
    first, second = tmp_path / "first.pdf", tmp_path / "second.pdf"
    for path, marker in ((first, b"TENANT-A-SECRET"), (second, b"TENANT-B-OWN")):
        with pikepdf.new() as pdf:
            for _ in range(4):
                page = pdf.add_blank_page(page_size=(420, 595))
                page.obj.Contents = pdf.make_stream(b"BT /F1 12 Tf 20 20 Td (" + marker + b") Tj ET")
                page.obj.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=pikepdf.Dictionary(
                    Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1, BaseFont=pikepdf.Name.Helvetica)))
            pdf.save(path, compress_streams=False)
    pid, _ = isolation.warm_child()
    impose(engine, first, tmp_path, "a.pdf")
    impose(engine, second, tmp_path, "b.pdf")
    assert isolation.warm_child() == (pid, 2)
    with pikepdf.open(tmp_path / "b.pdf") as plate:
        streams = b"".join(obj.read_bytes() for obj in plate.objects if isinstance(obj, pikepdf.Stream))
    assert b"TENANT-B-OWN" in streams and b"TENANT-A-SECRET" not in streams
