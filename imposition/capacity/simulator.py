"""The discrete-event simulator (SimPy's virtual clock): arrivals, SQS, worker slots, leases.

::

    arrival ─► door (hand-off) ─┬─ queued: message visible ─► SQS ─► idle worker (poll latency)
                                └─ waiting (no message)                 │  Scheduler.deliver
        ┌───────────────────────────────────────────────────────────────┘
        ├─ take / borrow: lease for the job's hold time ─► release ─► hand-off wakes (wake latency)
        ├─ park (hand-off): the worker is busy ``park_s``; a release wakes the job
        └─ defer (timer): the worker is busy ``park_s``, then sends a copy due ``defer_delay_s`` later
    a failed attempt: release for retry, a copy due after the backoff (base × 2^(n−1), capped)
    a copy due ─┬─ no receive waiting (every worker busy): visible to the next receive
                └─ a receive waiting: seen at its next recheck (every ``delayed_recheck_s`` from the
                   moment it began to wait) or when a message is sent to the queue, whichever first

Each step is a callback on a plain SimPy event (``env.timeout(...).callbacks``), not a generator
process per job: the hundreds of thousands of jobs of four weeks of history stay within seconds
(``make bench-sim``). A long-polling receive that is already waiting sees a delayed copy become
visible only when it rechecks: moto re-reads the queue when a message is sent to it and otherwise
once a second (its ``wait_for_messages(1)``), so copies arrive in clumps; AWS SQS is modelled with
``delayed_recheck_s = 0`` (a copy visible when due). The cluster has one such receive (exact for one
node; for more, the nodes' receives are taken as one). Decisions are :class:`imposition.capacity.core.Scheduler`'s, hence
:mod:`leases.policy`'s. SQS delivers in arrival order (moto's, the default) or, with
``delivery_order = "fair"``, round-robin over the tenants with visible messages (an approximation
of SQS fair queues).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

import simpy

from imposition.capacity.core import Scheduler, Tier
from imposition.capacity.errors import WorkloadError
from leases import policy
from imposition.common.settings import Settings, get_settings

POLICIES = ("handoff", "timer", "borrow")


@dataclass(frozen=True)
class ModelParams:
    """The model's numbers (seconds), from :class:`imposition.common.settings.Settings` (``sim_*``, the
    service's own clocks and limits)."""

    slots_per_node: int
    default_cap: int
    reserve_slots: int
    defer_delay_s: float
    retry_backoff_base_s: float
    retry_backoff_max_s: float
    max_attempts: int
    poll_latency_s: float
    wake_latency_s: float
    park_s: float
    job_overhead_s: float
    delivery_order: str = "arrival"
    #: Measured latencies to draw ``poll_latency_s`` from (seeded), instead of the constant: a run's
    #: own distribution (``bench.sim_check``); empty = the constant.
    poll_latency_samples: tuple[float, ...] = ()
    #: A waiting long poll rechecks for delayed copies (timer deferrals, retry backoffs) that became
    #: due this often (seconds, ``sim_delayed_recheck_s``; moto 1 s, AWS SQS 0: seen when due); a
    #: send to the queue makes it recheck at once.
    delayed_recheck_s: float = 0.0
    seed: int = 1

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **overrides) -> "ModelParams":
        """The configured model; ``overrides`` replace single fields (``default_cap=3``)."""
        s = settings or get_settings()
        values = dict(
            slots_per_node=s.slots_per_node, default_cap=s.default_cap, reserve_slots=s.reserve_slots,
            defer_delay_s=s.defer_delay_s, retry_backoff_base_s=s.retry_backoff_base_s,
            retry_backoff_max_s=s.retry_backoff_max_s, max_attempts=s.max_attempts,
            poll_latency_s=s.sim_poll_latency_s, wake_latency_s=s.sim_wake_latency_s, park_s=s.sim_park_s,
            job_overhead_s=s.sim_job_overhead_s, delivery_order=s.sim_delivery_order,
            delayed_recheck_s=s.sim_delayed_recheck_s)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class SimJob:
    """One job: ``hold_s`` is the time it holds a lease per attempt (engine + the lease's own
    overhead), ``fails`` how many of its attempts fail. Times are filled in by the run (seconds on
    the workload's clock)."""

    __slots__ = ("tenant", "submitted_at", "hold_s", "fails", "order", "started_at", "finished_at",
                 "first_received_at", "attempts", "status", "gave_way")

    def __init__(self, tenant: str, submitted_at: float, hold_s: float, fails: int = 0) -> None:
        self.tenant, self.submitted_at, self.hold_s, self.fails = tenant, submitted_at, hold_s, fails
        self.order = 0
        self.started_at = self.finished_at = self.first_received_at = None
        self.attempts = 0
        self.status = "queued"
        self.gave_way = False

    @property
    def tenant_id(self) -> str:
        """The tenant (the name :class:`imposition.observability.history.JobTimes` reads)."""
        return self.tenant

    @property
    def wait_s(self) -> float | None:
        """First start − submission (docs/design.md §8's queue wait); None if it never started."""
        return None if self.started_at is None else self.started_at - self.submitted_at


