"""A Celery app for fault-injection tests: the real ``tasks`` app plus faults at precise moments.

Start workers with ``start_worker(..., app="tests.support.fault_app")``. Nothing of ours is
replaced: faults hang on our public signals (:mod:`leases.signals`), on Celery's
``worker_process_init`` and on botocore's event hooks. Which job gets which fault is decided by
marker files in ``$FAULT_DIR`` that tests write before submitting:

==========================  ======================================================================
marker                      effect (in the worker child running the job)
==========================  ======================================================================
``<job>.kill-before-acquire``  SIGKILL right before the acquire transaction is sent (no lease yet)
``<job>.kill-after-acquire``   SIGKILL at ``lease_acquired``, before the engine starts
``<job>.kill-mid-engine``      SIGKILL once the engine's child process is running
``<job>.kill-after-upload``    SIGKILL right after the plate's PutObject returned, before the release
``<job>.kill-every-attempt``   SIGKILL at ``lease_acquired``, every attempt (not consumed)
``<job>.stop-heartbeat``       ``heartbeat.stop()`` at ``lease_acquired``, then wait (up to the file's
                               number of seconds) until the lease was reclaimed, then go on
``<job>.sigstop-before-upload``  SIGSTOP itself right before the plate's PutObject (the test resumes it)
``<job>.kill-after-release``   SIGKILL right after the job's release committed, before its hand-off (the
                               publish of the job it handed its place to, or the wake)
``<job>.hold-before-release``  wait right before the job's release transaction is sent while the file
                               exists (after the holder read its tenant's next waiting job); touches
                               ``<job>.at-release`` when it starts waiting
``tenant-T.kill-after-wake``   SIGKILL right after a release's wake transaction of tenant T applied, before
                               the woken job's message is published (a lost wake message; one-shot)
``<job>.fail-input``           the input download raises :class:`InjectedFault` (retryable), every attempt
``<job>.deny-acquire``         the acquire transaction is answered ``AccessDeniedException`` (once)
``<job|tenant-T>.sleep``       sleep the file's number of seconds at ``lease_acquired`` (a slow job)
``<job|tenant-T>.hold``        wait at ``lease_acquired`` while the file exists (the lease is renewed)
``dynamo-faults``              throttle/conflict a share (the file's number, 0–1) of DynamoDB calls
==========================  ======================================================================

One-shot markers are *claimed* (unlinked) by the process that acts on them, so a redelivery or a
re-published copy runs normally. Every process also writes the lease-event log to
``$LEASE_EVENT_LOG_DIR`` (:mod:`tasks.lease_log`), connected first so the event is on disk before a
fault strikes.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path

import psutil
from celery.signals import worker_process_init

from leases import signals
from tasks import app, lease_log  # noqa: F401 (``celery -A`` finds ``app`` here)

log = logging.getLogger(__name__)
FAULT_DIR = Path(os.environ.get("FAULT_DIR", "/nonexistent-fault-dir"))
if os.environ.get("LEASE_EVENT_LOG_DIR"):
    lease_log.install(os.environ["LEASE_EVENT_LOG_DIR"])


class InjectedFault(Exception):
    """A failure of a job's own (the test's stand-in for a transient fault of the job)."""

    retryable = True
    code = "injected"


def _marker(name: str) -> Path | None:
    path = FAULT_DIR / name
    return path if path.exists() else None


def _claim(name: str) -> bool:
    """True for the one process that removes marker ``name``."""
    try:
        (FAULT_DIR / name).unlink()
    except FileNotFoundError:
        return False
    return True


def _number(path: Path, default: float) -> float:
    try:
        return float(path.read_text().strip() or default)
    except (OSError, ValueError):
        return default


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_when_engine_runs() -> None:
    """SIGKILL this process once an engine child works on the job: a new child, or the warm one
    (pre-started with the process, idle until now) using CPU again."""
    def cpu_s(process: psutil.Process) -> float:
        try:
            return sum(process.cpu_times()[:2])
        except psutil.Error:
            return 0.0

    me = psutil.Process()
    idle = {child.pid: cpu_s(child) for child in me.children()}
    while not any(child.pid not in idle or cpu_s(child) > idle[child.pid] + 0.01 for child in me.children()):
        time.sleep(0.005)
    _die()


def _wait_until_reclaimed(job_id: str, token: str, timeout_s: float) -> None:
    from leases.models import JobItem

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if JobItem.get(job_id, consistent_read=True).lease_token != token:
            return
        time.sleep(0.2)


@signals.lease_acquired.connect(weak=False)
def _at_lease_acquired(sender=None, lease=None, job=None, heartbeat=None, **_: object) -> None:
    job_id, tenant = lease.job_id, f"tenant-{lease.tenant_id}"
    if _claim(f"{job_id}.kill-after-acquire") or _marker(f"{job_id}.kill-every-attempt"):
        _die()
    if _claim(f"{job_id}.kill-mid-engine"):
        threading.Thread(target=_kill_when_engine_runs, daemon=True).start()
    stop = _marker(f"{job_id}.stop-heartbeat")
    if stop is not None and _claim(stop.name):
        timeout_s = _number(stop, 60)
        heartbeat.stop()
        _wait_until_reclaimed(job_id, lease.token, timeout_s)
    for name in (f"{job_id}.sleep", f"{tenant}.sleep"):
        path = _marker(name)
        if path is not None:
            time.sleep(_number(path, 1))
            break
    while _marker(f"{job_id}.hold") or _marker(f"{tenant}.hold"):
        time.sleep(0.1)


@signals.lease_released.connect(weak=False)
def _at_lease_released(sender=None, lease=None, **_: object) -> None:
    if _claim(f"{lease.job_id}.kill-after-release"):
        _die()


def _wake_request_tenant(params: dict) -> str | None:
    """The tenant of a wake transaction (a job update that writes ``woken_by``), else None."""
    from imposition.common.settings import get_settings

    items = params.get("TransactItems", [])
    if not any("woken_by" in (i.get("Update") or {}).get("ExpressionAttributeNames", {}).values() for i in items):
        return None
    for item in items:
        update = item.get("Update") or {}
        if update.get("TableName") == get_settings().tenants_table:
            return update["Key"]["tenant_id"]["S"]
    return None


def _after_transaction(http_response, context=None, **_: object) -> None:
    if (context or {}).get("fault_kill_after") and http_response.status_code < 300:
        _die()


def _acquire_request_job(params: dict) -> str | None:
    from imposition.common.settings import get_settings

    for item in params.get("TransactItems", []):
        put = item.get("Put")
        if put and put.get("TableName") == get_settings().leases_table:
            return put["Item"]["job_id"]["S"]
    return None


def _release_request_job(params: dict) -> str | None:
    from imposition.common.settings import get_settings

    for item in params.get("TransactItems", []):
        delete = item.get("Delete")
        if delete and delete.get("TableName") == get_settings().leases_table:
            return delete["Key"]["job_id"]["S"]
    return None


def _before_transaction(params, context=None, **_: object) -> None:
    job_id = _acquire_request_job(params)
    if job_id and _claim(f"{job_id}.kill-before-acquire"):
        _die()
    released = _release_request_job(params)
    if released and _marker(f"{released}.hold-before-release"):
        (FAULT_DIR / f"{released}.at-release").touch()
        while _marker(f"{released}.hold-before-release"):
            time.sleep(0.05)
    tenant = _wake_request_tenant(params)
    if tenant and context is not None and _claim(f"tenant-{tenant}.kill-after-wake"):
        context["fault_kill_after"] = True


def _job_of_key(key: str) -> str | None:
    parts = key.split("/")  # tenants/<tenant>/jobs/<job>/<file>
    return parts[3] if len(parts) == 5 and parts[2] == "jobs" else None


def _before_s3(params, event_name: str, context=None, **_: object) -> None:
    job_id = _job_of_key(params.get("Key", ""))
    if job_id is None:
        return
    if context is not None:
        context["fault_job_id"] = job_id  # for the after-call hook, which gets no params
    if event_name.endswith(".PutObject") and _claim(f"{job_id}.sigstop-before-upload"):
        os.kill(os.getpid(), signal.SIGSTOP)
    if event_name.endswith((".GetObject", ".HeadObject")) and _marker(f"{job_id}.fail-input"):
        raise InjectedFault(f"injected failure reading the input of job {job_id}")


def _after_s3_put(http_response, context=None, **_: object) -> None:
    job_id = (context or {}).get("fault_job_id")
    if job_id and http_response.status_code < 300 and _claim(f"{job_id}.kill-after-upload"):
        _die()


def _deny_acquire(request, **_: object):
    from tests.support.dynamo_faults import error_response

    job_id = _acquire_request_job(json.loads(request.body or b"{}"))
    if job_id and _claim(f"{job_id}.deny-acquire"):
        return error_response(request.url, "AccessDeniedException", "injected: not authorized")
    return None


class _ToggledDynamoFaults:
    """Throttles/conflicts a share of DynamoDB calls while ``$FAULT_DIR/dynamo-faults`` exists."""

    def __init__(self) -> None:
        from tests.support.dynamo_faults import DynamoFaults

        self.faults = DynamoFaults(rate=0.0, seed=os.getpid())

    def __call__(self, request, event_name: str, **kw: object):
        path = _marker("dynamo-faults")
        if path is None:
            return None
        self.faults.rate = _number(path, 0.3)
        before = dict(self.faults.injected)
        response = self.faults._on_send(request, event_name, **kw)
        for kind, n in self.faults.injected.items():
            if n > before.get(kind, 0):
                log.info("injected DynamoDB fault: %s on %s", kind, event_name.rsplit(".", 1)[-1])
        return response


@worker_process_init.connect(weak=False)
def _install_hooks(**_: object) -> None:
    from imposition.common import aws
    from tests.support.dynamo_faults import dynamodb_clients
    from leases.dynamo import tx_connection

    # before-parameter-build: the hook that sees the API parameters (before-call sees the HTTP request).
    tx_connection().client.meta.events.register("before-parameter-build.dynamodb.TransactWriteItems",
                                                _before_transaction)
    tx_connection().client.meta.events.register("before-send.dynamodb.TransactWriteItems", _deny_acquire)
    tx_connection().client.meta.events.register("after-call.dynamodb.TransactWriteItems", _after_transaction)
    s3 = aws.s3()
    s3.meta.events.register("before-parameter-build.s3", _before_s3)
    s3.meta.events.register("after-call.s3.PutObject", _after_s3_put)
    toggled = _ToggledDynamoFaults()
    for client in dynamodb_clients():
        client.meta.events.register_first("before-send.dynamodb", toggled)
