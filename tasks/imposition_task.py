"""The imposition task: input PDF from S3 → engine → plate file to S3, under a lease.

``impose.delay(tenant_id=..., token=..., input_key=..., layout={...})`` is how internal callers
submit a job: it runs admission, creates the job item and publishes (see :mod:`tasks.submission`)
and returns an :class:`~tasks.results.ImpositionResult`. Workers receive
``{"tenant_id", "job_id"}``, and :class:`FairTask` wraps the run in a lease.

Each process of a worker consuming the imposition queue keeps a warm engine child
(:func:`imposition.engine.isolation.keep_warm`, ``Settings.engine_warm_child``), started when the process
starts, so no job pays the child's start.

Celery's other doors are honest too: ``impose.apply_async(kwargs={tenant_id, token, input_key,
layout, …})`` and a signature's ``delay``/``apply_async`` (``impose.s(...)``, a ``group``) submit
the same way; whatever would publish a job message without submission (no ``token``, positional
arguments, a ``chain``/``link``/``chord`` callback that submission cannot keep) raises
:class:`SubmissionRequired`. Only our own publishers (:func:`tasks.messages.publish_job`, retries)
publish a job message directly, always with its ``MessageGroupId``.

One door cannot be closed at the caller: ``app.send_task("imposition.impose", kwargs={...})``, the
usual call between services, publishes without running any task code. A worker that receives
such a message (:func:`called_by_name`) records it as a failed job under its task id
(:func:`leases.lifecycle.record_unsubmitted`, error code ``submission_required``) and acks it:
the caller's ``AsyncResult.get()`` raises :class:`SubmissionRequired` saying how to submit, and
nothing reaches the dead-letter queue. Other services submit with :mod:`imposition.client`.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import unicodedata
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from celery.exceptions import Ignore, Reject
from celery.result import AsyncResult as CeleryResult
from celery.signals import worker_process_init, worker_process_shutdown

from imposition.engine import SlugInfo, get_engine, isolation, parse_layout
from imposition.engine.errors import PlateWarning, PreviewFailed
from leases import lifecycle, renewal
from leases.models import JobItem
from leases.transactions import Lease
from imposition.common.settings import S3_KEY_MAX_BYTES, get_settings
from imposition.common.tenancy import (
    TenancyError,
    jdf_key,
    plate_key,
    preview_key,
    shown_value,
    validate_job_id,
    validate_tenant_id,
)
from . import storage
from .base import FairTask, JobResult
from .celery_app import app
from .outcomes import INFRASTRUCTURE_ERRORS
from .results import ImpositionResult, SubmissionRequired
from .submission import submit_job

log = logging.getLogger(__name__)


#: Celery options that ask for work after the task; a submitted job's message cannot carry them.
_CANVAS_OPTIONS = ("link", "link_error", "chain", "chord")


class ImposeTask(FairTask):
    """Impose one job's PDF onto press sheets and upload the plate file.

    Message kwargs: ``tenant_id`` (str), ``job_id`` (str). The plate goes to
    ``tenants/<tenant>/jobs/<job>/plate.pdf`` and, with ``Settings.job_previews``, a PNG of each side
    beside it (``preview-<n>.png``, n from 1), and the plan's JDF Layout as ``plate.jdf`` (pikepdf
    engine); the engine's warnings and the previews' and JDF's keys to the job item. A preview that cannot be rendered or uploaded is the warning ``preview_failed``: the plate
    still ships. The slug's date is the job's submission date (UTC), so every attempt writes the
    same plate.
    """

    name = "imposition.impose"

    def delay(self, *args: Any, **kwargs: Any) -> ImpositionResult:
        """Submit a job: ``delay(tenant_id=..., token=..., input_key=..., layout={...})``.

        Runs admission, creates the job item (``queued``) and publishes with the tenant's
        ``MessageGroupId``. Returns the job's :class:`~tasks.results.ImpositionResult` (its ``id`` is
        the job id): ``.get(timeout=...)`` waits for the plate or raises the job's typed error.

        Raises:
            SubmissionRequired: positional arguments, or no ``token``.
            see :func:`tasks.submission.submit_job` for a refused or invalid submission.
        """
        if args or "token" not in kwargs:
            raise SubmissionRequired(self._refusal(args, kwargs, []))
        return self.AsyncResult(submit_job(**kwargs))

    def _refusal(self, args: Any, kwargs: dict, callbacks: list[str]) -> str:
        """The :class:`SubmissionRequired` message: what to pass instead, and what was given."""
        return (f"{self.name} runs only submitted jobs: pass kwargs tenant_id, token, input_key and layout "
                "(impose.apply_async(kwargs={...}), impose.delay(...) or tasks.submission.submit_job), "
                f"no positional arguments and no callbacks; got args={shown_value(args)}, kwargs "
                f"{sorted(kwargs)}{', callbacks ' + ', '.join(callbacks) if callbacks else ''}")

    def before_start(self, task_id: str, args: tuple, kwargs: dict) -> None:
        """A call by name (:func:`called_by_name`: ``app.send_task`` with a submission's arguments)
        was never submitted: end it (:meth:`_end_unsubmitted`). Every other message is a job's
        (:meth:`FairTask.before_start <tasks.base.FairTask.before_start>`), or poison."""
        if called_by_name(args, kwargs):
            self._end_unsubmitted(task_id, args, kwargs or {})
        super().before_start(task_id, args, kwargs)

    def _end_unsubmitted(self, task_id: str, args: tuple, kwargs: dict) -> NoReturn:
        """Record the message as a failed job under its task id, so that its caller's
        ``AsyncResult.get()`` raises :class:`SubmissionRequired` saying how to submit, and ack it
        (nothing reaches the dead-letter queue; nothing was admitted, so nothing else changes).

        Raises:
            celery.exceptions.Ignore: recorded (or its task id names a job already): acked.
            celery.exceptions.Reject: DynamoDB did not answer (SQS redelivers the message), or a
                task id that cannot name a job (to the dead-letter queue as ``invalid_fields``).
        """
        try:
            job_id = validate_job_id(task_id)
        except TenancyError as exc:
            self._reject_as_poison(f"a message without job_id, whose task id cannot name its record: {exc}")
        error = (f"{self.name} was called by name (app.send_task) or its message published without "
                 "submission: nothing admitted it and it did not run. Submit with imposition.client.submit("
                 "tenant_id=..., token=..., input_key=..., layout=...), which runs admission and returns "
                 f"the job's result; got args={shown_value(args)}, kwargs {sorted(map(str, kwargs))}")
        try:
            tenant_id, token, input_key = _named_fields(kwargs, job_id)
            written = lifecycle.record_unsubmitted(job_id, tenant_id=tenant_id, token=token, input_key=input_key,
                                                   error=error)
        except INFRASTRUCTURE_ERRORS as exc:  # unrecorded: SQS keeps the message and redelivers it
            log.error("message %s of %s without submission could not be recorded (%s); left to SQS", job_id,
                      self.name, exc)
            raise Reject(exc, requeue=False) from exc
        log.warning("message %s of %s was never submitted (sent by name?): %s", job_id, self.name,
                    "recorded as failed (submission_required); its caller's get() raises SubmissionRequired"
                    if written else "a job with that id exists already, dropped")
        raise Ignore()

    def apply_async(self, args: Any = None, kwargs: dict | None = None, task_id: str | None = None,
                    producer: Any = None, link: Any = None, link_error: Any = None, shadow: Any = None,
                    **options: Any) -> CeleryResult:
        """Submit a job the Celery way, or publish one of our own job messages.

        ``kwargs`` with a ``token`` (``tenant_id``, ``token``, ``input_key``, ``layout``, optional
        ``max_attempts``, ``job_id``): :func:`tasks.submission.submit_job`; returns the
        :class:`~tasks.results.ImpositionResult` of the job id, read from the job item.
        A message of ours (``MessageGroupId`` given, kwargs ``tenant_id``/``job_id``): published as is.

        Raises:
            SubmissionRequired: positional ``args``, kwargs without a ``token`` and no
                ``MessageGroupId``, or a canvas callback (``link``, ``link_error``, ``chain``, ``chord``).
            see :func:`tasks.submission.submit_job` for a refused or invalid submission.
        """
        kwargs = dict(kwargs or {})
        if "MessageGroupId" in options and "token" not in kwargs:  # publish_job, SqsTask.retry
            return super().apply_async(args, kwargs, task_id=task_id, producer=producer, link=link,
                                       link_error=link_error, shadow=shadow, **options)
        callbacks = [name for name, value in (("link", link), ("link_error", link_error),
                                              *((n, options.get(n)) for n in _CANVAS_OPTIONS[2:])) if value]
        if args or "token" not in kwargs or callbacks:
            raise SubmissionRequired(self._refusal(args, kwargs, callbacks))
        return self.AsyncResult(submit_job(**kwargs))

    def run_job(self, *, job: JobItem, lease: Lease, cancel: threading.Event) -> JobResult:
        """Download, impose, check the lease, upload. Raises the engine's typed errors."""
        settings = get_settings()
        spec = parse_layout(job.layout)
        key = plate_key(job.tenant_id, job.job_id)
        with tempfile.TemporaryDirectory(prefix="imposition-job-") as tmp:  # no path is built from an id
            # The input keeps the name the tenant sent (in a folder of its own), so the engine's errors
            # and warnings name that file, not a name of ours.
            source = Path(tmp, "input", local_file_name(job.file_name or PurePosixPath(job.input_key).name))
            plate, preview_dir = Path(tmp, "plate.pdf"), Path(tmp, "previews")
            source.parent.mkdir()
            storage.download(job.input_key, source)
            submitted = datetime.fromtimestamp(float(job.submitted_at), tz=timezone.utc).date().isoformat()
            if settings.job_previews:
                preview_dir.mkdir()
            report = get_engine(settings).impose(
                source, spec, plate, slug=SlugInfo(job_id=job.job_id, tenant_id=job.tenant_id, date=submitted),
                cancel=cancel, preview_dir=preview_dir if settings.job_previews else None,
            )
            # Fence the upload: prove the lease is still ours right before writing the plate.
            renewal.renew(lease)
            storage.upload(plate, key)
            jdf = None
            if report.jdf is not None:  # the plate's ticket: a failed upload fails the attempt as the plate's does
                jdf = jdf_key(job.tenant_id, job.job_id)
                storage.upload(report.jdf, jdf, content_type=JDF_CONTENT_TYPE)
            warnings = list(report.warnings)
            preview_keys = _upload_previews(job, report.previews, warnings)
        log.info("job %s imposed: %s sheets, %s sides in %.2f s", job.job_id, report.sheets, report.sides,
                 report.duration_s)
        if warnings:
            log.warning("job %s imposed with warnings: %s", job.job_id,
                        "; ".join(f"{w.code}: {w.message}" for w in warnings))
        return JobResult(output_key=key, sheets=report.sheets, sides=report.sides,
                         warnings=tuple(w.to_json() for w in warnings), preview_keys=preview_keys,
                         jdf_key=jdf)


#: The keyword arguments of a submission (``impose.delay(...)``'s).
SUBMISSION_FIELDS = ("tenant_id", "token", "input_key", "layout")


def called_by_name(args: Any, kwargs: Any) -> bool:
    """True for a message of ``imposition.impose`` that a caller sent by name (``app.send_task``)
    with a submission's arguments instead of submitting: no ``job_id``, and a submission field
    among its kwargs or positional arguments alone. Other messages without ``job_id`` (``{"self":
    1}``, garbage) stay poison for the dead-letter queue."""
    if not isinstance(kwargs, dict) or "job_id" in kwargs:
        return False
    return any(name in kwargs for name in SUBMISSION_FIELDS) or (
        not kwargs and isinstance(args, (list, tuple)) and len(args) > 0)


def _named_fields(kwargs: dict, job_id: str) -> tuple[str, str, str]:
    """``(tenant_id, token, input_key)`` a message never submitted names, kept on its record where
    each is within its submission bound; else :data:`leases.lifecycle.NO_TENANT`, the task id and
    an empty key."""
    tenant_id: str
    try:
        tenant_id = validate_tenant_id(kwargs.get("tenant_id"))
    except TenancyError:
        tenant_id = lifecycle.NO_TENANT
    token, key = kwargs.get("token"), kwargs.get("input_key")
    if not (isinstance(token, str) and token.strip() and len(token) <= get_settings().idempotency_token_max_len
            and token.isprintable()):
        token = job_id
    if not (isinstance(key, str) and key.isprintable() and len(key.encode("utf-8", "replace")) <= S3_KEY_MAX_BYTES):
        key = ""
    return tenant_id, token, key


#: The media type of a JDF ticket (registered with IANA by CIP4).
JDF_CONTENT_TYPE = "application/vnd.cip4-jdf+xml"
#: The name of a job's input on the worker when the tenant's file name cannot be one.
INPUT_FALLBACK_NAME = "input.pdf"
#: Longest local file name (bytes, UTF-8): Linux's NAME_MAX.
LOCAL_NAME_MAX_BYTES = 255


def local_file_name(name: str) -> str:
    """``name`` (the file the tenant sent) as a file name in a folder of the worker's: its last
    segment, control characters dropped, at most :data:`LOCAL_NAME_MAX_BYTES` bytes;
    :data:`INPUT_FALLBACK_NAME` when nothing of it is left, or it is ``.`` or ``..``."""
    last = name.replace("\\", "/").rsplit("/", 1)[-1]
    kept = "".join(ch for ch in last if unicodedata.category(ch) != "Cc")
    kept = kept.encode("utf-8", "replace")[:LOCAL_NAME_MAX_BYTES].decode("utf-8", "ignore")
    return INPUT_FALLBACK_NAME if kept in ("", ".", "..") else kept


def _upload_previews(job: JobItem, previews: tuple[Path, ...], warnings: list[PlateWarning]) -> tuple[str, ...]:
    """Upload ``previews`` (side 1, 2, … in order) beside the plate; their keys. A failed upload
    removes the ones already made, adds the warning ``preview_failed`` and gives no keys."""
    keys: list[str] = []
    try:
        for side, path in enumerate(previews, start=1):
            keys.append(preview_key(job.tenant_id, job.job_id, side))
            storage.upload(path, keys[-1], content_type="image/png")
    except storage.StorageError as exc:
        warnings.append(PlateWarning(PreviewFailed.code, f"previews not stored ({exc.code}): {exc}"))
        for uploaded in keys:
            try:
                storage.delete(uploaded)
            except Exception:  # noqa: BLE001 - a stray preview is harmless; the job item names none
                log.warning("job %s: preview %s could not be removed", job.job_id, uploaded)
        return ()
    return tuple(keys)


@worker_process_init.connect
def _warm_engine_child(**_: object) -> None:
    """A process of an imposition worker starts its warm engine child (with ``engine_warm_child``)."""
    settings = get_settings()
    queues = {queue.name for queue in app.amqp.queues.consume_from.values()} if app.amqp.queues.consume_from else set()
    if not settings.engine_warm_child or settings.imposition_queue not in queues:
        return
    # started on a thread: the pool process must send Celery its UP message within seconds of its fork
    isolation.keep_warm(isolation.WarmPolicy(max_jobs=settings.engine_child_max_jobs,
                                             max_rss_bytes=settings.engine_child_max_rss_bytes), start_now=False)
    log.info("warm engine child starting")


@worker_process_shutdown.connect
def _stop_engine_child(**_: object) -> None:
    isolation.stop_warm()


impose: ImposeTask = app.register_task(ImposeTask())
