"""``make run KEEP=1`` stops on SIGINT or SIGTERM sent to make itself (issue 34, item 5).

GNU make passes SIGTERM on to its children but not SIGINT; :func:`devstack.stack.relay_make_signals`
(called by ``devstack.demo``'s main) sees make take the signal and interrupts the demo. Driven here
through a real ``make`` whose recipe starts a process that does what the demo's main does about
signals (the demo itself would start the whole stack and write ``.run/`` of this checkout)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devstack.stack import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None or not sys.platform.startswith("linux"),
                                reason="needs GNU make and /proc")

#: The recipe's process: the demo's signal handling (handlers, then the relay), a ready line, and
#: a clean-stop line when interrupted.
RECIPE = """
import signal, sys, time
from devstack.stack import relay_make_signals
def interrupted(signum, frame):
    raise KeyboardInterrupt
signal.signal(signal.SIGINT, interrupted)
signal.signal(signal.SIGTERM, interrupted)
relay = relay_make_signals(interval_s=0.05)
try:
    print("ready relay=%s" % (relay is not None), flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped cleanly", flush=True)
    sys.exit(1)
"""


def _make(tmp_path: Path) -> subprocess.Popen:
    (tmp_path / "stand_in.py").write_text(RECIPE)
    (tmp_path / "Makefile").write_text(f"run:\n\t{sys.executable} stand_in.py $(if $(KEEP),--keep)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # make as a supervisor starts it: its own process, SIGINT not ignored
    proc = subprocess.Popen(["make", "--no-print-directory", "run", "KEEP=1"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("ready"):
            assert line.strip() == "ready relay=True", line
            return proc
    proc.kill()
    raise AssertionError("the recipe never became ready")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_sent_to_make_alone_stops_the_recipe_cleanly_and_make_exits(tmp_path, sig):
    proc = _make(tmp_path)
    started = time.monotonic()
    os.kill(proc.pid, sig)  # make alone, not its process group
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"make ignored {sig.name} sent to it: still running after 10 s") from None
    assert "stopped cleanly" in out, out
    assert proc.returncode != 0 and time.monotonic() - started < 5


def test_the_relay_stays_off_when_the_parent_is_not_make():
    from devstack.stack import relay_make_signals

    assert relay_make_signals() is None  # pytest's parent is no make
