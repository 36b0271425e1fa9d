"""The Prometheus metrics of docs/design.md §8 and the receivers that move them.

Every increment happens at the domain event that defines it (a signal of :mod:`leases.signals`), in
the process that sends the signal (a prefork child for job signals, the maintenance worker for the
sweeper's and the sampler's). Which event moves each metric is said where :class:`ServiceMetrics`
defines it. The metrics, as exported (prefix ``imposition_``, the unit in the name, ``_total`` on
counters only: Prometheus' naming guide; ``promtool check metrics`` accepts a scrape)::

    by tenant  imposition_cap_defers_total, imposition_lease_contention_defers_total,
               imposition_leases_recovered_total, imposition_leases_lost_total,
               imposition_jobs_total{outcome}, imposition_job_attempts_total,
               imposition_job_retries_total, imposition_queue_wait_seconds,
               imposition_first_receive_wait_seconds, imposition_job_duration_seconds,
               imposition_leases_held, imposition_handoffs_total{reason},
               imposition_handoff_latency_seconds, imposition_jobs_waiting, imposition_slots_borrowed,
               imposition_webhook_rounds_drained_total, imposition_webhook_rounds_put_back_total
    others     imposition_slots_busy, imposition_node_slots (a node's pool size),
               imposition_cluster_slots, imposition_jobs_republished_total{reason},
               imposition_poison_messages_total{queue,reason}, imposition_sqs_messages{queue,state},
               imposition_sqs_oldest_message_age_seconds{queue},
               imposition_sweeper_last_sweep_timestamp_seconds

Metrics are created on first use (:func:`get_metrics`), not at import; process-summed gauges use
``multiprocess_mode="livesum"``; a tenant's series start at zero when a process first sees it. Why:
docs/design.md §8.
"""

from __future__ import annotations

import functools
import logging
import threading
import time

from celery.signals import task_postrun

from imposition.common.settings import get_settings
from leases import signals
from leases.signals import JobOutcome

log = logging.getLogger(__name__)

#: ``jobs_total`` outcomes.
JOB_OUTCOMES = (JobOutcome.SUCCEEDED, JobOutcome.FAILED, JobOutcome.DUPLICATE_DROPPED)
#: What each ``jobs_total`` outcome counts, in one line (docs/operations.md, "Outcomes", also says
#: when each is a problem).
OUTCOME_MEANINGS = {
    JobOutcome.SUCCEEDED: "jobs that ended with their plate stored",
    JobOutcome.FAILED: "jobs that ended failed (their error_code says why: `imposition jobs list --status failed`)",
    JobOutcome.DUPLICATE_DROPPED: "a second copy of a job's message (a sweep re-published it, or SQS delivered it "
                                  "twice) after the job had started or ended: dropped, nothing ran twice; normal, "
                                  "unless more than about one per job",
}


