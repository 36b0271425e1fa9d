"""The webhook delivery task and its trigger (docs/design.md §1: webhook to the tenant → tenant confirms).

Every final status is written with its outbox entry (:mod:`leases.outbox`). The receivers of
:data:`leases.signals.job_finished` (``succeeded``/``failed``; sent after the lease is released) and
of :data:`leases.signals.lease_recovered` with ``requeued=False`` publish the first round at once;
:func:`drain_outbox` (``imposition.drain_webhook_outbox``, beat, every
``webhook_outbox_drain_interval_s``, on ``maintenance``) sends a round for every event nothing settled
within ``webhook_outbox_grace_s``. A round POSTs only in one of its tenant's delivery slots
(:mod:`imposition.webhooks.fairness`); one that finds them taken is published again with ``busy_deferrals + 1``
and an SQS delay (``webhook_tenant_busy_delay_s`` doubled, ≤ ``webhook_tenant_busy_delay_max_s``).

Task ``imposition.deliver_webhook`` (kwargs ``job_id``, ``tenant_id``, ``round_number``,
``first_round_at``, ``busy_deferrals``) on the ``notifications`` queue, each message with the
tenant's ``MessageGroupId``. Timeline of one event::

    round 1 ── failed ─► SQS DelaySeconds d ─► round 2 ── failed ─► 2d ─► … ─► delivered
      (≤ webhook_attempt_budget_s each)      d = webhook_redelivery_delay_s, doubled, ≤ 900 s
    … until the next round would start later than webhook_give_up_after_s after round 1:
      record gave_up (the job stays in its tenant's in-flight count until the tenant confirms it
      or the entry reaches Settings.admission_in_flight_expiry_s; see :mod:`imposition.admission.control`)

Each round runs under Celery time limits from :func:`imposition.webhooks.delivery.round_time_limits`
(``acks_on_timeout=False``, ``acks_on_failure=False``: a killed or escaped round stays in the queue).
Delivery is at least once (tenants drop a repeat by its event id). Why: docs/design.md, "Webhooks:
the outbox, fair delivery, shared replay store".
"""

from __future__ import annotations

import logging
import time

from pynamodb.exceptions import DoesNotExist

from leases import outbox
from leases.models import JobItem
from imposition.common.celery_app import app
from imposition.common.settings import get_settings
from imposition.common.sqs import backoff_s, delay_seconds, publish_retry_policy
from imposition.common.tenancy import message_group_id
from leases import signals
from leases.signals import JobOutcome
from imposition.webhooks import delivery, fairness

log = logging.getLogger(__name__)

TASK_NAME = "imposition.deliver_webhook"
DRAIN_TASK_NAME = "imposition.drain_webhook_outbox"
#: job_finished outcomes that end a job and so send its tenant an event.
FINAL_OUTCOMES = frozenset(o for o in JobOutcome if o.is_final)


def redelivery_delay_s(round_number: int) -> int:
    """SQS delay before round ``round_number + 1``: the base delay doubled per round, <= 900 s."""
    return backoff_s(get_settings().webhook_redelivery_delay_s, round_number)


def publish_delivery(tenant_id: str, job_id: str, *, round_number: int = 1, first_round_at: float | None = None,
                     delay_s: int = 0, busy_deferrals: int = 0) -> None:
    """Publish one delivery round of ``job_id``'s event, held by SQS for ``delay_s`` (0–900) seconds.

    Raises:
        ValueError: ``delay_s`` outside 0–900 s (the SQS DelaySeconds limit).
        kombu.exceptions.OperationalError, botocore.exceptions.ClientError: the publish failed.
    """
    delay_s = delay_seconds(delay_s)
    deliver_webhook.apply_async(
        kwargs={"job_id": job_id, "tenant_id": tenant_id, "round_number": round_number,
                "first_round_at": first_round_at, "busy_deferrals": busy_deferrals},
        queue=get_settings().notifications_queue,
        MessageGroupId=message_group_id(tenant_id),
        DelaySeconds=delay_s,
        # no limits in the message: the worker applies the ones its own settings derive (ROUND_TIME_LIMITS)
        time_limit=None, soft_time_limit=None,
        retry=True,
        retry_policy=publish_retry_policy(),
    )


