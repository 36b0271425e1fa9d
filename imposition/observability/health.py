"""A worker node's health, and beat's, answered at ``GET /healthz`` on its metrics port (:mod:`.exporter`).

Healthy (200) while all three hold; otherwise 503, with a JSON body naming what failed::

    {"status": "ok" | "draining" | "stalled", "problems": [str, ...],
     "poll_age_s": float, "renewals": int, "oldest_renewal_age_s": float | null}

==================  ======================================================================================
check               what it reads
==================  ======================================================================================
not draining        Celery's ``worker_shutting_down`` (a planned stop: SIGTERM, a warm shutdown) sets it in
                    the main process; from then on the node answers 503 ``draining`` until it exits, so a
                    load balancer or a platform takes it out of rotation and no deploy counts it as up
poll loop turns     the SQS transport's poll loop calls :func:`poll_turned` on each run (main process);
                    older than :attr:`~imposition.common.clocks.Clocks.poll_stale_after_s` is stalled
heartbeats renew    each running job's heartbeat (a prefork child) keeps a file per lease whose mtime is
                    its last confirmed renewal (:func:`renewed`, :func:`ended`); one older than
                    :attr:`~imposition.common.clocks.Clocks.renewal_stale_after_s` (past the point where the
                    heartbeat's own watchdog should have ended the run) is stalled
==================  ======================================================================================

The renewal files live beside the node's prometheus-client multiprocess directory,
``$PROMETHEUS_MULTIPROC_DIR.renewals`` (made empty with it at ``celeryd_init``): the children
inherit the variable. Outside a worker with a metrics port nothing here writes anything. Beat
(:func:`check_beat`): not draining, and its scheduler loop turned within :func:`beat_stale_after_s`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from imposition.common.clocks import Clocks
from imposition.common.settings import Settings

log = logging.getLogger(__name__)

#: The path the endpoint answers on.
HEALTH_PATH = "/healthz"
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_lock = threading.Lock()
_last_poll: float | None = None  # time.monotonic() of the poll loop's last run (main process)
_last_tick: float | None = None  # time.monotonic() of beat's scheduler loop's last turn
_draining = False


def poll_turned() -> None:
    """The consumer's poll loop ran once (called by :class:`tasks.sqs_transport.Channel`)."""
    global _last_poll
    _last_poll = time.monotonic()


def beat_ticked() -> None:
    """Beat's scheduler loop turned once (called by ``tasks.beat.HealthScheduler``)."""
    global _last_tick
    _last_tick = time.monotonic()


def beat_stale_after_s(settings: Settings) -> float:
    """Seconds without a turn of its scheduler loop after which beat has stalled: twice
    ``beat_max_loop_interval_s``, the longest it sleeps between turns (a turn's sends may take as
    long again; Celery's own beat ping takes the same two intervals)."""
    return 2 * settings.beat_max_loop_interval_s


def begin_draining(**_: object) -> None:
    """The process began a planned stop: answer 503 ``draining`` from now on (Celery's
    ``worker_shutting_down``, connected by :func:`install`)."""
    global _draining
    with _lock:
        _draining = True


def reset() -> None:
    """Start afresh (the endpoint's start): not draining, and the poll loop counted as having run
    now (it begins right after the endpoint)."""
    global _last_poll, _last_tick, _draining
    with _lock:
        _draining = False
        _last_poll = _last_tick = time.monotonic()


def renewals_dir() -> str | None:
    """The node's directory of renewal files, or None outside a worker with a metrics endpoint."""
    path = os.environ.get(_MULTIPROC_ENV)
    return f"{path.rstrip(os.sep)}.renewals" if path else None


def prepare_renewals_dir() -> str | None:
    """Make the node's renewal directory empty (the node starts; no lease of it runs). Returns it."""
    path = renewals_dir()
    if path is None:
        return None
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    return path


def _renewal_file(path: str, job_id: str) -> str:
    return os.path.join(path, f"{os.getpid()}.{job_id}")


def renewed(job_id: str, at: float) -> None:
    """Record that ``job_id``'s lease, held by this process, was confirmed (acquired or renewed) at
    epoch ``at`` seconds (the file ``<pid>.<job id>``). A failure to write is logged, never raised:
    health must not cost a job its run."""
    path = renewals_dir()
    if path is None:
        return
    file = _renewal_file(path, job_id)
    try:
        with open(file, "a"):
            pass
        os.utime(file, (at, at))
    except OSError as exc:
        log.warning("could not record the renewal of job %s for /healthz: %s", job_id, exc)


