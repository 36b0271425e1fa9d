"""Celery app of ``make bench-sched``: the real ``tasks`` app with a stand-in engine of fixed duration.

``celery -A bench.sched_app worker ...``. The imposition task is replaced, in this app only, by
:class:`StandInImposeTask`: the real :class:`tasks.base.FairTask` lifecycle (lease, heartbeat,
fenced commit, park, hand-off) around a ``run`` that sleeps the job's duration instead of imposing.
The duration of each tenant's jobs is read from the JSON file ``$BENCH_DURATIONS_FILE``
(``{tenant: seconds}``, re-read when it changes). Every process writes the lease-event log to
``$BENCH_EVENT_LOG_DIR``, and a ``delivery`` event per run of the task (``began``, ``t`` its end,
``state``: ``RETRY`` for a delivery that parked or deferred its job), a ``woken`` event when a
woken job's message was published (or it was left to run in place), an ``in_place`` event at the
lease of a job run in place (no delivery of its own), from which :func:`bench.sim_check.calibrate` measures the
worker time of a park and the moment a woken job became due. ``bench.noop`` is a plain Celery task
(no lease), the overhead baseline.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import time

from celery.signals import task_postrun, task_prerun

from leases import signals
from leases.models import JobItem
from leases.transactions import Lease
from tasks import app, lease_log  # noqa: F401 (``celery -A`` finds ``app`` here)
from tasks.base import FairTask, JobResult
from tasks.imposition_task import ImposeTask

_events = lease_log.install(os.environ["BENCH_EVENT_LOG_DIR"])
_began: dict[str, float] = {}
_DURATIONS = Path(os.environ["BENCH_DURATIONS_FILE"])
_cache: dict = {"mtime": None, "durations": {}}


def duration_s(tenant_id: str) -> float:
    """Seconds one job of ``tenant_id`` takes (0 when the file does not name it)."""
    mtime = _DURATIONS.stat().st_mtime_ns
    if mtime != _cache["mtime"]:
        _cache["durations"], _cache["mtime"] = json.loads(_DURATIONS.read_text()), mtime
    return float(_cache["durations"].get(tenant_id, 0.0))


class StandInImposeTask(FairTask):
    """The imposition task's lifecycle with a fixed-duration stand-in for the engine."""

    name = ImposeTask.name

    def run_job(self, *, job: JobItem, lease: Lease, cancel: threading.Event) -> JobResult:
        """Wait the tenant's duration (stopping early if the lease is lost); no S3, no PDF."""
        cancel.wait(duration_s(job.tenant_id))
        return JobResult(output_key=f"bench/{job.job_id}", sheets=1, sides=1)


app.tasks.pop(ImposeTask.name, None)
app.register_task(StandInImposeTask())


@app.task(name="bench.noop", acks_late=True, ignore_result=True)
def noop() -> None:
    """A plain Celery task: the broker's cost alone."""


@task_prerun.connect(weak=False)
def _delivery_began(task_id: str | None = None, task=None, **_: object) -> None:
    if task is not None and task.name == ImposeTask.name and task_id:
        _began[task_id] = time.time()


@task_postrun.connect(weak=False)
def _delivery_ended(task_id: str | None = None, task=None, kwargs=None, state: str | None = None,
                    **_: object) -> None:
    began = _began.pop(task_id or "", None)
    if began is not None:
        _events.write("delivery", time.time(), began=began, state=state, tenant=(kwargs or {}).get("tenant_id"),
                      job=(kwargs or {}).get("job_id"))


@signals.job_woken.connect(weak=False)
def _woken(sender=None, job=None, reason: str | None = None, **_: object) -> None:
    if job is not None:  # sent once the woken job's message is published
        _events.write("woken", time.time(), tenant=job.tenant_id, job=job.job_id, reason=reason)
