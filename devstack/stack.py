"""Starting and stopping the service's processes (``make run`` and the integration tests).

:class:`ManagedProcess` runs one command in its own session (process group) with its output in a
log file, waits for a "ready" line, and stops it with SIGTERM, then SIGKILL of the whole group,
so a celery worker's prefork children never outlive it. On Linux the process is also asked to end
(SIGTERM, through ``prctl(PR_SET_PDEATHSIG)``) when the process that started it dies, even by
SIGKILL, so a killed ``make run`` or test run leaves no worker polling a vanished endpoint. The
``*_command`` functions spell the command lines of docs/design.md §7 (workers, beat, Flower);
:class:`ReceiverProcess` starts the demo's webhook receiver (:mod:`imposition.webhooks.receiver`).
:class:`Supervisor` (``make run``) restarts a process that died or, a worker, stopped polling its
queue, and fails the run with its last log lines once it keeps failing. :class:`RunDirectory`
gives one run at a time a run directory (``.run/``): a second run refuses, naming the first.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import IO
from dataclasses import dataclass
from pathlib import Path

from imposition.common.tenancy import validate_tenant_id
from imposition.webhooks.receiver import CONFIRMATIONS_PATH, HOOK_PATH, READY_MARKER

REPO = Path(__file__).resolve().parent.parent

#: ``prctl(2)`` option: the signal the calling process gets when its parent *thread* ends.
_PR_SET_PDEATHSIG = 1


#: The fatal signals GNU make does not pass on to its children (SIGTERM it does): on one of them it
#: stops catching that signal and waits for its children.
MAKE_UNRELAYED_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def caught_signals(pid: int) -> frozenset[int] | None:
    """The signals process ``pid`` catches (has a handler for), from ``/proc/<pid>/status``
    (``SigCgt``: signal n is bit n − 1); None where that cannot be read (not Linux, gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    mask = int(line.split()[1], 16)
                    return frozenset(n for n in range(1, 65) if mask & (1 << (n - 1)))
    except (OSError, ValueError):
        return None
    return None


def relay_make_signals(*, interval_s: float = 0.2) -> threading.Thread | None:
    """When this process's parent is GNU make (``make run``): a daemon thread that sends this
    process SIGINT once make has received SIGINT, SIGHUP or SIGQUIT; None otherwise.

    Why: GNU make passes SIGTERM on to its children, but not SIGINT: it expects a terminal's Ctrl-C
    to reach the whole foreground process group. On a fatal signal it sets the signal back to its
    default action, waits for its children, then dies of it, so a SIGINT sent to make alone (a
    supervisor, a CI job, ``kill -INT``) left the demo running and make waiting for ever. That reset
    shows in ``/proc/<make>/status`` (``SigCgt``): the thread polls it every ``interval_s`` seconds and,
    once a signal make caught is caught no longer, interrupts this process (the demo's clean stop).
    A make started with SIGINT ignored (a background job of a non-interactive shell) never sees a
    SIGINT at all: there is nothing to relay; SIGTERM still reaches the demo through make.
    """
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/comm", encoding="utf-8") as comm:
            name = comm.read().strip()
    except OSError:
        return None
    watched = (caught_signals(parent) or frozenset()) & set(MAKE_UNRELAYED_SIGNALS)
    if name not in ("make", "gmake") or not watched:
        return None

    def watch() -> None:
        while os.getppid() == parent:
            caught = caught_signals(parent)
            if caught is None or not watched <= caught:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(interval_s)

    thread = threading.Thread(target=watch, name="make-signal-relay", daemon=True)
    thread.start()
    return thread


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGTERM when this process dies, or None where
    that cannot be promised: not Linux, or not the main thread (the kernel signals when the *thread*
    that forked ends, which for a worker thread may be long before this process ends).

    The libc function is resolved here, in the parent, so the child runs only the call itself between
    fork and exec. If this process died in that window (the child is already orphaned), the child
    ends itself rather than run unwatched.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class RunDirectoryTaken(RuntimeError):
    """Another live process holds the run directory; the message names it (pid, how it was started,
    when, how to stop it)."""


class RunDirectory:
    """A run directory (``make run``'s ``.run/``) held by one process at a time.

    :meth:`claim` takes an exclusive ``flock(2)`` on ``<dir>/run.lock`` and writes who holds it
    (pid, command line, start time, how to stop it) into that file. The kernel drops the lock when
    the holder exits, however it ends (SIGKILL included), so a crashed run never blocks the next.
    A second claim while the holder lives raises :class:`RunDirectoryTaken` naming it, before
    the second run has touched anything in the directory: its logs, poll stamps, ``env`` file and
    Prometheus data stay the first run's.

    Args:
        path: the directory (created if missing).
    """

    LOCK_NAME = "run.lock"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock_file: IO[str] | None = None

    @property
    def lock_path(self) -> Path:
        return self.path / self.LOCK_NAME

    def claim(self, *, started_by: str, stop_hint: str) -> "RunDirectory":
        """Hold the directory until :meth:`release` or this process's exit.

        Args:
            started_by: how this run was started, as a person would retype it (``make run KEEP=1``).
            stop_hint: how to stop this run, for the message a second run prints.

        Raises:
            RunDirectoryTaken: another live process holds it (nothing in the directory changed).
        """
        self.path.mkdir(parents=True, exist_ok=True)
        lock_file = open(self.lock_path, "a+", encoding="utf-8")  # held open for the run: the flock lives with it
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = lock_file.read()
            lock_file.close()
            raise RunDirectoryTaken(self._taken_message(holder)) from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(json.dumps({"pid": os.getpid(), "started_by": started_by, "started_at": time.time(),
                                    "cwd": os.getcwd(), "stop": stop_hint}))
        lock_file.flush()
        self._lock_file = lock_file
        return self

    def release(self) -> None:
        """Drop the claim (the lock file stays; its content is only read while it is locked)."""
        if self._lock_file is not None:
            self._lock_file.close()  # closing the descriptor drops the flock
            self._lock_file = None

    def _taken_message(self, holder_text: str) -> str:
        try:
            holder = json.loads(holder_text)
        except ValueError:  # the holder is between taking the lock and writing its name
            return (f"another run is starting in {self.path} (its lock {self.lock_path} is held); "
                    "wait for it to finish, or stop it, then run again")
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["started_at"]))
        return (f"another run holds {self.path}: pid {holder['pid']}, started {started} by "
                f"`{holder['started_by']}` in {holder['cwd']}. Two runs in one directory would delete "
                f"each other's env file, logs and poll stamps. Stop it first: {holder['stop']}. "
                f"Or use its stack: `. {self.path / 'env'}`")