#: This process's time limits of a round (the worker's settings, read once at import).
ROUND_TIME_LIMITS = delivery.round_time_limits()


@app.task(name=TASK_NAME, acks_late=True, ignore_result=True, acks_on_failure=False, acks_on_timeout=False,
          soft_time_limit=ROUND_TIME_LIMITS.soft_s, time_limit=ROUND_TIME_LIMITS.hard_s)
def deliver_webhook(*, job_id: str, tenant_id: str, round_number: int = 1,
                    first_round_at: float | None = None, busy_deferrals: int = 0) -> dict:
    """Run one delivery round; if it failed, schedule the next through SQS or give up; if its tenant's
    delivery slots were all taken, publish it again with a delay.

    Returns ``{"job_id", "status", "round"}``; status is a :class:`imposition.webhooks.delivery.RoundReport`
    status (``busy``: put back), or ``retrying`` / ``gave_up`` for a failed round.
    """
    started = time.time() if first_round_at is None else float(first_round_at)
    try:
        report = delivery.deliver_round(job_id, tenant_id)
    except Exception as exc:  # noqa: BLE001 - DynamoDB unreachable, or the soft time limit outside the POSTs:
        # a failed round, not a lost event
        log.warning("webhook of job %s (tenant %s): round %s could not run: %s: %s",
                    job_id, tenant_id, round_number, type(exc).__name__, exc)
        report = delivery.RoundReport("failed", 0, f"round could not run: {type(exc).__name__}")
    if report.status == delivery.BUSY:
        publish_delivery(tenant_id, job_id, round_number=round_number, first_round_at=started,
                         delay_s=fairness.busy_delay_s(busy_deferrals, report.retry_after_s or 1),
                         busy_deferrals=busy_deferrals + 1)
        signals.webhook_put_back.send(sender=deliver_webhook, tenant_id=tenant_id, job_id=job_id)
        return {"job_id": job_id, "status": delivery.BUSY, "round": round_number}
    if report.status != "failed":
        return {"job_id": job_id, "status": report.status, "round": round_number}
    delay_s = redelivery_delay_s(round_number)
    if time.time() + delay_s - started > get_settings().webhook_give_up_after_s:
        _record_quietly(job_id, delivery.GAVE_UP, report)
        log.error("webhook of job %s (tenant %s): gave up after %s round(s): %s",
                  job_id, tenant_id, round_number, report.error)
        return {"job_id": job_id, "status": delivery.GAVE_UP, "round": round_number}
    _record_quietly(job_id, delivery.RETRYING, report, due_at=delivery.outbox_due_at(time.time(), delay_s))
    publish_delivery(tenant_id, job_id, round_number=round_number + 1, first_round_at=started, delay_s=delay_s)
    return {"job_id": job_id, "status": delivery.RETRYING, "round": round_number}


def _record_quietly(job_id: str, status: str, report: delivery.RoundReport, *, due_at: float | None = None) -> None:
    """Record a failed round; if even that fails, log it (the next round is scheduled regardless)."""
    try:
        delivery.record(job_id, status, attempts=report.attempts, error=report.error, due_at=due_at)
    except Exception as exc:  # noqa: BLE001 - recording is best effort; the next round is scheduled regardless
        log.error("webhook of job %s: could not record %s: %s", job_id, status, exc)


def queue_webhook(tenant_id: str, job_id: str) -> None:
    """Publish the first delivery round of a job that just ended; never raises.

    ``pending`` was written with the job's final status (the outbox); a failed publish is left to
    :func:`drain_outbox`, which sends the round once ``webhook_outbox_grace_s`` has passed.
    """
    try:
        publish_delivery(tenant_id, job_id, first_round_at=time.time())
    except Exception as exc:  # noqa: BLE001 - a signal receiver must not fail the job that sent it
        log.error("webhook of job %s (tenant %s) not queued (the outbox drain will send it): %s",
                  job_id, tenant_id, exc)


