"""Running an engine in a child process that a runaway PDF cannot turn against the worker.

The child starts with ``subprocess`` (a Celery prefork child is daemonic and may not use
``multiprocessing``) in its own session, so it and everything it starts form one process group. A
small trampoline (:mod:`imposition.engine._limits`) sets its address-space and CPU limits before ``exec``:
no ``preexec_fn`` runs in the forked worker, which is unsafe once the worker has threads (the
lease heartbeat). The parent waits with a wall-clock deadline and a cancel event; on either it kills
the whole process group with SIGKILL.

The engine's own child (:mod:`imposition.engine.child`) is an :class:`EngineChild`: started ahead of its
job, it serves one request at a time, each under the job's limits. Without :func:`keep_warm` every
job gets a fresh child that serves it alone and is then killed (as :func:`run_limited` does). With
:func:`keep_warm` (a worker process) one child stays warm between jobs, for at most
``max_jobs`` jobs and ``max_rss_bytes`` of resident memory; a child that crashed, was killed on a
time limit or a cancel, hit its memory limit or is past either bound is replaced at once by a new,
pre-started one. :func:`prestart` starts the next child early for a process that has other start-up
work to do first (the ``imposition impose`` command). See docs/design.md ("A warm engine child").
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
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
    package_root = str(Path(__file__).resolve().parents[2])
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
) -> ChildExit:
    """Run ``command`` (an argument list, never a shell string) under limits and wait for it.

    Args:
        command: the program and its arguments.
        time_limit_s: wall-clock limit in seconds; past it the process group is killed.
        deadline: ``time.monotonic()`` value at which the limit runs out, when the limit covers more
            than this child (default: ``time_limit_s`` from now).
        memory_limit_bytes: address-space limit (RLIMIT_AS) of the child, or None for none.
        log_path: file that receives the child's stdout and stderr (a file, not a pipe: a chatty
            child can never block on a full pipe).
        cancel: when set, the process group is killed at once.
        env: the child's environment (default: the parent's).

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


@dataclass(frozen=True)
class Served:
    """How one request to an :class:`EngineChild` ended.

    Attributes:
        returncode: None when the child answered and lives on; else its exit status (negative: the
            signal that killed it; ``-9`` is SIGKILL), and it ended without answering.
        log_tail: the end of the request's log (the child's stdout and stderr during the request).
        rss_bytes: the child's resident set after the request (None when it did not answer).
        duration_s: wall time from the request's write to its answer or the child's end.
    """

    returncode: int | None
    log_tail: str
    rss_bytes: int | None
    duration_s: float


