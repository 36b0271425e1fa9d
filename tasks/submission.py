"""Submitting jobs: ``impose.delay(...)``, :func:`submit` (a local PDF) and ``imposition submit``.

Order of one submission, each step undone if a later one fails, so a failed submission leaves
nothing behind::

    validate (tenant id, once: a TenantId below; own input key, token, layout, file name, each within its bound:
      docs/operations.md "Submission fields"; submit(): open the file in the engine's child)
      → registered tenant (unknown_tenant unless Settings.auto_register_tenants)
      → admission (Redis, the fast check: idempotency token, job id, rate limit, in-flight cap;
        :func:`admission.reserve`)
      → [submit(): upload the input]
      → admit (:func:`leases.waiting.admit`): one DynamoDB transaction, the token's claim (the
        durable check, its rules in :mod:`imposition.admission.claims`) + job item (queued, or
        waiting: parked at the door) + the tenant's counter
      → publish (MessageGroupId); a job parked at the door is not published, its tenant is woken

A refused submission costs no upload, no job item and no message; the job item exists before its
message; a token Redis forgot is refused by its claim exactly as Redis would refuse it
(:class:`admission.DuplicateSubmission`); a job id any job already has is refused with
:class:`admission.DuplicateJobId`. A taken token raises :class:`admission.DuplicateSubmission` with
the existing job id, or, with ``on_duplicate="return"``, returns that id (an idempotent retry).
Why this order: docs/design.md, "Submission: the order and what each step undoes".
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from imposition import admission
from imposition.admission import claims
from imposition.engine import parse_layout
from imposition.engine.errors import InputError, InputTooLarge, NotAPdf
from leases import waiting
from leases.errors import AdmitRefused, LeaseContention
from leases.models import JobItem
from imposition.common.settings import get_settings
from imposition.common.tenancy import (
    check_own_key,
    input_key as derive_input_key,
    TenantId,
    shown_value,
    validate_job_id,
    validate_tenant_id,
)
from leases import signals
from . import storage
from .messages import publish_job

log = logging.getLogger(__name__)


class SubmissionFieldError(ValueError):
    """A submission field is malformed or over its bound; nothing was admitted, uploaded, written or
    published. The message names the field, what it was (its size, never the whole value) and the
    limit.

    Attributes:
        field: the argument's name (``token``, ``layout``, ``file_name``, ...).
        limit: the bound it broke, in the unit the message names (bytes, characters), or None for
            a malformed value.
    """

    def __init__(self, field: str, message: str, limit: int | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.limit = limit


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
    file_name: str | None = None,
) -> str:
    """Submit a job whose input PDF is already in the bucket; return its job id.

    Args:
        tenant_id: canonical tenant id (see :mod:`imposition.common.tenancy`).
        token: the caller's idempotency token for this job (1–``Settings.idempotency_token_max_len``
            characters); a token is taken for ``idempotency_ttl_s`` (48 h) after its submission.
        input_key: S3 key of the input PDF, under ``tenants/<tenant_id>/``, at most 1,024 UTF-8
            bytes (S3's limit), no control characters.
        layout: the layout specification (dict or JSON text), validated here.
        max_attempts: attempt budget, 1–``Settings.max_attempts_limit`` (default ``Settings.max_attempts``).
        job_id: use this id (default: a new UUID4); 1–64 characters from ``[A-Za-z0-9_-]``.
        on_duplicate: ``"raise"`` (default) raises :class:`admission.DuplicateSubmission` for a taken
            token; ``"return"`` returns the job id that holds the token instead.
        file_name: the name of the file the tenant sent, kept on the job for ``imposition jobs list
            --file`` and named by the job's errors and warnings: 1–``Settings.file_name_max_bytes``
            UTF-8 bytes, no ``/`` or control character. Default: the last segment of ``input_key``.

    The input itself is not read here (it may be large, and it is in the bucket already): a
    damaged file fails its job at once (``damaged``, no retry), naming ``file_name``. :func:`submit`
    checks a local file at the door.

    Raises:
        imposition.common.tenancy.InvalidTenantId, imposition.common.tenancy.InvalidJobId,
            imposition.common.tenancy.ForeignKeyRefused, imposition.common.tenancy.InvalidKey: bad
            identity or key (``NonCanonicalTenantId``: an upper-case spelling, the canonical one
            named; ``InvalidKey``: over S3's 1,024 bytes or a control character).
        SubmissionFieldError: a token, layout or file name over its bound (names field and limit).
        admission.UnknownTenant: no such tenant registered and ``Settings.auto_register_tenants``
            off (code ``unknown_tenant``; nothing written).
        imposition.engine.errors.InvalidLayout: the layout fails validation (names field, value, limit).
        ValueError: a max_attempts that is not an integer from 1 to ``Settings.max_attempts_limit``,
            a bad ``on_duplicate`` (and :class:`SubmissionFieldError`, a ValueError too: an empty,
            too long or not UTF-8-encodable token, a layout or file name over its bound).
        admission.DuplicateSubmission, admission.DuplicateJobId, admission.RateLimited,
            admission.InFlightLimitReached: refused (all :class:`admission.AdmissionRefused`); nothing
            was written or published, nothing of another job or tenant changed.
        admission.AdmissionUnavailable: Redis unreachable, or the token claim kept conflicting;
            fails closed, nothing published.
        kombu/botocore/pynamodb errors: a later step failed (nothing is left behind).
    """
    tenant = validate_tenant_id(tenant_id)  # the door: the layers below trust a TenantId
    check_own_key(tenant, input_key)
    job_id = new_job_id() if job_id is None else validate_job_id(job_id)
    spec, budget = _validated(token, layout, max_attempts, on_duplicate)
    name = checked_file_name(file_name) if file_name is not None else key_file_name(input_key)
    return _admit_and_enqueue(tenant, token, job_id, spec, budget, input_key, on_duplicate=on_duplicate,
                              file_name=name)


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

    The file is checked at the door first: a PDF header (:func:`check_pdf_header`), then opened in
    the engine's limited child (:meth:`imposition.Engine.probe`: a hostile file is parsed only
    there, under the content budget), every page's content, resources and boxes read whole, so an
    empty, non-PDF, damaged (a truncated file included), encrypted or page-less file is refused
    naming the caller's file, before admission, upload or publish (the layout's fit is checked when
    the job runs, and fails the job). The job keeps the file's name (``file_name``). Admission runs before
    the upload; the input goes to ``tenants/<tenant>/jobs/<job>/input.pdf`` and is deleted again if
    a later step fails. ``on_duplicate`` as in :func:`submit_job`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        imposition.engine.errors.InputTooLarge: the file is larger than ``Settings.max_input_bytes``.
        imposition.engine.errors.NotAPdf, NoPages, DamagedPdf, PasswordRequired, TooManyPages (all
            ``InputError``): refused at the door, nothing admitted, uploaded or published.
        everything :func:`submit_job` raises.
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"input PDF {shown_value(str(source))} does not exist")
    size_bytes, limit_bytes = source.stat().st_size, get_settings().max_input_bytes
    if size_bytes > limit_bytes:
        raise InputTooLarge(f"input PDF {shown_value(str(source))}: {size_bytes} bytes is more than max_input_bytes={limit_bytes}")
    tenant = validate_tenant_id(tenant_id)  # the door: the layers below trust a TenantId
    spec, budget = _validated(token, layout, max_attempts, on_duplicate)
    from imposition.engine import get_engine  # noqa: PLC0415 (heavy import, only when submitting)

    check_pdf_header(source)
    get_engine(get_settings()).probe(source, spec)
    job_id = new_job_id()
    return _admit_and_enqueue(tenant, token, job_id, spec, budget, derive_input_key(tenant, job_id),
                              on_duplicate=on_duplicate, upload_from=source, file_name=key_file_name(source.name))


def key_file_name(input_key: str) -> str:
    """The last segment of ``input_key`` (or of a local path), cut to ``Settings.file_name_max_bytes``,
    a character UTF-8 cannot hold (a file name's undecodable byte) as ``?``: the file name of a job
    submitted without one."""
    name = PurePosixPath(input_key).name or "input.pdf"
    limit = get_settings().file_name_max_bytes
    return name.encode("utf-8", "replace")[:limit].decode("utf-8", "ignore")


#: The header must start within the first 1024 bytes (PDF 32000-1 §7.5.2; readers accept it there).
PDF_HEADER_WINDOW_BYTES = 1024


def check_pdf_header(path: Path) -> None:
    """Refuse ``path`` at the door unless it is a non-empty file with ``%PDF-`` in its first 1024
    bytes, naming the caller's file (a worker would fail the job as ``not_a_pdf`` seconds later,
    naming only ``input.pdf``); the cheap first step of :func:`submit`'s door check, before the
    engine's child opens the file.

    Raises:
        imposition.engine.errors.NotAPdf: empty, or no header.
        imposition.engine.errors.InputError: the file cannot be read.
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


def _validated(token: str, layout: dict[str, Any] | str, max_attempts: int | None, on_duplicate: str):
    """Every check of the fields but the tenant id's (the caller's, first) that needs no I/O;
    returns (layout spec, attempt budget)."""
    settings = get_settings()
    if not isinstance(token, str) or not token.strip():
        raise SubmissionFieldError("token", "must be a non-empty string (the caller's idempotency token)")
    if len(token) > settings.idempotency_token_max_len:
        raise SubmissionFieldError("token", f"{len(token)} characters is more than idempotency_token_max_len="
                                   f"{settings.idempotency_token_max_len}", settings.idempotency_token_max_len)
    try:
        token.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SubmissionFieldError("token", f"not encodable as UTF-8 at character {exc.start} "
                                   "(a lone surrogate); use a valid Unicode string") from exc
    if on_duplicate not in ("raise", "return"):
        raise ValueError(f"on_duplicate={shown_value(on_duplicate)}: must be 'raise' or 'return'")
    budget = settings.max_attempts if max_attempts is None else max_attempts
    if not isinstance(budget, int) or isinstance(budget, bool) or not 1 <= budget <= settings.max_attempts_limit:
        raise ValueError(f"max_attempts={shown_value(max_attempts)}: must be an integer from 1 to "
                         f"max_attempts_limit={settings.max_attempts_limit}")
    if isinstance(layout, (str, bytes)) and len(layout) > settings.max_layout_bytes:  # before parsing megabytes
        unit = "bytes" if isinstance(layout, bytes) else "characters"  # a character is at least a byte
        raise SubmissionFieldError("layout", f"{len(layout)} {unit} is more than max_layout_bytes="
                                   f"{settings.max_layout_bytes}", settings.max_layout_bytes)
    spec = parse_layout(layout)
    stored_bytes = len(json.dumps(spec.model_dump(mode="json"), separators=(",", ":")).encode("utf-8"))
    if stored_bytes > settings.max_layout_bytes:
        raise SubmissionFieldError("layout", f"{stored_bytes} bytes of JSON is more than max_layout_bytes="
                                   f"{settings.max_layout_bytes}", settings.max_layout_bytes)
    return spec, budget


def checked_file_name(file_name: str | None) -> str | None:
    """``file_name`` if it is a file name within ``Settings.file_name_max_bytes`` (None stays None).

    Raises:
        SubmissionFieldError: not a string, empty, over the bound, not UTF-8 encodable, or holding
            a ``/`` or a control character.
    """
    if file_name is None:
        return None
    limit = get_settings().file_name_max_bytes
    if not isinstance(file_name, str) or not file_name.strip():
        raise SubmissionFieldError("file_name", "must be a non-empty string")
    if len(file_name) > limit:
        raise SubmissionFieldError("file_name", f"{len(file_name)} characters is more than file_name_max_bytes={limit}",
                                   limit)
    try:
        size_bytes = len(file_name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise SubmissionFieldError("file_name", f"not encodable as UTF-8 at character {exc.start}") from None
    if size_bytes > limit:
        raise SubmissionFieldError("file_name", f"{size_bytes} bytes (UTF-8) is more than file_name_max_bytes={limit}",
                                   limit)
    if "/" in file_name or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in file_name):
        raise SubmissionFieldError("file_name", "a file name only: no '/' and no control character")
    return file_name


def _admit_and_enqueue(tenant_id: TenantId, token: str, job_id: str, spec, budget: int, input_key: str, *,
                       on_duplicate: str, upload_from: Path | None = None, file_name: str | None = None) -> str:
    """Registration, admission, then (upload →) job item → publish; on any failure after admission,
    undo all."""
    admission.check_registered(tenant_id)
    try:
        admission.reserve(tenant_id, token, job_id)
    except admission.DuplicateSubmission as dup:
        return _duplicate(dup, on_duplicate)
    try:
        if upload_from is not None:
            storage.upload(upload_from, input_key)
        try:
            _create_and_publish(tenant_id, token, job_id, spec, budget, input_key, file_name)
        except BaseException:
            if upload_from is not None:
                storage.delete(input_key)
            raise
    except admission.DuplicateSubmission as dup:  # the durable claim refused a token Redis had forgotten
        _abandon(tenant_id, token, job_id)
        _restore_fast_check(tenant_id, token)
        return _duplicate(dup, on_duplicate)
    except BaseException:
        _abandon(tenant_id, token, job_id)
        raise
    log.info("submitted job %s for tenant %s", job_id, tenant_id)
    return job_id


def _duplicate(dup: admission.DuplicateSubmission, on_duplicate: str) -> str:
    """``dup.job_id`` if ``on_duplicate`` is ``"return"``; else raise ``dup``."""
    if on_duplicate == "return":
        log.info("token of tenant %s already submitted as job %s; returning it", dup.tenant_id, dup.job_id)
        return dup.job_id
    raise dup


def _abandon(tenant_id: TenantId, token: str, job_id: str) -> None:
    """Undo the Redis admission of ``job_id``; a Redis failure is logged (the caller keeps its error)."""
    try:
        admission.abandon(tenant_id, token, job_id)
    except admission.AdmissionUnavailable as exc:  # keep the original error; the token expires
        log.error("job %s of tenant %s failed and its admission could not be undone: %s", job_id, tenant_id, exc)


def _restore_fast_check(tenant_id: TenantId, token: str) -> None:
    """Put the token back into Redis as held by its claim's job, for the rest of the claim's life
    (best effort: without it the next duplicate is still refused, by the claim)."""
    try:
        claim = claims.read_claim(tenant_id, token)
        if claim is not None:
            admission.get_admission().remember_token(tenant_id, token, claim.job_id,
                                                     ttl_s=float(claim.expires_at) - time.time())
    except Exception as exc:  # noqa: BLE001 (an optimisation: never fail the refusal for it)
        log.warning("token of tenant %s: could not restore its Redis fast check: %s", tenant_id, exc)


def _create_and_publish(tenant_id: TenantId, token: str, job_id: str, spec, budget: int, input_key: str,
                        file_name: str | None = None) -> None:
    """Admit the job (:func:`leases.waiting.admit`: the job item, its token's claim and its
    tenant's counter in one transaction): ``queued`` and published, or ``waiting`` (parked at the
    door, no message) and then a wake; withdraw all three (:func:`leases.waiting.withdraw`) if the
    publish fails.

    Raises:
        admission.DuplicateSubmission: the token's claim is held by another job (nothing written).
        admission.DuplicateJobId: a job with ``job_id`` exists (nothing written).
        admission.AdmissionUnavailable: the claim transaction kept conflicting (nothing written).
        kombu/botocore/pynamodb errors: DynamoDB or the publish failed.
    """
    job = JobItem(
        job_id,
        tenant_id=tenant_id,
        token=token,
        max_attempts=budget,
        layout=spec.model_dump(mode="json"),
        input_key=input_key,
        file_name=file_name,
        submitted_at=time.time(),
    )
    claim = claims.token_claim(job, ttl_s=admission.limits_for(tenant_id).idempotency_ttl_s)
    try:
        queued = waiting.admit(job, claim, door=get_settings().waiting_policy == "handoff")
    except (AdmitRefused, LeaseContention) as refused:
        raise claims.refusal(refused, tenant_id) from refused
    try:
        if queued:
            publish_job(tenant_id, job_id)
        else:
            log.info("job %s of tenant %s parked at the door (its tenant has no room)", job_id, tenant_id)
            signals.job_deferred.send(sender=None, job_id=job_id, tenant_id=tenant_id, reason="cap", delay_s=None)
    except BaseException:
        try:
            waiting.withdraw(job, claim)
        except Exception as exc:  # noqa: BLE001 (keep the publish error; the claim expires with its TTL)
            log.error("job %s of tenant %s: publish failed and its job item and claim could not be deleted: %s",
                      job_id, tenant_id, exc)
        raise
    if not queued:
        try:
            waiting.wake(tenant_id, publish=publish_job, reason="door",
                         on_woken=lambda woken: signals.job_woken.send(sender=None, job=woken, reason="door"))
        except Exception as exc:  # noqa: BLE001 - the job is parked and counted; the sweeper wakes it
            log.warning("wake after parking job %s at the door failed (the sweeper will): %s", job_id, exc)