class ServiceMetrics:
    """The service's metric objects (prometheus-client), one instance per process.

    Attributes are the metrics of the module docstring, each under a comment saying what moves it;
    :meth:`see_tenant` creates a tenant's series at zero.
    """

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram  # noqa: PLC0415 (see module doc)

        s = get_settings()
        #: Not the global registry: the exporter collects from the multiprocess files, and tests may
        #: build a second instance in one process.
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        t = ("tenant",)
        #: ``job_deferred`` with reason ``cap``.
        self.cap_defer = Counter("imposition_cap_defers", "Jobs deferred because the tenant was at its cap.", t, registry=r)
        #: ``job_deferred`` with reason ``contention``.
        self.lease_contention_defer = Counter(
            "imposition_lease_contention_defers", "Jobs deferred because the lease transaction kept conflicting.", t, registry=r
        )
        #: ``job_deferred`` with reason ``gave_way``.
        self.gave_way = Counter(
            "imposition_gave_way", "Jobs sent to the back of the queue for a tenant with fewer jobs running or queued.", t, registry=r
        )
        #: ``lease_recovered`` (the sweeper reclaimed an expired lease).
        self.lease_recovered = Counter(
            "imposition_leases_recovered", "Expired leases the sweeper reclaimed (a worker died holding them).", t, registry=r
        )
        #: ``lease_lost`` (a worker found its lease gone).
        self.lease_lost = Counter("imposition_leases_lost", "Runs that found their lease reclaimed and committed nothing.",
                                  t, registry=r)
        #: ``job_finished`` (``succeeded``/``failed``), ``job_dropped`` (``duplicate_dropped``),
        #: ``lease_recovered`` of a job out of attempts (``failed``).
        self.jobs = Counter("imposition_jobs", "Jobs by final outcome (and duplicate deliveries dropped).",
                            ("tenant", "outcome"), registry=r)
        #: ``lease_acquired`` (each acquire is one attempt).
        self.job_attempts = Counter("imposition_job_attempts", "Attempts started (leases acquired).", t, registry=r)
        #: ``job_finished`` with outcome ``retrying``.
        self.job_retries = Counter("imposition_job_retries", "Failed attempts re-queued for another try.", t, registry=r)
        #: ``lease_acquired`` of a first attempt: ``started_at − submitted_at`` from the job item (not
        #: SQS's age: SQS leaves messages received three or more times out of its age metric).
        self.queue_wait = Histogram(
            "imposition_queue_wait_seconds", "Start minus submission of a job's first attempt (from the job item).", t,
            buckets=s.queue_wait_buckets_s, registry=r,
        )
        #: The same moment: ``first_received_at − submitted_at``.
        self.first_receive_wait = Histogram(
            "imposition_first_receive_wait_seconds", "First receive by a worker minus submission (from the job item).", t,
            buckets=s.queue_wait_buckets_s, registry=r,
        )
        #: ``job_finished``: this attempt's ``finished_at`` (or now, for a retry) ``− started_at``.
        self.job_duration = Histogram(
            "imposition_job_duration_seconds", "Run time of one attempt under a lease.", t,
            buckets=s.job_duration_buckets_s, registry=r,
        )
        #: This and ``slots_busy``: +1 on ``lease_acquired``; −1 when the run ends: ``job_finished``,
        #: ``lease_lost``, or Celery's ``task_postrun`` for any exit that raised past both (so no exit
        #: path leaves a slot counted).
        self.leases_held = Gauge("imposition_leases_held", "Leases held by this node's running jobs.", t,
                                 multiprocess_mode="livesum", registry=r)
        self.slots_busy = Gauge("imposition_slots_busy", "Slots of this node running a job under a lease.",
                                multiprocess_mode="livesum", registry=r)
        #: Set by :mod:`imposition.observability.exporter` on a node consuming the imposition queue (its pool
        #: concurrency). Not ``slots_total``: a gauge must not end in ``_total`` (promtool check metrics).
        self.node_slots = Gauge("imposition_node_slots", "Slots of this node (its pool concurrency).",
                                 multiprocess_mode="max", registry=r)
        self.engine_ready = Gauge(
            "imposition_engine_ready", "1 while this imposition node's engine and its licence passed their last check "
            "(tasks.engine_gate), 0 while the node takes no jobs because the check failed.",
            ("engine",), multiprocess_mode="mostrecent", registry=r)
        self.engine_check_failures = Counter(
            "imposition_engine_check_failures", "Failed engine checks of this node, by reason (licence, installation, "
            "processes, engine).", ("engine", "reason"), registry=r)
        #: ``job_woken``: a parked job woken (``release``/``door``/``sweeper``/``cap_change``).
        self.handoffs = Counter("imposition_handoffs", "Parked jobs woken and published (a hand-off of a freed slot).",
                                ("tenant", "reason"), registry=r)
        #: ``lease_acquired`` of a woken job: ``started_at − woken_at`` (its tenant's release → its start).
        self.handoff_latency = Histogram(
            "imposition_handoff_latency_seconds", "Woken job: its tenant's release (the wake) to its start.", t,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120), registry=r,
        )
        #: ``job_republished``: the sweeper published a job again (``lost_message``/``lost_handoff``/
        #: ``lease_expired``).
        self.jobs_republished = Counter("imposition_jobs_republished", "Jobs the sweeper published again, by reason.",
                                        ("reason",), registry=r)
        #: This, ``slots_borrowed`` and ``cluster_slots``: the beat task ``imposition.sample_queues``
        #: (the tenant item's ``waiting`` counter, its leases above its cap; the live nodes' slots
        #: from the slot registry).
        self.jobs_waiting = Gauge("imposition_jobs_waiting", "Parked jobs of a tenant (its waiting counter).", t,
                                  multiprocess_mode="mostrecent", registry=r)
        self.slots_borrowed = Gauge("imposition_slots_borrowed", "Leases a tenant holds above its cap (borrowing).", t,
                                    multiprocess_mode="mostrecent", registry=r)
        self.cluster_slots = Gauge("imposition_cluster_slots", "Slots of the live worker nodes (the slot registry).",
                                   multiprocess_mode="mostrecent", registry=r)
        #: ``sweep_completed`` (the maintenance worker): when the sweeper last ran a sweep to its end;
        #: the alert ImpositionSweepsStopped fires when it grows too old or is absent. The largest over
        #: a node's processes, a finished pool child's included; 0 on a node that never completed one
        #: (every node but the maintenance worker's), which the alert's max() passes over.
        self.last_sweep = Gauge(
            "imposition_sweeper_last_sweep_timestamp_seconds", "When the sweeper last completed a sweep (epoch s).",
            multiprocess_mode="max", registry=r,
        )
        #: ``node_clock_skew`` (each sweep, the sweeper: leases/skew.py): NaN once a node left the
        #: registry or stopped reporting (unknown, never alerted on).
        self.node_clock_skew = Gauge(
            "imposition_node_clock_skew_seconds", "A worker node's clock minus the sweeper's (positive: ahead), as of the "
            "last sweep; worker: its Celery node name (a scrape's own label is node).", ("worker",),
            multiprocess_mode="mostrecent", registry=r)
        self._skew_nodes: set[str] = set()
        #: ``webhook_drained``: the outbox drain sent a round.
        self.webhook_rounds_drained = Counter(
            "imposition_webhook_rounds_drained", "Webhook rounds the outbox drain sent for events nothing had settled.",
            t, registry=r,
        )
        #: ``webhook_put_back``: a round waited for its tenant's slot.
        self.webhook_rounds_put_back = Counter(
            "imposition_webhook_rounds_put_back", "Webhook rounds put back because their tenant's delivery slots were taken.",
            t, registry=r,
        )
        #: ``poison_message``.
        self.poison_messages = Counter(
            "imposition_poison_messages", "Messages that could not be run, left for the dead-letter queue.",
            ("queue", "reason"), registry=r,
        )
        #: This and ``sqs_oldest_message_age``: the beat task ``imposition.sample_queues``.
        self.sqs_messages = Gauge(
            "imposition_sqs_messages", "SQS ApproximateNumberOfMessages{,NotVisible,Delayed} of a queue.",
            ("queue", "state"), multiprocess_mode="mostrecent", registry=r,
        )
        self.sqs_oldest_message_age = Gauge(
            "imposition_sqs_oldest_message_age_seconds",
            "CloudWatch AWS/SQS ApproximateAgeOfOldestMessage (latest datapoint); NaN when CloudWatch has none.",
            ("queue",), multiprocess_mode="mostrecent", registry=r,
        )
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def set_clock_skews(self, skews: dict[str, float]) -> None:
        """``node_clock_skew_seconds`` of each node in ``skews`` (node → s); NaN for a node set before
        and missing now."""
        with self._lock:
            gone = self._skew_nodes - set(skews)
            self._skew_nodes |= set(skews)
        for node, skew_s in skews.items():
            self.node_clock_skew.labels(node).set(skew_s)
        for node in gone:
            self.node_clock_skew.labels(node).set(float("nan"))

    def see_tenant(self, tenant_id: str) -> None:
        """Create ``tenant_id``'s series of every tenant-labelled metric at zero (once per process)."""
        with self._lock:
            if tenant_id in self._seen:
                return
            self._seen.add(tenant_id)
        for metric in (self.cap_defer, self.lease_contention_defer, self.lease_recovered, self.lease_lost,
                       self.job_attempts, self.job_retries, self.queue_wait, self.first_receive_wait,
                       self.job_duration, self.leases_held):
            metric.labels(tenant_id)
        for outcome in JOB_OUTCOMES:
            self.jobs.labels(tenant_id, outcome)


