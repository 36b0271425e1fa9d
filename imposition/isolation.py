"""Running an engine in a child process that a runaway PDF cannot turn against the worker.

The child starts with ``subprocess`` (a Celery prefork child is daemonic and may not use
``multiprocessing``) in its own session, so it and everything it starts form one process group. A
small trampoline (:mod:`imposition._limits`) sets its address-space and CPU limits before ``exec``:
no ``preexec_fn`` runs in the forked worker, which is unsafe once the worker has threads (the
lease heartbeat). The parent waits with a wall-clock deadline and a cancel event; on either it kills
the whole process group with SIGKILL.
"""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import EngineCancelled, TimeLimitExceeded

#: The trampoline that sets limits, then execs the command.
LIMITS_SCRIPT = Path(__file__).with_name("_limits.py")
#: Longest wait between two looks at the cancel event and the deadline (s).
POLL_INTERVAL_S = 0.02
#: Headroom of the CPU-time backstop over the wall-clock limit (s).
CPU_BACKSTOP_MARGIN_S = 10
#: How much of a child's log is kept for error messages (bytes).
LOG_TAIL_BYTES = 4000


@dataclass(frozen=True)
class ChildExit:
    """How a child process ended.

    Attributes:
        returncode: its exit status; negative: killed by that signal (``-9`` is SIGKILL).
        log_tail: the end of what it wrote to stdout and stderr.
        duration_s: wall time from start to exit.
    """

    returncode: int
    log_tail: str
    duration_s: float


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_descriptor(process: subprocess.Popen) -> int | None:
    """A process file descriptor that becomes readable when ``process`` exits (Linux ≥ 5.3,
    pidfd_open(2)), or None where there is none (the wait then polls)."""
    try:
        return os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        return None


def _wait(process: subprocess.Popen, exited: int | None, timeout_s: float) -> int | None:
    """The exit status of ``process`` once it exits within ``timeout_s``, else None.

    With a process descriptor the wait wakes the moment the child exits; without one,
    ``Popen.wait`` polls with growing sleeps (up to the timeout) and may notice the exit late.
    """
    if exited is None:
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
    select.select([exited], [], [], timeout_s)
    return process.poll()


def _tail(log_path: Path) -> str:
    try:
        with log_path.open("rb") as handle:
            handle.seek(max(0, log_path.stat().st_size - LOG_TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _import_path() -> str:
    """The import path of a module child, ``os.pathsep``-separated: the directory holding this package
    (an editable install finds it through a ``site`` hook, and the child starts without ``site``), then
    this process's ``sys.path`` (``''``, the working directory, spelled out)."""
    package_root = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join([package_root, *(entry or os.getcwd() for entry in sys.path)])


def run_limited(
    command: Sequence[str],
    *,
    time_limit_s: float,
    memory_limit_bytes: int | None,
    log_path: Path,
    deadline: float | None = None,
    cancel: threading.Event | None = None,
    env: dict[str, str] | None = None,
    module: str | None = None,
) -> ChildExit:
    """Run ``command`` (an argument list, never a shell string) under limits and wait for it.

    Args:
        command: the program and its arguments; with ``module``, the module's arguments.
        time_limit_s: wall-clock limit in seconds; past it the process group is killed.
        deadline: ``time.monotonic()`` value at which the limit runs out, when the limit covers more
            than this child (default: ``time_limit_s`` from now).
        memory_limit_bytes: address-space limit (RLIMIT_AS) of the child, or None for none.
        log_path: file that receives the child's stdout and stderr (a file, not a pipe: a chatty
            child can never block on a full pipe).
        cancel: when set, the process group is killed at once.
        env: the child's environment (default: the parent's).
        module: a Python module to run as the child instead of a program: the limits trampoline runs
            it in its own process (one interpreter start, no ``site``), importing from this package's
            directory and this process's ``sys.path``.

    Returns:
        How the child ended (any exit code; the caller maps it).

    Raises:
        TimeLimitExceeded: the wall-clock limit passed.
        EngineCancelled: ``cancel`` was set.
    """
    started = time.monotonic()
    deadline = started + time_limit_s if deadline is None else deadline
    cpu_backstop_s = math.ceil(max(0.0, deadline - started)) + CPU_BACKSTOP_MARGIN_S
    argv = [
        sys.executable, "-I", "-S", str(LIMITS_SCRIPT),
        "--address-space-bytes", str(memory_limit_bytes or 0),
        "--cpu-seconds", str(cpu_backstop_s),
        *(("--module", module, "--sys-path", _import_path()) if module else ()),
        "--", *command,
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env=env,
        )
    exited = _exit_descriptor(process)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if cancel is not None and cancel.is_set():
                _kill_group(process)
                process.wait()
                raise EngineCancelled("the engine was cancelled (the cancel event was set) and its process killed")
            if remaining <= 0:
                _kill_group(process)
                process.wait()
                raise TimeLimitExceeded(
                    f"the engine ran past its time limit of {time_limit_s:g} s and was killed"
                )
            returncode = _wait(process, exited, min(POLL_INTERVAL_S, remaining))
            if returncode is not None:
                break
    except BaseException:
        _kill_group(process)  # an exception in the waiting thread (a Celery time limit) ends the child too
        process.wait()
        raise
    finally:
        if exited is not None:
            os.close(exited)
    _kill_group(process)  # anything the child left running in its group
    if returncode == -signal.SIGXCPU:
        raise TimeLimitExceeded(f"the engine used more than its CPU-time backstop of {cpu_backstop_s} s")
    return ChildExit(returncode, _tail(log_path), time.monotonic() - started)
