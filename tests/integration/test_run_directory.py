"""Two ``make run`` in one checkout cannot damage each other (issue 42, §2).

A plain ``make run`` started while a ``make run KEEP=1`` stack was up used to delete the kept stack's
``.run/env``, rotate its worker logs and share its poll stamps (so the kept stack's supervisor killed
a healthy worker). Now one run at a time holds the run directory (:class:`devstack.stack.RunDirectory`)
and a second refuses before it touches anything, naming the first. Driven through the real entry
point, ``python -m devstack.demo``, in a directory of the test's own (``--run-dir``), never this
checkout's ``.run/``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devstack.stack import REPO, RunDirectory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs flock(2) and /proc")

DEMO = [sys.executable, "-m", "devstack.demo"]

#: A stand-in for a kept stack: it claims the directory as the demo's main does, then writes the
#: files a kept stack has there, and waits.
HOLDER = """
import sys, time
from pathlib import Path
from devstack.stack import RunDirectory
run_dir = Path(sys.argv[1])
claim = RunDirectory(run_dir).claim(started_by="make run KEEP=1", stop_hint="kill me")  # held while referenced
(run_dir / "env").write_text("export AWS_ENDPOINT_URL=http://127.0.0.1:1\\n")
(run_dir / "worker-imposition.log").write_text("ready.\\n")
(run_dir / "worker-imposition.polled").write_text("")
print("holding", flush=True)
time.sleep(120)
"""


def _spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _read_until(proc: subprocess.Popen, marker: str, timeout_s: float) -> str:
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"{marker!r} never came; output:\n{''.join(seen)}")


def _second_run(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*DEMO, "--run-dir", str(run_dir)], cwd=REPO, capture_output=True, text=True, timeout=60)


def _snapshot(run_dir: Path) -> dict[str, tuple[int, int, bytes]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in run_dir.iterdir()}


def test_a_second_run_refuses_naming_the_first_and_leaves_its_files_alone(tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        _read_until(holder, "holding", 30)
        before = _snapshot(run_dir)
        second = _second_run(run_dir)
        assert second.returncode == 1, second
        error = second.stderr.strip()
        assert error.startswith("Error: another run holds"), error
        assert f"pid {holder.pid}" in error and "`make run KEEP=1`" in error and "kill me" in error, error
        assert str(run_dir / "env") in error, error  # the kept stack's env: use it instead
        assert "starting the local AWS endpoint" not in second.stdout  # it started nothing
        assert _snapshot(run_dir) == before  # env, log and poll stamp: the same files, unchanged
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # a crash: no clean-up of its own
        holder.wait()
    # a holder that died (SIGKILL: no clean-up) leaves no claim behind
    RunDirectory(run_dir).claim(started_by="test", stop_hint="-").release()


def test_two_real_runs_in_one_directory_the_second_refuses_and_the_first_runs_on(tmp_path):
    run_dir = tmp_path / "run"
    first = _spawn([*DEMO, "--keep", "--run-dir", str(run_dir)])
    try:
        _read_until(first, "starting the local AWS endpoint", 60)
        second = _second_run(run_dir)
        assert second.returncode == 1, second
        error = second.stderr.strip()
        assert f"pid {first.pid}" in error, error
        assert f"`python -m devstack.demo --keep --run-dir {run_dir}`" in error, error
        assert f"kill {first.pid}" in error and "Ctrl-C" in error, error
        assert first.poll() is None  # the first run goes on
        _read_until(first, "provisioned from the template", 90)  # its stack came up after the refusal
    finally:
        os.kill(first.pid, signal.SIGTERM)  # its documented clean stop
        try:
            out, _ = first.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(first.pid, signal.SIGKILL)  # never leave a stack behind
            first.wait()
            raise
    assert "stopped every process this run started" in out, out
    assert not (run_dir / "env").exists()
    RunDirectory(run_dir).claim(started_by="test", stop_hint="-").release()  # the first released it