@dataclass
class RunResult:
    """What one run produced: the jobs (with their times), the lease intervals
    ``(start, end, tenant)``, peaks of leases, and the run's bounds."""

    nodes: int
    slots_total: int
    policy: str
    jobs: list[SimJob]
    intervals: list[tuple[float, float, str]] = field(default_factory=list)
    most_leases: dict[str, int] = field(default_factory=dict)
    most_leases_cluster: int = 0
    busy_slot_s: float = 0.0
    events: int = 0


def simulate(jobs: list[SimJob], *, nodes: int, policy_name: str, params: ModelParams,
             tiers: dict[str, Tier] | None = None, keep_intervals: bool = True,
             workers_online_at: float | None = None,
             tier_changes: list[tuple[float, str, Tier]] | None = None) -> RunResult:
    """Run ``jobs`` (fresh :class:`SimJob` objects; their times are written) on ``nodes`` nodes.

    ``policy_name``: ``handoff``, ``timer`` or ``borrow`` (hand-off with the tiers' burst caps;
    under the other two the burst caps are ignored). ``workers_online_at`` (on the jobs' clock):
    no worker receives before it (a backlog submitted before the nodes started); None: from the
    first arrival. ``tier_changes``: ``(at, tenant, tier)`` on the jobs' clock, each a
    ``set-cap`` then the tenant's wake, as ``imposition tenant set-cap`` does (a paused tier,
    cap 0, raised: a backlog).

    Raises:
        WorkloadError: ``nodes`` < 1, an unknown policy, or no jobs.
    """
    if nodes < 1:
        raise WorkloadError(f"nodes={nodes}: must be >= 1")
    if policy_name not in POLICIES:
        raise WorkloadError(f"policy={policy_name!r}: must be one of {', '.join(POLICIES)}")
    if not jobs:
        raise WorkloadError("workload: no jobs to simulate")
    p = params
    slots = nodes * p.slots_per_node
    limits = policy.Limits(default_cap=p.default_cap, waiting_policy="timer" if policy_name == "timer" else "handoff")
    sched = Scheduler(limits, slots_total=slots, reserve_slots=p.reserve_slots)
    for tenant, tier in (tiers or {}).items():
        sched.set_tier(tenant, tier if policy_name == "borrow" else Tier(cap=tier.cap))
    result = RunResult(nodes, slots, policy_name, jobs)
    env = simpy.Environment()
    fair = p.delivery_order == "fair"
    fifo: deque = deque()
    groups: dict[str, deque] = {}
    rotation: deque = deque()
    idle = [slots]
    lease_start: dict[int, float] = {}
    intervals = result.intervals
    most = result.most_leases
    busy = [0.0, 0]  # busy slot-seconds, leases now
    tenants = sched.tenants

    def at(delay: float, fn, value) -> None:
        env.timeout(delay, value).callbacks.append(fn)

    recheck = p.delayed_recheck_s
    ripe: list = []  # copies due that the waiting receive has not seen yet
    poll = [None, 0]  # the waiting receive: since when it waits (None: none waits), its generation

    def visible(ev) -> None:
        """A message sent to the queue, visible at once: the waiting receive rechecks (moto's notify)."""
        enqueue(ev.value)
        flush()
        dispatch()

    def due(ev) -> None:
        """A delayed copy's delay ended: visible to the next receive, but a receive already waiting
        sees it only at its recheck or the next send."""
        if recheck > 0 and poll[0] is not None:
            ripe.append(ev.value)  # seen at the wait's next recheck (every ``recheck`` since it began)
            at(max(1, math.ceil((env.now - poll[0]) / recheck - 1e-9)) * recheck + poll[0] - env.now,
               recheck_tick, poll[1])
            return
        enqueue(ev.value)
        dispatch()

    def sent_delayed(job, delay_s: float) -> None:
        """A copy sent with a delay: the send wakes the waiting receive, which sees what was due."""
        at(delay_s, due, job)
        if ripe:
            flush()
            dispatch()

    def flush() -> None:
        for job in ripe:
            enqueue(job)
        ripe.clear()

    def recheck_tick(ev) -> None:
        if poll[0] is None or ev.value != poll[1]:
            return  # that wait ended (a receive returned) before its recheck
        poll[0] = None
        flush()
        dispatch()

    def enqueue(job) -> None:
        if fair:
            q = groups.get(job.tenant)
            if q is None:
                q = groups[job.tenant] = deque()
            if not q:
                rotation.append(job.tenant)
            q.append(job)
        else:
            fifo.append(job)

    def next_message():
        if not fair:
            return fifo.popleft() if fifo else None
        if not rotation:
            return None
        tenant = rotation.popleft()
        q = groups[tenant]
        job = q.popleft()
        if q:
            rotation.append(tenant)
        return job

    samples = p.poll_latency_samples
    rng = random.Random(p.seed)

    def dispatch() -> None:
        while idle[0] > 0:
            job = next_message()
            if job is None:
                if recheck > 0 and poll[0] is None:  # an idle worker's receive begins to wait
                    poll[0] = env.now
                    poll[1] += 1
                return
            poll[0] = None  # the receive returned this message
            idle[0] -= 1
            at(rng.choice(samples) if samples else p.poll_latency_s, received, job)

    def free_worker(_ev=None) -> None:
        idle[0] += 1
        dispatch()

    def arrive(ev) -> None:
        job = ev.value
        queued, woken = sched.submit(job.tenant, job, job.order)
        if queued:
            visible(ev)
        for _, other in woken:
            other.gave_way = False  # a fresh message: it may give way again
            at(p.wake_latency_s, visible, other)

    def start_lease(job, now: float) -> None:
        job.attempts += 1
        if job.started_at is None:
            job.started_at = now
        job.status = "running"
        lease_start[id(job)] = now
        busy[1] += 1
        if busy[1] > result.most_leases_cluster:
            result.most_leases_cluster = busy[1]
        held = tenants[job.tenant].in_flight
        if held > most.get(job.tenant, 0):
            most[job.tenant] = held
        at(job.hold_s, finish, job)

    def received(ev) -> None:
        job = ev.value
        now = env.now
        if job.first_received_at is None:
            job.first_received_at = now
        outcome = sched.deliver(job.tenant, job, job.order, now, may_give_way=not job.gave_way)
        if outcome is policy.TAKE or outcome is policy.BORROW:
            start_lease(job, now)
            return
        if outcome == policy.GIVE_WAY:  # a copy to the back of the queue, then the delivery is acked
            job.gave_way = True
            at(p.park_s, gave_way, job)
            return
        if outcome is policy.DEFER:  # the copy is sent at the end of the deferral, then acked
            at(p.park_s, deferred, job)
        else:
            at(p.park_s, free_worker, None)

    def gave_way(ev) -> None:
        visible(ev)
        free_worker()

    def deferred(ev) -> None:
        sent_delayed(ev.value, p.defer_delay_s)
        free_worker()

    def finish(ev) -> None:
        job = ev.value
        now = env.now
        start = lease_start.pop(id(job))
        busy[0] += now - start
        busy[1] -= 1
        if keep_intervals:
            intervals.append((start, now, job.tenant))
        requeue = False
        if job.fails > 0:
            job.fails -= 1
            if job.attempts < p.max_attempts:
                requeue = True
            else:
                job.status, job.finished_at = "failed", now
        else:
            job.status, job.finished_at = "succeeded", now
        woken = sched.release(job.tenant, requeue=requeue)
        if requeue:
            job.status, job.gave_way = "queued", False  # the retry is a new message
            sent_delayed(job, min(p.retry_backoff_max_s, p.retry_backoff_base_s * 2 ** max(0, job.attempts - 1)))
        for _, other in woken:
            other.gave_way = False  # a fresh message: it may give way again
            at(p.wake_latency_s, visible, other)
        free_worker()

    t0 = min(j.submitted_at for j in jobs)

    def change_tier(ev) -> None:
        tenant, tier = ev.value
        sched.set_tier(tenant, tier if policy_name == "borrow" else Tier(cap=tier.cap))
        for _, other in sched.wake(tenant):
            other.gave_way = False  # a fresh message: it may give way again
            at(p.wake_latency_s, visible, other)

    for change_at, tenant, tier in tier_changes or ():
        at(max(0.0, change_at - t0), change_tier, (tenant, tier))
    if workers_online_at is not None and workers_online_at > t0:
        idle[0] = 0

        def online(_ev) -> None:
            idle[0] = slots
            dispatch()

        at(workers_online_at - t0, online, None)
    for order, job in enumerate(sorted(jobs, key=lambda j: j.submitted_at)):
        job.order = order
        job.submitted_at -= t0
        at(job.submitted_at, arrive, job)
    env.run()
    for job in jobs:
        job.submitted_at += t0
        for name in ("started_at", "finished_at", "first_received_at"):
            value = getattr(job, name)
            if value is not None:
                setattr(job, name, value + t0)
    result.intervals = [(a + t0, b + t0, t) for a, b, t in intervals]
    result.busy_slot_s = busy[0]
    return result
