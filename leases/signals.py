"""Domain signals of the fairness layer: the hooks metrics, webhooks and tests subscribe to.

Each is a :class:`celery.utils.dispatch.Signal`; receivers run in the process that sends (a prefork
child for job signals, the maintenance worker for the sweeper's). A receiver that raises is logged
and never breaks the job (``send`` catches it, as Celery's own signals do). Each signal's keyword
arguments are listed where it is defined, with what they mean::

    a job's delivery   lease_acquired, job_deferred, job_dropped, job_finished, poison_message
    its lease          lease_releasing, lease_released, lease_lost, attempt_infra_lost,
                       lease_recovered (the sweeper)
    the registry       node_clock_skew (the sweeper)
    waking, the net    job_woken, job_republished (the sweeper), sweep_completed
    webhooks           webhook_drained, webhook_put_back
"""

from __future__ import annotations

from enum import StrEnum

from celery.utils.dispatch import Signal


class JobOutcome(StrEnum):
    """How one delivery of a job ended: the ``outcome`` of ``job_finished``, ``lease_releasing`` and
    ``lease_released``, of :class:`tasks.base.FairTask`'s return value, of ``imposition_jobs_total{outcome}``
    and of the lease-event log's ``releasing`` events (a ``str``: compares and serialises as its value)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: released for another attempt (a retry copy is in the queue)
    RETRYING = "retrying"
    #: the tenant was at its cap: the job waits for a hand-off (no attempt counted)
    PARKED = "parked"
    #: a second copy of a message whose job is running a later attempt or finished
    DUPLICATE_DROPPED = "duplicate_dropped"
    #: the lease was reclaimed while running: nothing committed
    LEASE_LOST = "lease_lost"

    @property
    def is_final(self) -> bool:
        """True for ``succeeded`` and ``failed``: the job ended, its tenant gets an event."""
        return self in (JobOutcome.SUCCEEDED, JobOutcome.FAILED)


#: ``lease`` (:class:`leases.transactions.Lease`), ``job``, ``heartbeat``.
lease_acquired = Signal(name="lease_acquired", providing_args={"lease", "job", "heartbeat"})
#: ``job_id``, ``tenant_id``, ``reason``, ``delay_s``. ``reason`` ``"cap"``: parked (``delay_s`` None)
#: or, under the timer policy, a delayed copy; ``"contention"``; ``"release_pending"``: a retry or
#: re-published copy that arrived before its job was re-queued.
job_deferred = Signal(name="job_deferred", providing_args={"job_id", "tenant_id", "reason", "delay_s"})
#: ``job`` (the :class:`leases.models.JobItem` as read from the waiting index, ``woken_at`` set),
#: ``reason`` (``"release"``/``"door"``/``"sweeper"``/``"cap_change"``): a parked job was moved back
#: to ``queued`` and published (a hand-off).
job_woken = Signal(name="job_woken", providing_args={"job", "reason"})
#: ``job`` (or None), ``reason``: the sweeper published a job again: ``"lost_message"`` (queued, no
#: message could still bring it), ``"lost_handoff"`` (waiting while its tenant had room),
#: ``"lease_expired"`` (its holder stopped renewing).
job_republished = Signal(name="job_republished", providing_args={"job", "reason"})
#: ``job_id``, ``tenant_id``, ``status`` (the status that made it a duplicate).
job_dropped = Signal(name="job_dropped", providing_args={"job_id", "tenant_id", "status"})
#: ``job`` (the item as committed), ``outcome`` (:class:`JobOutcome`: succeeded, failed, retrying),
#: ``error`` (str or None).
job_finished = Signal(name="job_finished", providing_args={"job", "outcome", "error"})
#: ``lease``, ``outcome`` (:class:`JobOutcome`: succeeded, retrying, failed): sent right before the
#: holder's fenced release transaction (the lease certainly existed until then; the lease-event log
#: of :mod:`tasks.lease_log` relies on it).
lease_releasing = Signal(name="lease_releasing", providing_args={"lease", "outcome"})
#: ``lease``, ``outcome``, ``passed`` (the lease the release took for the tenant's next waiting job,
#: its slot passed on in the same transaction, or None): sent right after the holder's release
#: committed, before the hand-off (:func:`leases.waiting.wake`); ``passed`` certainly exists from then.
lease_released = Signal(name="lease_released", providing_args={"lease", "outcome", "passed"})
#: ``lease``, ``attempt``: the holder recorded its attempt ``infra_lost`` (it could not reach
#: DynamoDB; the attempt is not charged).
attempt_infra_lost = Signal(name="attempt_infra_lost", providing_args={"lease", "attempt"})
#: ``lease``, ``detail``: the holder found its lease gone (it commits nothing).
lease_lost = Signal(name="lease_lost", providing_args={"lease", "detail"})
#: ``lease`` (the reclaimed :class:`leases.models.LeaseItem`), ``requeued`` (bool), ``swept_at`` (the
#: sweep's ``now``, epoch s: the lease existed at least until then).
lease_recovered = Signal(name="lease_recovered", providing_args={"lease", "requeued", "swept_at"})
#: ``skews`` (node name → its clock minus the sweeper's, s; every node that reported its clock),
#: ``now`` (the sweep's, epoch s): sent by :func:`leases.skew.refresh` once a sweep.
node_clock_skew = Signal(name="node_clock_skew", providing_args={"skews", "now"})
#: ``finished_at`` (epoch s), ``report`` (:class:`leases.sweeper.SweepReport`): a sweep ran to its end
#: (sent by ``tasks.sweeper.sweep``; a sweep that raised sends nothing).
sweep_completed = Signal(name="sweep_completed", providing_args={"finished_at", "report"})
#: ``queue`` (name), ``reason`` (``"undecodable"``/``"unknown_format"``/``"unknown_task"``/
#: ``"invalid_task"``/``"invalid_fields"``/``"no_such_job"``), ``message_id``.
poison_message = Signal(name="poison_message", providing_args={"queue", "reason", "message_id"})
#: ``tenant_id``, ``job_id``, ``unsettled_s`` (since the job ended): the outbox drain sent a round for
#: an event nothing had settled (:func:`imposition.webhooks.tasks.drain_outbox`).
webhook_drained = Signal(name="webhook_drained", providing_args={"tenant_id", "job_id", "unsettled_s"})
#: ``tenant_id``, ``job_id``: a delivery round found its tenant's delivery slots taken and was
#: published again with a delay (:mod:`imposition.webhooks.fairness`).
webhook_put_back = Signal(name="webhook_put_back", providing_args={"tenant_id", "job_id"})
