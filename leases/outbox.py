"""The webhook outbox (issue 15): the intent to tell a tenant its job ended, written in the same
transaction as the job's final status, so no failure between the two can lose it.

The outbox is three attributes of the job item, not an item of its own (docs/design.md, "Webhooks: the
outbox")::

    final write (commit, fail, the sweeper's give-up, cancel, a stranded repair)
        + webhook_status = pending, outbox_partition = "outbox", webhook_due_at = now + grace
        + expires_at = now + job_retention_days (the item's DynamoDB TTL: imposition.common.retention)
    round fails, next one in d s   webhook_due_at = now + d + round hard limit + grace
    round put back (tenant busy)    the same, with d the longest put-back delay, when the entry
                                    would otherwise fall due before that round can end
    delivered | gave_up | no_endpoint   outbox_partition and webhook_due_at removed (settled)
    the drain (beat, every webhook_outbox_drain_interval_s): each entry of the sparse index
        by-webhook-due with webhook_due_at < now: claim it (webhook_due_at moved on, conditionally),
        then publish a round

The normal path stays immediate (``job_finished`` publishes the first round at once); the drain
only sends what nothing settled within ``Settings.webhook_outbox_grace_s``.
"""

from __future__ import annotations

from collections.abc import Iterator

from pynamodb.exceptions import UpdateError

from leases.models import JobItem
from imposition.common.retention import job_expires_at
from imposition.common.settings import get_settings

#: The one partition value of the outbox index (at most the unsettled events of the cluster).
OUTBOX_PARTITION = "outbox"
#: ``JobItem.webhook_status`` of an event written to the outbox and not yet settled.
PENDING = "pending"


def intent_actions(now: float) -> list:
    """Job update actions of every final write: they put the job's event in the outbox and start
    the item's retention (``expires_at``, its DynamoDB TTL)."""
    return [JobItem.webhook_status.set(PENDING), JobItem.outbox_partition.set(OUTBOX_PARTITION),
            JobItem.webhook_due_at.set(now + get_settings().webhook_outbox_grace_s),
            JobItem.expires_at.set(job_expires_at(now))]


def settle_actions() -> list:
    """Job update actions that take the event out of the outbox (delivered, gave up, no endpoint)."""
    return [JobItem.outbox_partition.remove(), JobItem.webhook_due_at.remove()]


def postpone_actions(due_at: float) -> list:
    """Job update actions: the drain leaves the event alone until ``due_at`` (epoch s)."""
    return [JobItem.webhook_due_at.set(due_at)]


def due(now: float, *, limit: int | None = None) -> Iterator[JobItem]:
    """Outbox entries with ``webhook_due_at < now``, oldest first, through the sparse index (no scan).

    An entry holds the index's keys only (``job_id``, ``webhook_due_at``), and the index is
    eventually consistent: read the job before acting on an entry.
    """
    return JobItem.by_webhook_due.query(OUTBOX_PARTITION, JobItem.webhook_due_at < now, limit=limit)


def postpone(job_id: str, due_at: float) -> bool:
    """Move the outbox entry of ``job_id`` to ``due_at`` (epoch s) if it is still in the outbox; True
    if it was (a round put back behind its tenant's running rounds keeps the drain away this way).

    Raises:
        pynamodb.exceptions.UpdateError: DynamoDB failed otherwise.
    """
    try:
        JobItem(job_id).update(actions=postpone_actions(due_at),
                               condition=JobItem.outbox_partition == OUTBOX_PARTITION)
    except UpdateError as exc:
        if exc.cause_response_code != "ConditionalCheckFailedException":
            raise
        return False
    return True


def claim(job: JobItem, *, now: float, due_at: float) -> bool:
    """Move an overdue entry's ``webhook_due_at`` to ``due_at`` on condition nobody moved it since
    ``job`` was read; True if this call did (it may then send a round), False if another drain or a
    round did, or the event was settled meanwhile.

    Raises:
        pynamodb.exceptions.UpdateError: DynamoDB failed otherwise.
    """
    try:
        JobItem(job.job_id).update(
            actions=[*postpone_actions(due_at), JobItem.webhook_drained_at.set(now)],
            condition=(JobItem.outbox_partition == OUTBOX_PARTITION) & (JobItem.webhook_due_at == job.webhook_due_at),
        )
    except UpdateError as exc:
        if exc.cause_response_code != "ConditionalCheckFailedException":
            raise
        return False
    return True
