"""Real processes for integration tests: celery workers and beat, started and stopped cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; return it, or raise AssertionError."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class CeleryProcess:
    """A ``celery -A <app> worker|beat`` subprocess with its own log file.

    Args:
        args: arguments after ``celery -A <app>`` (e.g. ``["worker", "-Q", "imposition"]``).
        log_path: where its stdout and stderr go.
        env: extra environment variables.
        app: the Celery app module (default ``tasks``).
        ready_marker: a log line fragment that says the process is ready (None: do not wait).
    """

    def __init__(self, args: list[str], log_path: Path, *, env: dict[str, str] | None = None,
                 app: str = "tasks", ready_marker: str | None = "ready.", ready_timeout_s: float = 60) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")
        full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app, *args],
            cwd=REPO, env=full_env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        if ready_marker:
            wait_for(lambda: ready_marker in self.log() or self.proc.poll() is not None, ready_timeout_s,
                     what=f"celery {args[0]} to be ready")
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery {args} exited with {self.proc.returncode}:\n{self.log()[-4000:]}")

    def log(self) -> str:
        """Everything the process wrote so far."""
        return self.log_path.read_text(errors="replace")

    def children(self) -> list[int]:
        """PIDs of the prefork pool children."""
        import psutil

        return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=False)]

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the main process only."""
        os.kill(self.proc.pid, sig)

    def stop(self, timeout_s: float = 20) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL of the whole process group if it lingers."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        else:
            try:  # orphaned pool children of a SIGKILLed main process
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()


def start_worker(tmp_path: Path, *, queue: str = "imposition", concurrency: int = 8, name: str = "imposer",
                 env: dict[str, str] | None = None, app: str = "tasks") -> CeleryProcess:
    """A real ``celery worker`` consuming ``queue`` (gossip, mingle and heartbeats off: SQS has no fanout)."""
    return CeleryProcess(
        ["worker", "-Q", queue, "-c", str(concurrency), "-n", f"{name}@%h", "-l", "info",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        tmp_path / f"{name}.log", env=env, app=app,
    )


def start_beat(tmp_path: Path, *, env: dict[str, str] | None = None) -> CeleryProcess:
    """A real ``celery beat`` with its schedule file under ``tmp_path``."""
    return CeleryProcess(
        ["beat", "-l", "info", "-s", str(tmp_path / "beat-schedule"), "--pidfile", ""],
        tmp_path / "beat.log", env=env, ready_marker="beat: Starting",
    )