@app.task(name=DRAIN_TASK_NAME, acks_late=True, ignore_result=True)
def drain_outbox() -> dict:
    """Send a round for every outbox entry due now (:mod:`leases.outbox`); returns counts.

    Each entry is read again (the index lags) and claimed (its ``webhook_due_at`` moved past the
    round it is about to get, conditionally, so two drains never both send it) before its round is
    published, with the job's end as the round's ``first_round_at`` (the give-up clock starts when
    the job ended). An entry that already had a drain round after its give-up deadline and is still
    not settled (its rounds keep dying before they record anything) is recorded ``gave_up``. An entry
    whose step fails is logged and left for the next drain.

    Returns:
        ``{"sent": n, "gave_up": n, "failed": n}``.
    """
    now = time.time()
    s = get_settings()
    counts = {"sent": 0, "gave_up": 0, "failed": 0}
    for entry in outbox.due(now, limit=s.webhook_outbox_drain_batch):
        try:
            job = JobItem.get(entry.job_id, consistent_read=True)
        except DoesNotExist:
            continue
        except Exception as exc:  # noqa: BLE001 - the next drain tries again
            log.warning("outbox: could not read job %s: %s", entry.job_id, exc)
            counts["failed"] += 1
            continue
        if job.outbox_partition is None or job.webhook_due_at is None or float(job.webhook_due_at) >= now:
            continue  # settled, or moved on, since the index was read
        first_round_at = float(job.finished_at or now)
        try:
            if job.webhook_drained_at is not None and (
                    float(job.webhook_drained_at) > first_round_at + s.webhook_give_up_after_s):
                delivery.record(job.job_id, delivery.GAVE_UP,
                                error=f"no delivery round finished within webhook_give_up_after_s="
                                      f"{s.webhook_give_up_after_s:g} s of the job's end")
                log.error("webhook of job %s (tenant %s): gave up (outbox)", job.job_id, job.tenant_id)
                counts["gave_up"] += 1
                continue
            if not outbox.claim(job, now=now, due_at=delivery.outbox_due_at(now)):
                continue
            publish_delivery(job.tenant_id, job.job_id, first_round_at=first_round_at)
        except Exception as exc:  # noqa: BLE001 - one job's failure must not stop the drain of the others
            log.warning("outbox: round of job %s (tenant %s) not sent: %s", job.job_id, job.tenant_id, exc)
            counts["failed"] += 1
            continue
        log.warning("outbox: webhook of job %s (tenant %s) unsettled %.0f s after the job ended; round sent",
                    job.job_id, job.tenant_id, now - first_round_at)
        signals.webhook_drained.send(sender=drain_outbox, tenant_id=job.tenant_id, job_id=job.job_id,
                                     unsettled_s=now - first_round_at)
        counts["sent"] += 1
    return counts


def _job_finished(sender: object = None, job: JobItem | None = None, outcome: str | None = None,
                  **_: object) -> None:
    """job_finished receiver: a job ended on a worker (its lease already released)."""
    if job is not None and outcome in FINAL_OUTCOMES:
        queue_webhook(job.tenant_id, job.job_id)


def _job_failed_by_sweeper(sender: object = None, lease=None, requeued: bool = True, **_: object) -> None:
    """lease_recovered receiver: a reclaimed job that was out of attempts ended ``failed`` (maintenance worker)."""
    if lease is not None and not requeued:
        queue_webhook(lease.tenant_id, lease.job_id)


def install() -> None:
    """Connect the webhook triggers (job_finished, lease_recovered) (idempotent: a receiver connected twice is connected once)."""
    signals.job_finished.connect(_job_finished)
    signals.lease_recovered.connect(_job_failed_by_sweeper)
