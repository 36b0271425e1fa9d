"""Real processes for integration tests: celery workers and beat (see :mod:`control.stack`)."""

from __future__ import annotations

from pathlib import Path

import psutil

from control.stack import (
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

    def children(self) -> list[int]:
        """PIDs of the prefork pool children."""
        return [c.pid for c in psutil.Process(self.pid).children(recursive=False)]


def start_worker(tmp_path: Path, *, queue: str = "imposition", concurrency: int = 8, name: str = "imposer",
                 env: dict[str, str] | None = None, app: str = "tasks") -> CeleryProcess:
    """A real ``celery worker`` consuming ``queue``, logging to ``tmp_path/<name>.log``."""
    return CeleryProcess(worker_command(queue, concurrency, name, app=app), tmp_path / f"{name}.log",
                         env=env, ready_marker=WORKER_READY)


def start_beat(tmp_path: Path, *, env: dict[str, str] | None = None, app: str = "tasks") -> CeleryProcess:
    """A real ``celery beat`` with its schedule file under ``tmp_path``."""
    return CeleryProcess(beat_command(tmp_path / "beat-schedule", app=app), tmp_path / "beat.log",
                         env=env, ready_marker=BEAT_READY)