class EngineChild:
    """One :mod:`imposition.engine.child` process serving requests one at a time (``--serve``).

    Started at construction (``subprocess.Popen``, its own session, through the limits trampoline
    with ``--module``, which costs an interpreter and the child's imports, ≈ 0.1 s, while the caller
    goes on); each :meth:`run` hands it a request and waits for its answer under the request's time
    limit and cancel event, as :func:`run_limited` waits for a process. The address-space limit is
    applied by the child itself before it reads the first request's input (it can only be lowered,
    so a child serves one limit: :attr:`address_space_bytes`). Not thread-safe: one caller at a time.

    Attributes:
        pid: the child's process id (also its process group's).
        jobs: requests answered so far.
        last_rss_bytes: its resident set after the last answered request (bytes), or None.
        address_space_bytes: the address-space limit of its first request (None before it).
        retired: True once it must not serve again (dead, killed, or flagged by the caller).
    """

    def __init__(self) -> None:
        reply_read, reply_write = os.pipe()
        startup_log, startup_path = tempfile.mkstemp(prefix="imposition-child-", suffix=".log")
        os.unlink(startup_path)  # kept open: what the child writes before its first request
        argv = [
            sys.executable, "-I", "-S", str(LIMITS_SCRIPT), "--address-space-bytes", "0", "--cpu-seconds", "0",
            "--module", "imposition.engine.child", "--sys-path", _import_path(), "--", "--serve", str(reply_write),
        ]
        try:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=startup_log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, pass_fds=(reply_write,),
            )
        except BaseException:
            for fd in (reply_read, startup_log):
                os.close(fd)
            raise
        finally:
            os.close(reply_write)
        self._replies: int | None = reply_read  # end of file once the child is gone
        self._startup_log: int | None = startup_log
        self._pending = b""
        self.pid = self._process.pid
        self.jobs = 0
        self.last_rss_bytes: int | None = None
        self.address_space_bytes: int | None = None
        self.retired = False

    def alive(self) -> bool:
        """True while the process runs and has not been retired."""
        return not self.retired and self._process.poll() is None

    def run(
        self, request_path: Path, *, log_path: Path, time_limit_s: float, memory_limit_bytes: int | None,
        deadline: float | None = None, cancel: threading.Event | None = None,
    ) -> Served:
        """Hand the child the request at ``request_path`` and wait for its answer.

        Args:
            request_path: the request file (:mod:`imposition.engine.child`); its result file is the answer.
            log_path: receives the child's stdout and stderr during this request.
            time_limit_s, deadline, cancel: as for :func:`run_limited`; the CPU-time backstop is the
                time left plus :data:`CPU_BACKSTOP_MARGIN_S`, counted from what the child used before.
            memory_limit_bytes: the address-space limit (RLIMIT_AS) of the child, or None for none.

        Returns:
            How the request ended (:class:`Served`).

        Raises:
            TimeLimitExceeded: the wall-clock limit passed (the child is killed and retired), or the
                CPU-time backstop did.
            EngineCancelled: ``cancel`` was set (the child is killed and retired).
        """
        started = time.monotonic()
        deadline = started + time_limit_s if deadline is None else deadline
        cpu_backstop_s = math.ceil(max(0.0, deadline - started)) + CPU_BACKSTOP_MARGIN_S
        if self.address_space_bytes is None:
            self.address_space_bytes = memory_limit_bytes or 0
        line = json.dumps({"request": str(request_path), "log": str(log_path),
                           "address_space_bytes": memory_limit_bytes or 0, "cpu_seconds": cpu_backstop_s})
        stdin, replies = self._process.stdin, self._replies
        # only kill() closes them, and a killed child is retired: never handed out again
        assert stdin is not None and replies is not None, "run() of a killed child"
        try:
            stdin.write(line.encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died meanwhile: the wait below finds it ended
        try:
            reply = self._wait(replies, deadline, time_limit_s, cancel)
        except BaseException:
            self.kill()  # a timeout, a cancel or an exception in the waiting thread (a Celery time limit)
            raise
        if reply is None:
            tail = _tail(log_path) if log_path.exists() and log_path.stat().st_size else self._startup_tail()
            self.kill()
            returncode = self._process.returncode
            if returncode == -signal.SIGXCPU:
                raise TimeLimitExceeded(f"the engine used more than its CPU-time backstop of {cpu_backstop_s} s")
            return Served(returncode, tail, None, time.monotonic() - started)
        self.jobs += 1
        self.last_rss_bytes = int(reply.get("rss_bytes") or 0)
        return Served(None, _tail(log_path), self.last_rss_bytes, time.monotonic() - started)

    def _startup_tail(self) -> str:
        if self._startup_log is None:
            return ""
        size = os.fstat(self._startup_log).st_size
        return os.pread(self._startup_log, LOG_TAIL_BYTES, max(0, size - LOG_TAIL_BYTES)).decode("utf-8", "replace")

    def _wait(self, replies: int, deadline: float, time_limit_s: float, cancel: threading.Event | None) -> dict | None:
        """The child's answer on the pipe ``replies``, or None when it ended without one."""
        while True:
            newline = self._pending.find(b"\n")
            if newline >= 0:
                reply, self._pending = self._pending[:newline], self._pending[newline + 1:]
                return json.loads(reply)
            if cancel is not None and cancel.is_set():
                raise EngineCancelled("the engine was cancelled (the cancel event was set) and its process killed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeLimitExceeded(f"the engine ran past its time limit of {time_limit_s:g} s and was killed")
            ready, _, _ = select.select([replies], [], [], min(POLL_INTERVAL_S, remaining))
            if ready:
                chunk = os.read(replies, 65536)
                if not chunk:
                    return None  # end of file: the child is gone (it alone holds the pipe's other end)
                self._pending += chunk

    def kill(self) -> None:
        """Kill its process group, reap it and retire it (idempotent)."""
        self.retired = True
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._process.wait()
        self.close_files()

    def close_files(self) -> None:
        """Close the parent's ends of the child's pipes and its start-up log."""
        for name in ("_replies", "_startup_log"):
            fd = getattr(self, name)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, None)
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()


@dataclass(frozen=True)
class WarmPolicy:
    """When a warm child is reused (:func:`keep_warm`).

    Attributes:
        max_jobs: jobs one child serves before it is replaced.
        max_rss_bytes: a child whose resident set is above this after a job is replaced.
    """

    max_jobs: int
    max_rss_bytes: int


_lock = threading.Lock()
#: This process's warm child and its policy, or None: ``{"owner": pid, "policy": WarmPolicy,
#: "child": EngineChild | None (the idle one), "busy": bool}``; a spare from :func:`prestart`.
_warm: dict | None = None
_spare: dict | None = None


def keep_warm(policy: WarmPolicy, *, start_now: bool = True) -> int | None:
    """Keep one warm engine child in this process from now on; returns its pid.

    With ``start_now=False`` the child is started on a background thread (a Celery pool process must
    report itself up within seconds of its fork) and None is returned; a job that comes first starts
    a child of its own, which then stays warm.
    """
    global _warm
    with _lock:
        if _warm is not None and _warm["owner"] == os.getpid() and _warm["child"] is not None:
            _warm["child"].kill()
        warm = _warm = {"owner": os.getpid(), "policy": policy, "child": None, "busy": False}
    if not start_now:
        threading.Thread(target=_start_warm, args=(warm,), daemon=True, name="engine-child-start").start()
        return None
    return _start_warm(warm)


def _start_warm(warm: dict) -> int | None:
    """Start ``warm``'s idle child unless it has one, is busy or is no longer this process's."""
    child = EngineChild()
    with _lock:
        if _warm is warm and warm["child"] is None and not warm["busy"]:
            warm["child"] = child
            return child.pid
    child.kill()
    return None


def stop_warm() -> None:
    """Stop keeping a warm child; the idle one is killed (a busy one when its job ends)."""
    global _warm
    with _lock:
        warm, _warm = _warm, None
    if warm is not None and warm["owner"] == os.getpid() and warm["child"] is not None:
        warm["child"].kill()


def warm_child() -> tuple[int, int] | None:
    """This process's idle warm child as ``(pid, jobs served)``, or None (no warm child kept, or busy)."""
    with _lock:
        if _warm is None or _warm["owner"] != os.getpid() or _warm["child"] is None:
            return None
        return _warm["child"].pid, _warm["child"].jobs


def prestart() -> None:
    """Start the engine child of this process's next job now (it is used once, then killed)."""
    global _spare
    with _lock:
        if _spare is None or _spare["owner"] != os.getpid():
            _spare = {"owner": os.getpid(), "child": EngineChild()}


def drop_spare() -> None:
    """Kill this process's pre-started child if no job took it (a command that failed before its job)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None and spare["owner"] == os.getpid():
        spare["child"].kill()


@contextlib.contextmanager
def engine_child(memory_limit_bytes: int | None) -> Iterator[EngineChild]:
    """An engine child for one job: this process's warm one when it is idle, alive and serves this
    memory limit, else the pre-started spare, else a new one. Afterwards the warm one goes back if
    it may serve again (:class:`WarmPolicy`, not :attr:`EngineChild.retired`), else it is killed and
    a new warm child started; any other child is killed.

    A caller sets ``child.retired = True`` when the job's result says the child must not serve
    again (its memory limit was hit).
    """
    global _spare
    warm = None
    child = None
    with _lock:
        if _warm is not None and _warm["owner"] == os.getpid() and not _warm["busy"]:
            warm = _warm
            idle = warm["child"]
            if idle is not None and idle.alive() and idle.address_space_bytes in (None, memory_limit_bytes or 0):
                child = idle
            elif idle is not None:
                idle.kill()
            warm["busy"], warm["child"] = True, None
        elif _spare is not None and _spare["owner"] == os.getpid():
            child, _spare = _spare["child"], None
    if child is None:
        child = EngineChild()
    try:
        yield child
    finally:
        if warm is None:
            child.kill()
        else:
            policy: WarmPolicy = warm["policy"]
            keep = child.alive() and child.jobs < policy.max_jobs and (child.last_rss_bytes or 0) <= policy.max_rss_bytes
            if not keep:
                child.kill()
            with _lock:
                if _warm is warm:
                    warm["child"], warm["busy"] = (child if keep else EngineChild()), False
                elif keep:
                    child.kill()