@functools.lru_cache(maxsize=1)
def get_metrics() -> ServiceMetrics:
    """This process's metrics, created on first use (after the exporter set up multiprocess mode)."""
    return ServiceMetrics()


# --- leases held by this process's runs ---------------------------------------------------------

_held: dict[str, str] = {}  # job id → tenant id of each lease counted in leases_held
_held_lock = threading.Lock()


def _hold(job_id: str, tenant_id: str) -> None:
    with _held_lock:
        if job_id in _held:
            return
        _held[job_id] = tenant_id
    m = get_metrics()
    m.leases_held.labels(tenant_id).inc()
    m.slots_busy.inc()


def _release(job_id: str) -> None:
    with _held_lock:
        tenant_id = _held.pop(job_id, None)
    if tenant_id is None:
        return
    m = get_metrics()
    m.leases_held.labels(tenant_id).dec()
    m.slots_busy.dec()


# --- receivers ------------------------------------------------------------------------------------


def _record_recent(event: str, tenant_id: str) -> None:
    from imposition.observability import recent  # noqa: PLC0415 (redis only where events happen)

    recent.record(event, tenant_id)


def on_lease_acquired(sender=None, lease=None, job=None, **_: object) -> None:
    """One attempt started: count it, hold a slot, observe a first attempt's queue waits."""
    m = get_metrics()
    tenant = lease.tenant_id
    m.see_tenant(tenant)
    m.job_attempts.labels(tenant).inc()
    _hold(lease.job_id, tenant)
    if job is not None and job.woken_at is not None and job.started_at is not None:
        m.handoff_latency.labels(tenant).observe(max(0.0, float(job.started_at) - float(job.woken_at)))
    if job is None or int(job.attempts or 0) > 1 or job.submitted_at is None:
        return  # a later attempt's start − submit also holds earlier runs and retry backoff
    submitted = float(job.submitted_at)
    if job.started_at is not None:
        m.queue_wait.labels(tenant).observe(max(0.0, float(job.started_at) - submitted))
    if job.first_received_at is not None:
        m.first_receive_wait.labels(tenant).observe(max(0.0, float(job.first_received_at) - submitted))