def ended(job_id: str) -> None:
    """``job_id``'s run under its lease ended (its heartbeat stopped)."""
    path = renewals_dir()
    if path is None:
        return
    try:
        os.unlink(_renewal_file(path, job_id))
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not clear the renewal of job %s for /healthz: %s", job_id, exc)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _renewal_times() -> Iterable[tuple[str, float]]:
    """(job id, epoch s of its last confirmed renewal) of each lease a live process of the node
    holds; the file of a process that died without stopping its heartbeat (SIGKILL) is removed:
    the sweeper reclaims that lease, and the node's pool replaces the process."""
    path = renewals_dir()
    if path is None or not os.path.isdir(path):
        return []
    out = []
    for name in os.listdir(path):
        pid_text, _, job_id = name.partition(".")
        file = os.path.join(path, name)
        try:
            if not _alive(int(pid_text)):
                os.unlink(file)
                continue
            out.append((job_id, os.stat(file).st_mtime))
        except (FileNotFoundError, ValueError):
            continue  # the run ended while we looked; not one of ours
    return out


@dataclass
class Health:
    """One answer of the health check: ``status_code`` 200 or 503 and the JSON body's fields."""

    status: str
    problems: list[str] = field(default_factory=list)
    poll_age_s: float | None = None
    renewals: int = 0
    oldest_renewal_age_s: float | None = None

    @property
    def status_code(self) -> int:
        return 200 if self.status == "ok" else 503

    def body(self) -> bytes:
        return json.dumps({"status": self.status, "problems": self.problems, "poll_age_s": self.poll_age_s,
                           "renewals": self.renewals, "oldest_renewal_age_s": self.oldest_renewal_age_s}).encode()


def check(clocks: Clocks) -> Health:
    """This node's health now (module docstring)."""
    now = time.time()
    problems = []
    poll_age_s = None if _last_poll is None else round(time.monotonic() - _last_poll, 3)
    if poll_age_s is None or poll_age_s > clocks.poll_stale_after_s:
        problems.append(f"poll loop stalled: last run {poll_age_s} s ago (limit {clocks.poll_stale_after_s:g} s)"
                        if poll_age_s is not None else "poll loop has not run")
    times = list(_renewal_times())
    oldest = max((now - at for _, at in times), default=None)
    for job_id, at in times:
        if now - at > clocks.renewal_stale_after_s:
            problems.append(f"lease renewals stalled: job {job_id} last renewed {now - at:.0f} s ago "
                            f"(limit {clocks.renewal_stale_after_s:g} s)")
    status = "draining" if _draining else ("stalled" if problems else "ok")
    return Health(status, problems, poll_age_s, len(times), None if oldest is None else round(oldest, 3))


def check_beat(stale_after_s: float) -> Health:
    """Beat's health now (module docstring): stalled once its loop has not turned for ``stale_after_s``."""
    age_s = None if _last_tick is None else round(time.monotonic() - _last_tick, 3)
    problems = []
    if age_s is None or age_s > stale_after_s:
        problems.append(f"scheduler loop stalled: last turn {age_s} s ago (limit {stale_after_s:g} s)"
                        if age_s is not None else "scheduler loop has not turned")
    return Health("draining" if _draining else ("stalled" if problems else "ok"), problems, age_s)


def wsgi_app(metrics_app: Callable, checker: Callable[[], Health]) -> Callable:
    """A WSGI app answering :data:`HEALTH_PATH` with ``checker()`` (:func:`check` of a worker's
    clocks, :func:`check_beat`) and everything else with ``metrics_app``."""

    def app(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTH_PATH:
            return metrics_app(environ, start_response)
        health = checker()
        reason = "OK" if health.status_code == 200 else "Service Unavailable"
        body = health.body()
        start_response(f"{health.status_code} {reason}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return app


def install() -> None:
    """Connect :func:`begin_draining` to Celery's ``worker_shutting_down`` (idempotent)."""
    from celery.signals import worker_shutting_down  # noqa: PLC0415 (celery only where a worker runs)

    worker_shutting_down.connect(begin_draining)