def how_this_run_started() -> str:
    """This process's command line as a person would retype it: ``make run KEEP=1`` when its parent
    is GNU make (read from ``/proc``), else ``python -m devstack.demo …``."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
            words = [w.decode(errors="replace") for w in cmdline.read().split(b"\0") if w]
    except OSError:
        words = []
    if words and Path(words[0]).name in ("make", "gmake"):
        return shlex.join(["make", *words[1:]])
    return shlex.join(["python", "-m", "devstack.demo", *sys.argv[1:]])


#: Set by ``make run``'s stop signal handler before it raises KeyboardInterrupt. Python swallows an
#: exception raised inside an at-fork handler ("Exception ignored in: <function _releaseLock …>"),
#: so a SIGTERM that lands while the run forks a process would be lost; :func:`wait_for` and the
#: demo's supervision check raise it again from here. Cleared by whoever handles the interrupt.
STOP_REQUESTED = threading.Event()


def raise_if_stop_requested() -> None:
    """Raise KeyboardInterrupt if a stop signal arrived (:data:`STOP_REQUESTED`) and was not handled."""
    if STOP_REQUESTED.is_set():
        raise KeyboardInterrupt


def wait_for(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value and return that value.

    Raises:
        TimeoutError: ``timeout_s`` seconds passed first.
        KeyboardInterrupt: a stop signal arrived meanwhile (:data:`STOP_REQUESTED`).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        raise_if_stop_requested()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class ManagedProcess:
    """One child process in its own process group, logging to ``log_path``.

    Args:
        cmd: the argument list (never a shell string).
        log_path: file that receives stdout and stderr (emptied first: its "ready" line must be new).
        env: extra environment variables on top of this process's environment.
        ready_marker: text whose appearance in the log means "ready" (None: don't wait).
        cwd: its working directory (default: the repository; ``python -m`` puts it on the path).
        ready_timeout_s: how long to wait for it.

    Raises:
        RuntimeError: the process exited before it was ready.
        TimeoutError: it did not get ready in time (it is stopped first; so it is on any exception,
            KeyboardInterrupt included, raised while it starts).
    """

    def __init__(self, cmd: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
                 ready_marker: str | None = None, ready_timeout_s: float = 60.0, cwd: Path | None = None) -> None:
        self.cmd = list(cmd)
        self.cwd = cwd or REPO
        self.log_path = log_path
        self.env = dict(env or {})
        self.ready_marker = ready_marker
        self.ready_timeout_s = ready_timeout_s
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            self.cmd, cwd=self.cwd, env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_parent_death_signal(),
        )
        if ready_marker:
            try:
                wait_for(lambda: ready_marker in self.log() or self.proc.poll() is not None, ready_timeout_s,
                         what=f"{' '.join(self.cmd[:6])} to be ready")
            except BaseException:  # a timeout, or Ctrl-C while it starts: nobody holds it yet to stop it
                self.stop()
                raise
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"{' '.join(self.cmd)} exited with {self.proc.returncode}:\n{self.log()[-4000:]}")

    @property
    def pid(self) -> int:
        """PID of the main process."""
        return self.proc.pid

    def log(self) -> str:
        """Everything the process wrote so far."""
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the main process only."""
        os.kill(self.proc.pid, sig)

    def terminate(self) -> None:
        """Ask the process to stop (SIGTERM: a warm shutdown for celery, which finishes its current
        tasks) without waiting; :meth:`stop` then waits and kills what is left."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (a warm shutdown for celery), up to ``timeout_s`` seconds for the process to exit,
        then SIGKILL of the whole process group."""
        self.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever is left of the group: a lingering main process, orphaned pool children
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if not self._log.closed:
            self._log.close()


    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of its log."""
        return "\n".join(self.log().splitlines()[-lines:])

    def restarted(self) -> "ManagedProcess":
        """Stop this process (if it still runs), keep its log as ``<log>.<n>`` and start the same
        command again with the same environment; returns the new process (ready, if it had a marker).

        Raises:
            RuntimeError, TimeoutError: as the constructor.
        """
        self.stop()
        n = 1
        while self.log_path.with_name(f"{self.log_path.name}.{n}").exists():
            n += 1
        self.log_path.rename(self.log_path.with_name(f"{self.log_path.name}.{n}"))
        return type(self)(self.cmd, self.log_path, env=self.env, ready_marker=self.ready_marker,
                          ready_timeout_s=self.ready_timeout_s, cwd=self.cwd)


class SupervisionFailed(RuntimeError):
    """A supervised process kept failing (or may not be restarted); the message names it and
    carries its last log lines."""


@dataclass
class Supervised:
    """One process under a :class:`Supervisor`: its name, the process, the poll stamp it sets
    (a consumer; None for others), how many restarts it may have, and has had."""

    name: str
    process: ManagedProcess
    poll_stamp: Path | None = None
    max_restarts: int = 0
    restarts: int = 0


def poll_stale_after_s(settings) -> float:
    """Seconds without a poll after which a consumer is said to have stopped consuming
    (:attr:`imposition.common.clocks.Clocks.poll_stale_after_s`, which the workers' /healthz reads too)."""
    from imposition.common.clocks import Clocks  # noqa: PLC0415

    return Clocks.from_settings(settings).poll_stale_after_s


class Supervisor:
    """Watches processes from a thread: one that exited, or (a consumer) whose poll stamp is older
    than ``stale_after_s``, is named through ``say`` with its last log lines and restarted, at most
    its ``max_restarts`` times; past that, :attr:`failure` is set (a :class:`SupervisionFailed`) and
    the supervisor stops acting. ``on_restart(old, new)`` lets the owner replace the process it
    holds.

    Args:
        say: prints one progress line.
        stale_after_s: see :func:`poll_stale_after_s`.
        interval_s: seconds between checks.
    """

    def __init__(self, say: Callable[[str], None], *, stale_after_s: float, interval_s: float,
                 on_restart: Callable[[ManagedProcess, ManagedProcess], None] | None = None) -> None:
        self.say = say
        self.stale_after_s = stale_after_s
        self.interval_s = interval_s
        self.on_restart = on_restart
        self.watched: list[Supervised] = []
        self.failure: SupervisionFailed | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def add(self, name: str, process: ManagedProcess, *, poll_stamp: Path | None = None,
            max_restarts: int = 0) -> None:
        """Watch ``process`` from now on."""
        with self._lock:
            self.watched.append(Supervised(name, process, poll_stamp, max_restarts))

    def start(self) -> "Supervisor":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (before the processes are stopped, so a stop is not taken for a death)."""
        self._stop.set()
        with self._lock:  # a restart in progress finishes first
            pass
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.interval_s + 1)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                if self._stop.is_set() or self.failure is not None:
                    return
                self.check()

    def problem(self, item: Supervised) -> str | None:
        """Why ``item`` needs a restart, or None: it exited, or it stopped polling."""
        code = item.process.proc.poll()
        if code is not None:
            return f"exited with status {code}"
        if item.poll_stamp is not None:
            try:
                age_s = time.time() - item.poll_stamp.stat().st_mtime
            except FileNotFoundError:
                age_s = time.time() - item.process.started_at
            if age_s > self.stale_after_s:
                return f"has not polled its queue for {age_s:.0f} s (bound {self.stale_after_s:g} s)"
        return None

    def check(self) -> None:
        """One pass over every watched process (see the class docstring)."""
        for item in self.watched:
            why = self.problem(item)
            if why is None:
                continue
            tail = item.process.tail()
            if item.restarts >= item.max_restarts:
                self.failure = SupervisionFailed(
                    f"{item.name} {why}, after {item.restarts} restart(s); its last log lines "
                    f"({item.process.log_path}):\n{tail}")
                self.say(f"• SUPERVISOR: {self.failure}")
                return
            item.restarts += 1
            self.say(f"• supervisor: {item.name} {why}; restarting it ({item.restarts}/{item.max_restarts}). "
                     f"Its last log lines:\n" + "\n".join(f"    {line}" for line in tail.splitlines()[-8:]))
            old = item.process
            try:
                item.process = old.restarted()
            except (RuntimeError, TimeoutError) as exc:
                self.failure = SupervisionFailed(f"{item.name} {why} and could not be restarted: {exc}")
                self.say(f"• SUPERVISOR: {self.failure}")
                return
            if item.poll_stamp is not None:
                item.poll_stamp.unlink(missing_ok=True)
            if self.on_restart is not None:
                self.on_restart(old, item.process)
            self.say(f"• supervisor: {item.name} is running again")


def stop_all(processes: Sequence[ManagedProcess], timeout_s: float = 20.0) -> None:
    """Stop ``processes`` together: SIGTERM to all at once, then each gets what is left of one shared
    ``timeout_s`` (seconds) before its process group is killed; so N warm shutdowns take as long as
    the slowest, not their sum."""
    deadline = time.monotonic() + timeout_s
    for proc in processes:
        proc.terminate()
    for proc in processes:
        proc.stop(max(0.0, deadline - time.monotonic()))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice)."""
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def celery_command(*args: str, app: str = "tasks") -> list[str]:
    """``python -m celery -A <app> <args…>`` with this interpreter."""
    return [sys.executable, "-m", "celery", "-A", app, *args]


def worker_command(queue: str, concurrency: int, node_name: str, *, app: str = "tasks",
                   loglevel: str = "info") -> list[str]:
    """A worker consuming ``queue`` (docs/design.md §7). Gossip, mingle and broker heartbeats are off:
    they need broadcast queues, which the SQS setup does not have."""
    return celery_command(
        "worker", "-Q", queue, "-c", str(concurrency), "-n", f"{node_name}@%h", "-l", loglevel,
        "--without-gossip", "--without-mingle", "--without-heartbeat", app=app,
    )


def beat_command(schedule_path: Path, *, app: str = "tasks") -> list[str]:
    """``celery beat`` with its schedule file at ``schedule_path`` (one per cluster)."""
    return celery_command("beat", "-l", "info", "-s", str(schedule_path), "--pidfile=", app=app)


#: Debian's Prometheus server (package ``prometheus``), for ``make run``.
PROMETHEUS_BINARY = "/usr/bin/prometheus"


def prometheus_command(config_path: Path, data_dir: Path, port: int, *, retention: str) -> list[str]:
    """A Prometheus server on 127.0.0.1:``port`` with its configuration, its data in ``data_dir``,
    kept for ``retention`` (a Prometheus duration: the second-licence alert reads weeks)."""
    return [PROMETHEUS_BINARY, f"--config.file={config_path}", f"--storage.tsdb.path={data_dir}",
            f"--storage.tsdb.retention.time={retention}", f"--web.listen-address=127.0.0.1:{port}"]


#: What each process prints once it is ready.
WORKER_READY = "ready."
BEAT_READY = "beat: Starting"
FLOWER_READY = "Visit me at"
PROMETHEUS_READY = "Server is ready to receive web requests."


def flower_command() -> list[str]:
    """``imposition process run flower`` with this interpreter (:mod:`tasks.processes`): Flower on the
    events side channel behind its login, listening where the settings in its environment say
    (``IMPOSITION_FLOWER_ADDRESS``, ``IMPOSITION_FLOWER_PORT``); :func:`flower_login` makes the login."""
    return [sys.executable, "-m", "imposition.cli.main", "process", "run", "flower"]


def flower_login(port: int, user: str = "operator") -> tuple[dict[str, str], str]:
    """A local Flower's settings: 127.0.0.1:``port`` and a new login for ``user`` sealed with the local
    stack's KMS key (:func:`imposition.observability.flower.new_login`); returns (its environment, the
    password)."""
    from imposition.observability.flower import CIPHERTEXT_ENV, new_login  # noqa: PLC0415 - KMS when started

    ciphertext, password = new_login(user)
    return {"IMPOSITION_FLOWER_ADDRESS": "127.0.0.1", "IMPOSITION_FLOWER_PORT": str(port),
            CIPHERTEXT_ENV: ciphertext}, password


class ReceiverProcess:
    """A ``python -m imposition.webhooks.receiver`` child process (for ``make run`` and the tests).

    Args:
        log_path: file for its stdout and stderr; the first line is the port.
        port: port to bind (0: a free one, read back from the log).
        env: extra environment variables.

    Raises:
        RuntimeError, TimeoutError: it exited or did not get ready (see :class:`ManagedProcess`).
    """

    def __init__(self, log_path, *, port: int = 0, env: dict[str, str] | None = None) -> None:
        self.process = ManagedProcess([sys.executable, "-m", "imposition.webhooks.receiver", "--port", str(port)], log_path,
                                      env=env, ready_marker=READY_MARKER, ready_timeout_s=30)
        self.port = int(self.process.log().splitlines()[0])

    def url(self, tenant_id: str) -> str:
        """The hook URL of ``tenant_id`` on this receiver."""
        return f"http://127.0.0.1:{self.port}{HOOK_PATH}{validate_tenant_id(tenant_id)}"

    def confirmations(self) -> dict:
        """The receiver's ``GET /confirmations`` (see module docstring)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{CONFIRMATIONS_PATH}", timeout=5) as answer:
            return json.load(answer)

    def tenant_counts(self, tenant_id: str) -> dict:
        """``tenant_id``'s entry of :meth:`confirmations` (zeros if the receiver never heard of it)."""
        empty = {"accepted": 0, "confirmed": 0, "rejected": 0, "jobs": {}}
        return self.confirmations()["tenants"].get(tenant_id, empty)

    def stop(self) -> None:
        """Stop the process."""
        self.process.stop()