def on_job_finished(sender=None, job=None, outcome=None, **_: object) -> None:
    """An attempt ended (succeeded, failed, retrying): free the slot, observe the run time."""
    m = get_metrics()
    tenant = job.tenant_id
    m.see_tenant(tenant)
    _release(job.job_id)
    if job.started_at is not None:
        ended = float(job.finished_at) if outcome != JobOutcome.RETRYING and job.finished_at is not None else time.time()
        m.job_duration.labels(tenant).observe(max(0.0, ended - float(job.started_at)))
    if outcome == JobOutcome.RETRYING:
        m.job_retries.labels(tenant).inc()
    elif outcome in JOB_OUTCOMES:
        m.jobs.labels(tenant, outcome).inc()


def on_lease_lost(sender=None, lease=None, **_: object) -> None:
    """A run found its lease reclaimed: free the slot (the sweeper already freed the lease)."""
    m = get_metrics()
    m.see_tenant(lease.tenant_id)
    _release(lease.job_id)
    m.lease_lost.labels(lease.tenant_id).inc()


def on_job_dropped(sender=None, tenant_id=None, **_: object) -> None:
    """A duplicate delivery (the job was not queued) was acked and dropped."""
    m = get_metrics()
    m.see_tenant(tenant_id)
    m.jobs.labels(tenant_id, JobOutcome.DUPLICATE_DROPPED).inc()


