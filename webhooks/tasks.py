"""The webhook delivery task and its trigger (DESIGN §1: webhook to the tenant → tenant confirms).

Triggers: :data:`tasks.signals.job_finished` (outcome ``succeeded`` or ``failed``; ``retrying`` is
ignored), which :class:`tasks.base.FairTask` sends *after* the lease is released, and
:data:`tasks.signals.lease_recovered` with ``requeued=False`` (the sweeper failed a job that was out
of attempts). The receivers only record ``webhook_status = pending`` and publish a message, so
delivery never holds an imposition slot and never makes a job wait for a tenant's endpoint.

Task ``imposition.deliver_webhook`` (kwargs ``job_id``, ``tenant_id``, ``round_number``, ``first_round_at``)
runs on its own queue ``notifications`` (``celery -A tasks worker -Q notifications -c 2``); every
message carries the tenant's ``MessageGroupId``, so one tenant's failing endpoint cannot crowd out
the others' deliveries on that queue either. Timeline of one event::

    round 1 ── failed ─► SQS DelaySeconds d ─► round 2 ── failed ─► 2d ─► … ─► delivered
      (≤ webhook_attempt_budget_s each)      d = webhook_redelivery_delay_s, doubled, ≤ 900 s
    … until the next round would start later than webhook_give_up_after_s after round 1:
      record gave_up (the job stays in its tenant's in-flight count until the tenant confirms it
      or the entry reaches Settings.admission_in_flight_expiry_s; see :mod:`admission.control`)

Each round runs under Celery time limits derived from the settings
(:func:`webhooks.delivery.round_time_limits`), so an endpoint that answers one byte per second holds
a notifications slot for the soft limit at most, never longer: the soft limit fails the round, which
is recorded and re-published like any failed round. The hard limit (soft + grace) kills a child
that did not get that far; the message is then requeued (``acks_on_timeout=False``: SQS shows it
again after ``sqs_wait_time_s``), and an exception that escapes the task leaves it in the queue too
(``acks_on_failure=False``: back after the visibility timeout), so no event is lost; a message that
keeps failing that way reaches the ``notifications`` dead-letter queue after ``max_receive_count``
receives. Keep the hard limit below the queues' visibility timeout, or SQS hands a running round's
message to a second worker (a duplicate POST).

Delivery is at least once: a message delivered twice by SQS may POST the event twice (same event
id); the tenant drops the second by its id.
"""

from __future__ import annotations

import logging
import time

from leases.models import JobItem
from service.settings import SQS_MAX_DELAY_S, get_settings
from service.tenancy import message_group_id
from tasks import signals
from tasks.celery_app import app
from webhooks import delivery

log = logging.getLogger(__name__)

TASK_NAME = "imposition.deliver_webhook"
#: job_finished outcomes that end a job and so send its tenant an event.
FINAL_OUTCOMES = frozenset({"succeeded", "failed"})


def redelivery_delay_s(round_number: int) -> int:
    """SQS delay before round ``round_number + 1``: the base delay doubled per round, <= 900 s."""
    base = get_settings().webhook_redelivery_delay_s
    return int(min(SQS_MAX_DELAY_S, base * 2 ** max(0, round_number - 1)))


def publish_delivery(tenant_id: str, job_id: str, *, round_number: int = 1, first_round_at: float | None = None,
                     delay_s: int = 0) -> None:
    """Publish one delivery round of ``job_id``'s event, held by SQS for ``delay_s`` (0–900) seconds.

    Raises:
        ValueError: ``delay_s`` outside 0–900 s (the SQS DelaySeconds limit).
        kombu.exceptions.OperationalError, botocore.exceptions.ClientError: the publish failed.
    """
    if not 0 <= delay_s <= SQS_MAX_DELAY_S:
        raise ValueError(f"delay_s={delay_s} is outside 0–{SQS_MAX_DELAY_S} s (SQS DelaySeconds limit)")
    deliver_webhook.apply_async(
        kwargs={"job_id": job_id, "tenant_id": tenant_id, "round_number": round_number,
                "first_round_at": first_round_at},
        queue=get_settings().notifications_queue,
        MessageGroupId=message_group_id(tenant_id),
        DelaySeconds=delay_s,
        # no limits in the message: the worker applies the ones its own settings derive (ROUND_TIME_LIMITS)
        time_limit=None, soft_time_limit=None,
        retry=True,
        retry_policy={"max_retries": 3, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 2},
    )


