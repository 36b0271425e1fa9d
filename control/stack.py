"""Starting and stopping the service's processes (``make run`` and the integration tests).

:class:`ManagedProcess` runs one command in its own session (process group) with its output in a
log file, waits for a "ready" line, and stops it with SIGTERM, then SIGKILL of the whole group,
so a celery worker's prefork children never outlive it. On Linux the process is also asked to end
(SIGTERM, through ``prctl(PR_SET_PDEATHSIG)``) when the process that started it dies, even by
SIGKILL, so a killed ``make run`` or test run leaves no worker polling a vanished endpoint. The
``*_command`` functions spell the command lines of DESIGN §7 (workers, beat, Flower);
:class:`ReceiverProcess` starts the demo's webhook receiver (:mod:`webhooks.receiver`).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from observability.events import FLOWER_OPTIONS
from service.settings import get_settings
from service.tenancy import validate_tenant_id
from webhooks.receiver import CONFIRMATIONS_PATH, HOOK_PATH, READY_MARKER

REPO = Path(__file__).resolve().parent.parent

#: ``prctl(2)`` option: the signal the calling process gets when its parent *thread* ends.
_PR_SET_PDEATHSIG = 1


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


def wait_for(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value and return that value.

    Raises:
        TimeoutError: ``timeout_s`` seconds passed first.
    """
    deadline = time.monotonic() + timeout_s
    while True:
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
        ready_timeout_s: how long to wait for it.

    Raises:
        RuntimeError: the process exited before it was ready.
        TimeoutError: it did not get ready in time (it is stopped first; so it is on any exception,
            KeyboardInterrupt included, raised while it starts).
    """

    def __init__(self, cmd: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
                 ready_marker: str | None = None, ready_timeout_s: float = 60.0) -> None:
        self.cmd = list(cmd)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            self.cmd, cwd=REPO, env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
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


def stop_all(processes: Sequence[ManagedProcess], timeout_s: float = 20.0) -> None:
    """Stop ``processes`` together: SIGTERM to all at once, then each gets what is left of one shared
    ``timeout_s`` (seconds) before its process group is killed; so N warm shutdowns take as long as
    the slowest, not their sum."""
    deadline = time.monotonic() + timeout_s
    for proc in processes:
        proc.terminate()
    for proc in processes:
        proc.stop(max(0.0, deadline - time.monotonic()))


def celery_command(*args: str, app: str = "tasks") -> list[str]:
    """``python -m celery -A <app> <args…>`` with this interpreter."""
    return [sys.executable, "-m", "celery", "-A", app, *args]


def worker_command(queue: str, concurrency: int, node_name: str, *, app: str = "tasks",
                   loglevel: str = "info") -> list[str]:
    """A worker consuming ``queue`` (DESIGN §7). Gossip, mingle and broker heartbeats are off:
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
PROMETHEUS_READY = "Server is ready to receive web requests."


def flower_command(port: int, *, address: str = "127.0.0.1", app: str = "tasks") -> list[str]:
    """Command line of Flower reading the events side channel: ``celery -A tasks --broker=<events URL>
    flower --port=… --address=… --enable_events=False``.

    Flower's HTTP API (``/api/...``) also needs authentication or ``FLOWER_UNAUTHENTICATED_API=true``
    in its environment (Flower 2.x).

    Raises:
        ValueError: ``events_url`` is empty (no side channel configured).
    """
    url = get_settings().events_url
    if not url:
        raise ValueError("events_url is empty: Flower needs the events side channel (IMPOSITION_EVENTS_URL)")
    return celery_command(f"--broker={url}", "flower", f"--port={port}", f"--address={address}",
                          *FLOWER_OPTIONS, app=app)


class ReceiverProcess:
    """A ``python -m webhooks.receiver`` child process (for ``make run`` and the tests).

    Args:
        log_path: file for its stdout and stderr; the first line is the port.
        port: port to bind (0: a free one, read back from the log).
        env: extra environment variables.

    Raises:
        RuntimeError, TimeoutError: it exited or did not get ready (see :class:`ManagedProcess`).
    """

    def __init__(self, log_path, *, port: int = 0, env: dict[str, str] | None = None) -> None:
        self.process = ManagedProcess([sys.executable, "-m", "webhooks.receiver", "--port", str(port)], log_path,
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