def on_job_deferred(sender=None, tenant_id=None, reason=None, **_: object) -> None:
    """A job was deferred: at the tenant's cap, given way to a poorer tenant, or after
    lease-transaction contention."""
    m = get_metrics()
    m.see_tenant(tenant_id)
    if reason == "cap":
        m.cap_defer.labels(tenant_id).inc()
        _record_recent("cap_defer", tenant_id)
    elif reason == "gave_way":
        m.gave_way.labels(tenant_id).inc()
    else:
        m.lease_contention_defer.labels(tenant_id).inc()


def on_job_woken(sender=None, job=None, reason=None, **_: object) -> None:
    """A parked job was woken and published."""
    m = get_metrics()
    m.see_tenant(job.tenant_id)
    m.handoffs.labels(job.tenant_id, reason or "release").inc()


def on_job_republished(sender=None, job=None, reason=None, **_: object) -> None:
    """The sweeper published a job again (``lost_message``, ``lost_handoff``, ``lease_expired``)."""
    get_metrics().jobs_republished.labels(reason or "lost_message").inc()


def on_lease_recovered(sender=None, lease=None, requeued=True, **_: object) -> None:
    """The sweeper reclaimed an expired lease; a job out of attempts ended ``failed`` with it."""
    m = get_metrics()
    tenant = lease.tenant_id
    m.see_tenant(tenant)
    m.lease_recovered.labels(tenant).inc()
    if not requeued:
        m.jobs.labels(tenant, JobOutcome.FAILED).inc()
    _record_recent("lease_recovered", tenant)


def on_node_clock_skew(sender=None, skews=None, **_: object) -> None:
    """The sweeper measured each node's clock against its own: ``node_clock_skew_seconds{worker}``; a
    node measured before but not now (left, or stopped reporting) becomes NaN."""
    get_metrics().set_clock_skews(skews or {})


def on_sweep_completed(sender=None, finished_at=None, **_: object) -> None:
    """The sweeper ran a sweep to its end: ``sweeper_last_sweep_timestamp_seconds``."""
    if finished_at is not None:
        get_metrics().last_sweep.set(finished_at)


def on_webhook_drained(sender=None, tenant_id=None, **_: object) -> None:
    """The outbox drain sent a round for an unsettled webhook event (a lost first round)."""
    get_metrics().webhook_rounds_drained.labels(tenant_id).inc()


def on_webhook_put_back(sender=None, tenant_id=None, **_: object) -> None:
    """A webhook round waited for its tenant's delivery slot (per-tenant fairness)."""
    get_metrics().webhook_rounds_put_back.labels(tenant_id).inc()


def on_poison_message(sender=None, queue=None, reason=None, **_: object) -> None:
    """A message no task could run was left for the dead-letter queue."""
    get_metrics().poison_messages.labels(queue or "unknown", reason or "unknown").inc()


def on_task_postrun(sender=None, task_id=None, **_: object) -> None:
    """Safety net: a run that raised past ``job_finished``/``lease_lost`` frees its slot here."""
    if task_id is not None:
        _release(task_id)


def install() -> None:
    """Connect the metric receivers to the domain signals and Celery's task_postrun (idempotent: a receiver connected twice is connected once)."""
    signals.lease_acquired.connect(on_lease_acquired)
    signals.job_finished.connect(on_job_finished)
    signals.lease_lost.connect(on_lease_lost)
    signals.job_dropped.connect(on_job_dropped)
    signals.job_deferred.connect(on_job_deferred)
    signals.job_woken.connect(on_job_woken)
    signals.job_republished.connect(on_job_republished)
    signals.lease_recovered.connect(on_lease_recovered)
    signals.node_clock_skew.connect(on_node_clock_skew)
    signals.sweep_completed.connect(on_sweep_completed)
    signals.webhook_drained.connect(on_webhook_drained)
    signals.webhook_put_back.connect(on_webhook_put_back)
    signals.poison_message.connect(on_poison_message)
    task_postrun.connect(on_task_postrun)
