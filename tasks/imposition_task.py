"""The imposition task: input PDF from S3 → engine → plate file to S3, under a lease.

``impose.delay(tenant_id=..., token=..., input_key=..., layout={...})`` is how internal callers
submit a job: it runs admission, creates the job item and publishes (see :mod:`tasks.submission`)
and returns the job id. Workers receive ``{"tenant_id", "job_id"}`` and :class:`FairTask` wraps the
run in a lease.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from imposition import SlugInfo, get_engine, parse_layout
from leases import transactions
from leases.models import JobItem
from leases.transactions import Lease
from service.settings import get_settings
from service.tenancy import plate_key
from tasks import storage
from tasks.base import FairTask, JobResult
from tasks.celery_app import app

log = logging.getLogger(__name__)


class ImposeTask(FairTask):
    """Impose one job's PDF onto press sheets and upload the plate file.

    Message kwargs: ``tenant_id`` (str), ``job_id`` (str). The plate goes to
    ``tenants/<tenant>/jobs/<job>/plate.pdf``; the engine's warnings to the job item. The slug's
    date is the job's submission date (UTC), so every attempt writes the same plate.
    """

    name = "imposition.impose"

    def delay(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        """Submit a job: ``delay(tenant_id=..., token=..., input_key=..., layout={...})``.

        Runs admission, creates the job item (``queued``) and publishes with the tenant's
        ``MessageGroupId``. Returns the job id (also the Celery task id).

        Raises:
            see :func:`tasks.submission.submit_job`.
        """
        from tasks.submission import submit_job  # noqa: PLC0415 (submission imports this module)

        if args:
            raise TypeError("impose.delay takes keyword arguments only: tenant_id, token, input_key, layout")
        return submit_job(**kwargs)

    def run(self, *, job: JobItem, lease: Lease, cancel: threading.Event) -> JobResult:
        """Download, impose, check the lease, upload. Raises the engine's typed errors."""
        settings = get_settings()
        spec = parse_layout(job.layout)
        key = plate_key(job.tenant_id, job.job_id)
        with tempfile.TemporaryDirectory(prefix="imposition-job-") as tmp:  # no path is built from an id
            source, plate = Path(tmp, "input.pdf"), Path(tmp, "plate.pdf")
            storage.download(job.input_key, source)
            submitted = datetime.fromtimestamp(float(job.submitted_at), tz=timezone.utc).date().isoformat()
            report = get_engine(settings).impose(
                source, spec, plate, slug=SlugInfo(job_id=job.job_id, tenant_id=job.tenant_id, date=submitted),
                cancel=cancel,
            )
            # Fence the upload: prove the lease is still ours right before writing the plate.
            transactions.renew(lease)
            storage.upload(plate, key)
        log.info("job %s imposed: %s sheets, %s sides in %.2f s", job.job_id, report.sheets, report.sides,
                 report.duration_s)
        if report.warnings:
            log.warning("job %s imposed with warnings: %s", job.job_id,
                        "; ".join(f"{w.code}: {w.message}" for w in report.warnings))
        return JobResult(output_key=key, sheets=report.sheets, sides=report.sides,
                         warnings=tuple(w.to_json() for w in report.warnings))


impose: ImposeTask = app.register_task(ImposeTask())  # type: ignore[assignment]
