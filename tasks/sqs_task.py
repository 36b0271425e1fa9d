"""``SqsTask``: a Celery task whose messages live on SQS (docs/design.md, "Leases, messages and
attempts"): a retry or deferral is a copy SQS holds (``DelaySeconds``), never an ETA in worker
memory; every copy keeps its tenant's ``MessageGroupId``; a message that can never run is rejected
towards the dead-letter queue at once. :class:`tasks.base.FairTask` builds on it."""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from celery import Task
from celery.exceptions import Reject

from imposition.common.settings import get_settings
from imposition.common.sqs import backoff_s, delay_seconds
from imposition.common.tenancy import message_group_id
from .outcomes import message_fields
from .worker import expedite_to_dead_letter_queue

log = logging.getLogger(__name__)


class SqsTask(Task):
    """Retries held by SQS, poison to the dead-letter queue. Options are class attributes; ``None``
    falls back to :mod:`imposition.common.settings`."""

    #: No Celery ETA ever: :meth:`retry` always sets an SQS ``DelaySeconds`` instead.
    default_retry_delay = None
    #: Seconds SQS holds a deferred copy (``Settings.defer_delay_s``, at most 900).
    defer_delay_s: int | None = None
    #: First retry backoff in seconds, doubled per attempt (``Settings.retry_backoff_base_s``).
    retry_backoff_base_s: int | None = None
    #: Cap on the retry backoff, at most the SQS DelaySeconds limit (``Settings.retry_backoff_max_s``).
    retry_backoff_max_s: int | None = None

    def _option(self, name: str) -> Any:
        value = getattr(self, name)
        return getattr(get_settings(), name) if value is None else value

    def backoff_s(self, attempts: int) -> int:
        """SQS delay before attempt ``attempts + 1``: base × 2^(attempts − 1), capped (seconds)."""
        base, cap = self._option("retry_backoff_base_s"), self._option("retry_backoff_max_s")
        return backoff_s(base, attempts, cap)

    def retry(self, args=None, kwargs=None, exc=None, throw=True, eta=None, countdown=None,
              max_retries=None, **options):
        """Publish a copy of this job's message that SQS holds for ``countdown`` seconds, then ack.

        Overridden, not a hook: Celery's own retry holds the copy as an ETA in worker memory; here
        ``countdown`` becomes the SQS ``DelaySeconds`` of the copy (0–900 s, the SQS limit), and
        the copy keeps the tenant's ``MessageGroupId``.

        Raises:
            ValueError: ``eta`` is given (SQS has no absolute delivery time), or ``countdown`` is
                outside 0–900 s.
            celery.exceptions.Retry: always when ``throw`` is true (Celery then acks the original).
        """
        if eta is not None:
            raise ValueError("eta is not supported on SQS; pass countdown (0–900 s) instead")
        delay_s = delay_seconds(countdown or 0, "countdown")
        call_kwargs = self.request.kwargs if kwargs is None else kwargs
        options["MessageGroupId"] = message_group_id(call_kwargs["tenant_id"])
        options["DelaySeconds"] = delay_s
        retry = super().retry(args=args, kwargs=kwargs, exc=exc, throw=False, max_retries=max_retries, **options)
        retry.when = delay_s  # for the log line "Retry in <n>s"; the delay itself is SQS's
        if throw:
            raise retry
        return retry

    def _message_fields(self, args: tuple, kwargs: dict) -> tuple[str, str, int]:
        """``(tenant_id, job_id, after_attempt)`` of the message (:func:`tasks.outcomes.message_fields`),
        or reject it as poison: to the dead-letter queue, never acked."""
        try:
            return message_fields(args, kwargs)
        except ValueError as exc:
            self._reject_as_poison(str(exc))

    def _reject_as_poison(self, problem: str, reason: str = "invalid_fields") -> NoReturn:
        """Reject this delivery towards the dead-letter queue as ``reason`` (``invalid_fields``, or
        ``no_such_job`` for a message naming a job that has no item); never returns.

        Raises:
            celery.exceptions.Reject: always (not requeued; its visibility is reset so that SQS's
                redrive moves it after ``maxReceiveCount`` quick receives).
        """
        log.error("refusing message of task %s (id %s): %s", self.name, self.request.id, problem)
        properties = self.request.properties or {}
        expedite_to_dead_letter_queue(properties.get("delivery_info"), properties.get("delivery_tag"), reason)
        raise Reject(problem, requeue=False)
