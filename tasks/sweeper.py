"""The sweeper task: Celery beat sends it every ``sweep_interval_s`` to the ``maintenance`` queue.

``celery -A tasks worker -Q maintenance -c 1`` runs it; the logic is :func:`leases.sweeper.sweep`.
"""

from __future__ import annotations

import logging
import time

from leases import sweeper
from leases.models import LeaseItem
from imposition.common import aws
from imposition.common.settings import get_settings
from leases import signals
from .celery_app import app
from .messages import publish_job

log = logging.getLogger(__name__)


def visible_messages() -> int:
    """Messages visible in the imposition queue now (SQS ApproximateNumberOfMessages)."""
    queue = get_settings().imposition_queue
    attributes = aws.sqs().get_queue_attributes(QueueUrl=aws.queue_url(queue),
                                                AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


@app.task(name="imposition.sweep", acks_late=True, ignore_result=True)
def sweep() -> dict:
    """Reclaim expired leases, re-publish their jobs, bring back waiting and lost jobs; returns
    counts per tenant.

    Sends :data:`leases.signals.lease_recovered` for each reclaimed lease (``lease_recovered{tenant}``),
    and :data:`leases.signals.sweep_completed` once it ran to its end (``sweeper_last_sweep_timestamp_seconds``:
    the alert ImpositionSweepsStopped reads it).
    Idempotent and safe to run twice at once (see :mod:`leases.sweeper`).
    """
    now = time.time()

    def recovered(lease: LeaseItem, requeued: bool) -> None:
        signals.lease_recovered.send(sender=sweep, lease=lease, requeued=requeued, swept_at=now)
        if requeued:
            signals.job_republished.send(sender=sweep, job=None, reason="lease_expired")

    def woken(job) -> None:
        signals.job_woken.send(sender=sweep, job=job, reason="sweeper")
        signals.job_republished.send(sender=sweep, job=job, reason="lost_handoff")

    report = sweeper.sweep(
        now, publish=publish_job, on_reclaimed=recovered, on_woken=woken,
        on_republished=lambda job: signals.job_republished.send(sender=sweep, job=job, reason="lost_message"),
        backlog=visible_messages,
    )
    if report.total:
        log.warning("sweeper reclaimed %s lease(s): %s", report.total, dict(report.reclaimed))
    signals.sweep_completed.send(sender=sweep, finished_at=time.time(), report=report)
    return {
        "reclaimed": dict(report.reclaimed),
        "requeued": dict(report.requeued),
        "failed": dict(report.failed),
        "orphans": dict(report.orphans),
        "lost_races": report.lost_races,
        "woken": dict(report.woken),
        "republished": dict(report.republished),
        "nodes_dropped": report.nodes_dropped,
        "held_for_report": report.held_for_report,
        "held_for_skew": report.held_for_skew,
    }
