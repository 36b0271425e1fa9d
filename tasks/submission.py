"""Submitting jobs: ``impose.delay(...)``, :func:`submit` (a local PDF) and ``imposition submit``.

Order of one submission, each step undone if a later one fails, so a failed submission leaves
nothing behind::

    validate (tenant id, own input key, token, layout)
      → admission (Redis: idempotency token, rate limit, in-flight cap; see :mod:`admission`)
      → [submit(): upload the input] → job item (queued) → publish (MessageGroupId)

Admission runs before anything is written, so a refused submission (a duplicate token, a spent
rate limit, a full in-flight count, Redis unreachable) costs no upload, no job item and no
message. The job item is written before the message exists, so a worker never receives a job it
cannot find; if a later step fails, the job item and an input this call uploaded are deleted and
the admission is abandoned (token freed, rate and in-flight entries removed), so a retry with the
same token is admitted.

Duplicates: by default a taken token raises :class:`admission.DuplicateSubmission` carrying the
existing job id; with ``on_duplicate="return"`` the existing job id is returned instead, which makes
a retried submission (a client that timed out and tries again) idempotent.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import admission
from imposition.errors import InputError, InputTooLarge, NotAPdf
from leases import transactions, waiting
from leases.models import JobItem
from service.settings import get_settings
from service.tenancy import (
    check_own_key,
    input_key as derive_input_key,
    shown_value,
    validate_job_id,
    validate_tenant_id,
)
from tasks import signals, storage
from tasks.messages import publish_job

log = logging.getLogger(__name__)


def new_job_id() -> str:
    """A fresh job id (UUID4, hex): also the Celery task id of every copy of its message."""
    return uuid.uuid4().hex


OnDuplicate = Literal["raise", "return"]


def submit_job(
    *,
    tenant_id: str,
    token: str,
    input_key: str,
    layout: dict[str, Any] | str,
    max_attempts: int | None = None,
    job_id: str | None = None,
    on_duplicate: OnDuplicate = "raise",
) -> str:
    """Submit a job whose input PDF is already in the bucket; return its job id.

    Args:
        tenant_id: canonical tenant id (see :mod:`service.tenancy`).
        token: the caller's idempotency token for this job (1–``Settings.idempotency_token_max_len``
            characters); a token is taken for ``idempotency_ttl_s`` (48 h) after its submission.
        input_key: S3 key of the input PDF, under ``tenants/<tenant_id>/``.
        layout: the layout specification (dict or JSON text), validated here.
        max_attempts: attempt budget, 1–``Settings.max_attempts_limit`` (default ``Settings.max_attempts``).
        job_id: use this id (default: a new UUID4); 1–64 characters from ``[A-Za-z0-9_-]``.
        on_duplicate: ``"raise"`` (default) raises :class:`admission.DuplicateSubmission` for a taken
            token; ``"return"`` returns the job id that holds the token instead.

    Raises:
        service.tenancy.InvalidTenantId, service.tenancy.InvalidJobId,
            service.tenancy.ForeignKeyRefused: bad identity or key.
        imposition.errors.InvalidLayout: the layout fails validation (names field, value, limit).
        ValueError: an empty, too long or not UTF-8-encodable token, a max_attempts that is not an
            integer from 1 to ``Settings.max_attempts_limit``, a bad ``on_duplicate``.
        admission.DuplicateSubmission, admission.RateLimited, admission.InFlightLimitReached: refused
            (all :class:`admission.AdmissionRefused`); nothing was written or published.
        admission.AdmissionUnavailable: Redis unreachable; fails closed, nothing published.
        kombu/botocore/pynamodb errors: a later step failed (nothing is left behind).
    """
    check_own_key(tenant_id, input_key)
    job_id = new_job_id() if job_id is None else validate_job_id(job_id)
    spec, budget = _validated(tenant_id, token, layout, max_attempts, on_duplicate)
    return _admit_and_enqueue(tenant_id, token, job_id, spec, budget, input_key, on_duplicate=on_duplicate)


def submit(
    path: str | Path,
    *,
    tenant_id: str,
    token: str,
    layout: dict[str, Any] | str,
    max_attempts: int | None = None,
    on_duplicate: OnDuplicate = "raise",
) -> str:
    """Upload the local PDF ``path`` under the tenant's prefix and submit it; return the job id.

    Admission runs before the upload; the input goes to ``tenants/<tenant>/jobs/<job>/input.pdf``
    and is deleted again if a later step fails. ``on_duplicate`` as in :func:`submit_job`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        imposition.errors.InputTooLarge: the file is larger than ``Settings.max_input_bytes``
            (nothing uploaded: a worker would refuse it).
        everything :func:`submit_job` raises.

    A file that is not a PDF is accepted here and fails its job on the worker (``not_a_pdf``);
    ``imposition submit`` refuses it first (:func:`check_pdf_header`).
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"input PDF {str(source)!r} does not exist")
    size_bytes, limit_bytes = source.stat().st_size, get_settings().max_input_bytes
    if size_bytes > limit_bytes:
        raise InputTooLarge(f"input PDF {str(source)!r}: {size_bytes} bytes is more than max_input_bytes={limit_bytes}")
    spec, budget = _validated(tenant_id, token, layout, max_attempts, on_duplicate)
    job_id = new_job_id()
    return _admit_and_enqueue(tenant_id, token, job_id, spec, budget, derive_input_key(tenant_id, job_id),
                              on_duplicate=on_duplicate, upload_from=source)


