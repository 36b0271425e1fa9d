"""Real processes for integration tests: celery workers and beat (see :mod:`devstack.stack`)."""

from __future__ import annotations

from pathlib import Path

import psutil

from devstack.stack import (
    BEAT_READY,
    WORKER_READY,
    ManagedProcess,
    beat_command,
    wait_for as _wait_for,
    worker_command,
)


def wait_for(predicate, timeout_s: float, interval_s: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until truthy and return its value; fail the test on timeout."""
    try:
        return _wait_for(predicate, timeout_s, interval_s, what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


class CeleryProcess(ManagedProcess):
    """A celery worker or beat process of a test."""

    #: The log line that says the process is ready (celery's worker or beat start-up line).
    ready: str = WORKER_READY

    def children(self) -> list[int]:
        """PIDs of the prefork pool children."""
        return [c.pid for c in psutil.Process(self.pid).children(recursive=False)]

    def await_ready(self, timeout_s: float = 60.0) -> "CeleryProcess":
        """Wait until a process started with ``wait=False`` is ready (its :attr:`ready` line in the
        log), as :class:`devstack.stack.ManagedProcess` waits for its ``ready_marker``: stopped and an
        error raised if it exits first or is not ready in time. Returns the process."""
        try:
            wait_for(lambda: self.ready in self.log() or self.proc.poll() is not None, timeout_s,
                     what=f"{' '.join(self.cmd[:6])} to be ready")
        except BaseException:
            self.stop()
            raise
        if self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"{' '.join(self.cmd)} exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
        return self


def _start(cmd: list[str], log_path: Path, env: dict[str, str] | None, ready: str, wait: bool) -> CeleryProcess:
    """Start ``cmd``; with ``wait``, return once ``ready`` is in its log (ManagedProcess's own wait)."""
    process = CeleryProcess(cmd, log_path, env=env, ready_marker=ready if wait else None)
    process.ready = ready
    return process


def start_worker(tmp_path: Path, *, queue: str = "imposition", concurrency: int = 8, name: str = "imposer",
                 env: dict[str, str] | None = None, app: str = "tasks", wait: bool = True) -> CeleryProcess:
    """A real ``celery worker`` consuming ``queue``, logging to ``tmp_path/<name>.log``; ready when this
    returns, or with ``wait=False`` started only (then :meth:`CeleryProcess.await_ready`)."""
    return _start(worker_command(queue, concurrency, name, app=app), tmp_path / f"{name}.log", env,
                  WORKER_READY, wait)


def start_beat(tmp_path: Path, *, env: dict[str, str] | None = None, app: str = "tasks",
               wait: bool = True) -> CeleryProcess:
    """A real ``celery beat`` with its schedule file under ``tmp_path``; ``wait`` as :func:`start_worker`."""
    return _start(beat_command(tmp_path / "beat-schedule", app=app), tmp_path / "beat.log", env, BEAT_READY,
                  wait)