#: This process's time limits of a round (the worker's settings, read once at import).
ROUND_TIME_LIMITS = delivery.round_time_limits()


@app.task(name=TASK_NAME, acks_late=True, ignore_result=True, acks_on_failure=False, acks_on_timeout=False,
          soft_time_limit=ROUND_TIME_LIMITS.soft_s, time_limit=ROUND_TIME_LIMITS.hard_s)
def deliver_webhook(*, job_id: str, tenant_id: str, round_number: int = 1,
                    first_round_at: float | None = None) -> dict:
    """Run one delivery round; if it failed, schedule the next through SQS or give up.

    Returns ``{"job_id", "status", "round"}``; status is a :class:`webhooks.delivery.RoundReport`
    status, or ``retrying`` / ``gave_up`` for a failed round.
    """
    started = time.time() if first_round_at is None else float(first_round_at)
    try:
        report = delivery.deliver_round(job_id, tenant_id)
    except Exception as exc:  # noqa: BLE001 - DynamoDB unreachable, or the soft time limit outside the POSTs:
        # a failed round, not a lost event
        log.warning("webhook of job %s (tenant %s): round %s could not run: %s: %s",
                    job_id, tenant_id, round_number, type(exc).__name__, exc)
        report = delivery.RoundReport("failed", 0, f"round could not run: {type(exc).__name__}")
    if report.status != "failed":
        return {"job_id": job_id, "status": report.status, "round": round_number}
    delay_s = redelivery_delay_s(round_number)
    if time.time() + delay_s - started > get_settings().webhook_give_up_after_s:
        _record_quietly(job_id, delivery.GAVE_UP, report)
        log.error("webhook of job %s (tenant %s): gave up after %s round(s): %s",
                  job_id, tenant_id, round_number, report.error)
        return {"job_id": job_id, "status": delivery.GAVE_UP, "round": round_number}
    _record_quietly(job_id, delivery.RETRYING, report)
    publish_delivery(tenant_id, job_id, round_number=round_number + 1, first_round_at=started, delay_s=delay_s)
    return {"job_id": job_id, "status": delivery.RETRYING, "round": round_number}


def _record_quietly(job_id: str, status: str, report: delivery.RoundReport) -> None:
    """Record a failed round; if even that fails, log it (the next round is scheduled regardless)."""
    try:
        delivery.record(job_id, status, attempts=report.attempts, error=report.error)
    except Exception as exc:  # noqa: BLE001
        log.error("webhook of job %s: could not record %s: %s", job_id, status, exc)


def queue_webhook(tenant_id: str, job_id: str) -> None:
    """Record ``pending`` on the job item and publish the first delivery round; never raises.

    ``pending`` is written before the publish, so a fast first round is never overwritten by it. A
    failed publish is recorded as ``not_sent`` (the job's own outcome is committed already).
    """
    try:
        delivery.record(job_id, delivery.PENDING)
        publish_delivery(tenant_id, job_id, first_round_at=time.time())
    except Exception as exc:  # noqa: BLE001 - a signal receiver must not fail the job that sent it
        log.error("webhook of job %s (tenant %s) not queued: %s", job_id, tenant_id, exc)
        try:
            delivery.record(job_id, delivery.NOT_SENT, error=f"not queued: {type(exc).__name__}")
        except Exception as record_exc:  # noqa: BLE001
            log.error("webhook of job %s: could not record not_sent: %s", job_id, record_exc)


@signals.job_finished.connect
def _job_finished(sender: object = None, job: JobItem | None = None, outcome: str | None = None,
                  **_: object) -> None:
    """job_finished receiver: a job ended on a worker (its lease already released)."""
    if job is not None and outcome in FINAL_OUTCOMES:
        queue_webhook(job.tenant_id, job.job_id)


@signals.lease_recovered.connect
def _job_failed_by_sweeper(sender: object = None, lease=None, requeued: bool = True, **_: object) -> None:
    """lease_recovered receiver: a reclaimed job that was out of attempts ended ``failed`` (maintenance worker)."""
    if lease is not None and not requeued:
        queue_webhook(lease.tenant_id, lease.job_id)