#: The header must start within the first 1024 bytes (PDF 32000-1 §7.5.2; readers accept it there).
PDF_HEADER_WINDOW_BYTES = 1024


def check_pdf_header(path: Path) -> None:
    """Refuse ``path`` at the door unless it is a non-empty file with ``%PDF-`` in its first 1024
    bytes, naming the caller's file (a worker would fail the job as ``not_a_pdf`` seconds later,
    naming only ``input.pdf``). The pages themselves are checked by the engine.

    Raises:
        imposition.errors.NotAPdf: empty, or no header.
        imposition.errors.InputError: the file cannot be read.
    """
    try:
        with path.open("rb") as handle:
            head = handle.read(PDF_HEADER_WINDOW_BYTES)
    except OSError as exc:
        raise InputError(f"input PDF {str(path)!r}: cannot read it ({exc.strerror or exc})") from exc
    if not head:
        raise NotAPdf(f"input PDF {str(path)!r} is empty (0 bytes)")
    if b"%PDF-" not in head:
        raise NotAPdf(f"input PDF {str(path)!r} is not a PDF: no %PDF- header in its first "
                      f"{PDF_HEADER_WINDOW_BYTES} bytes")


def _validated(tenant_id: str, token: str, layout: dict[str, Any] | str, max_attempts: int | None,
               on_duplicate: str):
    """Every check that needs no I/O; returns (layout spec, attempt budget)."""
    from imposition import parse_layout  # noqa: PLC0415 (heavy import, only when submitting)

    validate_tenant_id(tenant_id)
    if not isinstance(token, str) or not token.strip():
        raise ValueError("token: must be a non-empty string (the caller's idempotency token)")
    try:
        token.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"token: not encodable as UTF-8 at character {exc.start} "
                         "(a lone surrogate); use a valid Unicode string") from exc
    if on_duplicate not in ("raise", "return"):
        raise ValueError(f"on_duplicate={on_duplicate!r}: must be 'raise' or 'return'")
    settings = get_settings()
    budget = settings.max_attempts if max_attempts is None else max_attempts
    if not isinstance(budget, int) or isinstance(budget, bool) or not 1 <= budget <= settings.max_attempts_limit:
        raise ValueError(f"max_attempts={shown_value(max_attempts)}: must be an integer from 1 to "
                         f"max_attempts_limit={settings.max_attempts_limit}")
    return parse_layout(layout), budget


def _admit_and_enqueue(tenant_id: str, token: str, job_id: str, spec, budget: int, input_key: str, *,
                       on_duplicate: str, upload_from: Path | None = None) -> str:
    """Admission, then (upload →) job item → publish; on any failure after admission, undo all."""
    try:
        admission.admit(tenant_id, token, job_id)
    except admission.DuplicateSubmission as dup:
        if on_duplicate == "return":
            log.info("token of tenant %s already submitted as job %s; returning it", tenant_id, dup.job_id)
            return dup.job_id
        raise
    try:
        if upload_from is not None:
            storage.upload(upload_from, input_key)
        try:
            _create_and_publish(tenant_id, token, job_id, spec, budget, input_key)
        except BaseException:
            if upload_from is not None:
                storage.delete(input_key)
            raise
    except BaseException:
        try:
            admission.abandon(tenant_id, token, job_id)
        except admission.AdmissionUnavailable as exc:  # keep the original error; the token expires
            log.error("job %s of tenant %s failed and its admission could not be undone: %s", job_id, tenant_id, exc)
        raise
    log.info("submitted job %s for tenant %s", job_id, tenant_id)
    return job_id


def _create_and_publish(tenant_id: str, token: str, job_id: str, spec, budget: int, input_key: str) -> None:
    """Write the job item through the door (:func:`leases.waiting.admit`): ``queued`` and published,
    or ``waiting`` (parked at the door, no message) and then a wake; withdraw the item if that fails."""
    transactions.ensure_tenant(tenant_id)
    job = JobItem(
        job_id,
        tenant_id=tenant_id,
        token=token,
        max_attempts=budget,
        layout=spec.model_dump(mode="json"),
        input_key=input_key,
        submitted_at=time.time(),
    )
    queued = waiting.admit(job, door=get_settings().waiting_policy == "handoff")
    try:
        if queued:
            publish_job(tenant_id, job_id)
        else:
            log.info("job %s of tenant %s parked at the door (its tenant has no room)", job_id, tenant_id)
            signals.job_deferred.send(sender=None, job_id=job_id, tenant_id=tenant_id, reason="cap", delay_s=None)
    except BaseException:
        waiting.withdraw(job)
        raise
    if not queued:
        try:
            waiting.wake(tenant_id, publish=publish_job, reason="door",
                         on_woken=lambda woken: signals.job_woken.send(sender=None, job=woken, reason="door"))
        except Exception as exc:  # noqa: BLE001 - the job is parked and counted; the sweeper wakes it
            log.warning("wake after parking job %s at the door failed (the sweeper will): %s", job_id, exc)
