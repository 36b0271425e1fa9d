"""Submitting an input the door would refuse, to test what a worker does with it.

``submit()`` opens a local file before anything is uploaded and refuses a bad one; a bad input can
still reach a worker through ``submit_job`` (``impose.delay``): its file is already in the bucket,
uploaded by the caller. :func:`submit_uploaded` takes that road.
"""

from __future__ import annotations

import uuid
from pathlib import Path


def submit_uploaded(path: Path, *, tenant_id: str, token: str, layout, **options) -> str:
    """Upload ``path`` as the input of a new job of ``tenant_id`` and submit it with ``submit_job``
    (no door check of the file); returns the job id."""
    from imposition.common.tenancy import input_key
    from tasks import storage
    from tasks.submission import submit_job

    job_id = uuid.uuid4().hex
    key = input_key(tenant_id, job_id)
    storage.upload(Path(path), key)
    return submit_job(tenant_id=tenant_id, token=token, input_key=key, layout=layout, job_id=job_id, **options)
