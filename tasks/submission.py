"""Submitting jobs: ``impose.delay(...)``, :func:`submit` (a local PDF) and ``imposition submit``.

Order of one submission, each step undone if a later one fails, so a failed submission leaves
nothing behind::

    validate (tenant id, own input key, layout) → job item (queued) → publish (MessageGroupId)

The job item is written before the message exists, so a worker never receives a job it cannot
find; if the publish fails, the job item (and an input this call uploaded) is deleted again.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

from leases import transactions
from leases.models import JobItem
from service.settings import get_settings
from service.tenancy import check_own_key, input_key as derive_input_key, validate_tenant_id
from tasks import storage
from tasks.messages import publish_job

log = logging.getLogger(__name__)


def new_job_id() -> str:
    """A fresh job id (UUID4, hex): also the Celery task id of every copy of its message."""
    return uuid.uuid4().hex


def submit_job(
    *,
    tenant_id: str,
    token: str,
    input_key: str,
    layout: dict[str, Any] | str,
    max_attempts: int | None = None,
    job_id: str | None = None,
) -> str:
    """Submit a job whose input PDF is already in the bucket; return its job id.

    Args:
        tenant_id: canonical tenant id (see :mod:`service.tenancy`).
        token: the caller's idempotency token for this job.
        input_key: S3 key of the input PDF, under ``tenants/<tenant_id>/``.
        layout: the layout specification (dict or JSON text), validated here.
        max_attempts: attempt budget (default ``Settings.max_attempts``).
        job_id: use this id (default: a new UUID4).

    Raises:
        service.tenancy.InvalidTenantId, service.tenancy.ForeignKeyRefused: bad identity or key.
        imposition.errors.InvalidLayout: the layout fails validation (names field, value, limit).
        ValueError: an empty token or a max_attempts below 1.
        kombu/botocore errors: the publish failed (nothing is left behind).
    """
    from imposition import parse_layout  # noqa: PLC0415 (heavy import, only when submitting)

    settings = get_settings()
    validate_tenant_id(tenant_id)
    check_own_key(tenant_id, input_key)
    if not isinstance(token, str) or not token.strip():
        raise ValueError("token: must be a non-empty string (the caller's idempotency token)")
    budget = settings.max_attempts if max_attempts is None else int(max_attempts)
    if budget < 1:
        raise ValueError(f"max_attempts={max_attempts}: must be >= 1")
    spec = parse_layout(layout)
    job_id = job_id or new_job_id()

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
    job.save(condition=JobItem.job_id.does_not_exist())
    try:
        publish_job(tenant_id, job_id)
    except Exception:
        job.delete()
        raise
    log.info("submitted job %s for tenant %s", job_id, tenant_id)
    return job_id


def submit(
    path: str | Path,
    *,
    tenant_id: str,
    token: str,
    layout: dict[str, Any] | str,
    max_attempts: int | None = None,
) -> str:
    """Upload the local PDF ``path`` under the tenant's prefix and submit it; return the job id.

    The input goes to ``tenants/<tenant>/jobs/<job>/input.pdf``; it is deleted again if the
    submission is refused or fails.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        everything :func:`submit_job` raises.
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"input PDF {str(source)!r} does not exist")
    validate_tenant_id(tenant_id)
    job_id = new_job_id()
    key = derive_input_key(tenant_id, job_id)
    storage.upload(source, key)
    try:
        return submit_job(
            tenant_id=tenant_id, token=token, input_key=key, layout=layout, max_attempts=max_attempts, job_id=job_id
        )
    except BaseException:
        storage.delete(key)
        raise
