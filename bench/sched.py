"""``make bench-sched``: the scheduling benchmark on the real local stack, timer against hand-off.

Every scenario runs under each policy in one go (``timer``: the fixed 30 s re-poll; ``handoff``;
``borrow``: hand-off with every tenant's burst cap at 8 and the default reserve of 1 slot), each
scenario on a local AWS endpoint (moto) of its own behind a request-counting proxy
(:mod:`bench.counting_proxy`; :func:`main` says why), with real worker processes (one node of
``slots_per_node`` slots, a maintenance worker, beat) running the stand-in engine of
:mod:`bench.sched_app`. It prints one table and writes it, with a PNG timeline of busy slots per
tenant for each scenario and policy, to ``out/bench-sched/`` and ``bench/RESULTS-scheduling.md``.

Columns: makespan ÷ ideal (ideal = the larger of total work ÷ slots and each tenant's work ÷ its
cap, or under ``borrow`` its burst cap within slots − reserve), slot utilisation (busy slot-seconds ÷
the slot-seconds the tenants could use while they had unfinished work: each tenant at most its cap,
and under ``borrow`` up to its burst cap only in slots above the reserve, as the borrowing rules
allow (:func:`utilisation`); a slot is busy from its lease's acquire until its release transaction
returned), AWS requests per completed job counted at the endpoint, less the benchmark's own polls
(the split by operation in the JSON), light tenants' p50/p95/max wait (start − submit), the most
leases of one tenant and of the cluster at once, the audit, the share of the run the DynamoDB
endpoint (one request at a time: near 100 %, the run measures moto) and the CPUs were busy, the
longest idle after a release whose tenant waited (:func:`idle_after_release_s`) and the sweeper's
wakes. "Before and now" puts each row beside the core before issue 30 (:data:`BASELINE`). Each
scenario's jobs are then replayed in the simulator (:mod:`bench.sim_check`).

``BENCH_SCHED_ONLY=alone,burst``: a subset; ``BENCH_SCHED_POLICIES=handoff``: one policy;
``BENCH_SCHED_KEEP=1`` keeps the previous rows of pairs not run.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from devstack.stack import REPO

OUT = REPO / "out" / "bench-sched"
RESULTS = REPO / "bench" / "RESULTS-scheduling.md"
#: The numbers of the scheduling core before issue 30, printed beside today's (``source`` says
#: where each set was measured).
BASELINE = REPO / "bench" / "baseline-scheduling.json"
TIMER_DELAY_S = 30
#: The burst cap of every tenant under the ``borrow`` policy (hand-off with borrowing, reserve 1).
BURST_CAP = 8
LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


@dataclass(frozen=True)
class Wave:
    """``count`` jobs of ``tenant`` (each ``duration_s``), submitted ``at_s`` after the scenario starts."""

    tenant: str
    count: int
    duration_s: float
    at_s: float = 0.0
    light: bool = False


@dataclass(frozen=True)
class Scenario:
    """``backlog``: every job is submitted while its tenant is paused (cap 0), then the cap is
    raised; the makespan is counted from the raise, so the scenario measures a standing backlog,
    not the submitter's speed."""

    name: str
    waves: tuple[Wave, ...]
    note: str = ""
    backlog: bool = False
    #: Seconds the local DynamoDB's global indexes lag behind its tables (AWS's are eventually
    #: consistent; :class:`devstack.localaws.IndexLag`).
    gsi_lag_s: float = 0.0


SCENARIOS = (
    Scenario("alone", (Wave("solo", 200, 1.0),), "one tenant alone, 200 jobs of 1 s"),
    Scenario("burst", (Wave("burst", 100, 1.0), *(Wave(f"light{i}", 3, 1.0, at_s=5, light=True) for i in range(3))),
             "a burst of 100 from one tenant, three tenants of 3 jobs 5 s later"),
    Scenario("heavy3", (*(Wave(f"heavy{i}", 40, 1.0) for i in range(3)), Wave("light", 3, 1.0, at_s=2, light=True)),
             "three heavy tenants of 40 jobs, then a light one of 3"),
    Scenario("skew", (Wave("slow", 30, 6.0), Wave("fast", 30, 0.5, light=True)), "30 jobs of 6 s against 30 of 0.5 s"),
    Scenario("cost100", (Wave("c100", 100, 0.5),), "cost: one tenant, backlog of 100 jobs of 0.5 s", backlog=True),
    Scenario("cost1000", (Wave("c1000", 1000, 0.5),), "cost: one tenant, backlog of 1,000 jobs of 0.5 s",
             backlog=True),
    Scenario("cost30s", (Wave("c30", 24, 30.0),), "cost: one tenant, 24 jobs of 30 s", backlog=True),
    Scenario("nowait", (Wave("nowait", 4, 0.5),), "reference: 4 jobs, none waits (requests of a job that never waited)"),
    # The job lengths a press shop has (issue 30): 5 s and 30 s.
    Scenario("alone5s", (Wave("solo5", 40, 5.0),), "one tenant alone, 40 jobs of 5 s"),
    Scenario("burst5s", (Wave("burst5", 40, 5.0), *(Wave(f"light5{i}", 2, 5.0, at_s=10, light=True) for i in range(3))),
             "a burst of 40 jobs of 5 s, three tenants of 2 jobs 10 s later"),
    Scenario("heavy3_5s", (*(Wave(f"heavy5{i}", 16, 5.0) for i in range(3)), Wave("light5", 2, 5.0, at_s=5, light=True)),
             "three heavy tenants of 16 jobs of 5 s, then a light one of 2"),
    Scenario("heavy3_5s_lag", (*(Wave(f"heavy5{i}", 16, 5.0) for i in range(3)),
                               Wave("light5", 2, 5.0, at_s=5, light=True)),
             "heavy3_5s with every DynamoDB index 1 s behind its table", gsi_lag_s=1.0),
    Scenario("alone30s", (Wave("solo30", 12, 30.0),), "one tenant alone, 12 jobs of 30 s"),
    Scenario("burst30s", (Wave("burst30", 12, 30.0), *(Wave(f"light30{i}", 1, 30.0, at_s=30, light=True)
                                                       for i in range(3))),
             "a burst of 12 jobs of 30 s, three tenants of 1 job 30 s later"),
    Scenario("heavy3_30s", (*(Wave(f"heavy30{i}", 8, 30.0) for i in range(3)), Wave("light30", 1, 30.0, at_s=30,
                                                                                  light=True)),
             "three heavy tenants of 8 jobs of 30 s, then a light one of 1"),
)


@dataclass
class Result:
    scenario: str
    policy: str
    jobs: int
    finished: int
    makespan_s: float
    ideal_s: float
    utilisation: float
    requests_per_job: float
    requests: dict = field(default_factory=dict)
    light_wait_p50_s: float | None = None
    light_wait_p95_s: float | None = None
    light_wait_max_s: float | None = None
    most_leases_tenant: int = 0
    most_leases_cluster: int = 0
    audit_clean: bool = False
    run_twice: int = 0
    #: Share of the run's wall time (from the first submission, or a backlog's release, until the
    #: benchmark saw every job final) the DynamoDB endpoint (one request at a time) spent on
    #: requests, and the machine's CPUs were busy (all processes: workers, endpoints, benchmark);
    #: None: not read.
    dynamodb_busy: float | None = None
    cpu_busy: float | None = None
    #: After a release whose tenant still had jobs waiting for a slot, the longest time until any
    #: job started (s; :func:`idle_after_release_s`), and the jobs the sweeper woke.
    idle_after_release_max_s: float | None = None
    woken_by_sweeper: int = 0
    #: The day the row was measured (a row kept by ``BENCH_SCHED_KEEP`` keeps its own).
    measured_on: str = field(default_factory=lambda: time.strftime("%Y-%m-%d"))

    @property
    def ratio(self) -> float:
        return self.makespan_s / self.ideal_s if self.ideal_s else float("nan")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def idle_after_release_s(items: list) -> float | None:
    """The longest time from a job's end until the next start of any job, over the ends whose
    tenant had a job submitted before and started after them (one waiting for a slot): how long
    a freed slot idled while its tenant waited. None: no such end."""
    starts = sorted(float(j.started_at) for j in items)
    gaps = []
    for j in items:
        end = float(j.finished_at)
        waits = any(k.tenant_id == j.tenant_id and float(k.submitted_at) <= end < float(k.started_at) for k in items)
        later = [t for t in starts if t > end]
        if waits and later:
            gaps.append(later[0] - end)
    return max(gaps) if gaps else None


def utilisation(intervals, demand: dict[str, list[tuple[float, float]]], caps: dict[str, int], slots: int,
                start: float, end: float, *, burst_caps: dict[str, int] | None = None, reserve: int = 0,
                step_s: float = 0.05) -> float:
    """Busy slot-seconds ÷ usable slot-seconds over ``[start, end]`` (module docstring).

    ``demand[tenant]`` lists each job's ``(submitted_at, finished_at)``; with ``d`` of them
    unfinished at an instant, a tenant can use ``min(cap, d)`` slots within its cap and, with a burst
    cap (``burst_caps``, already at most ``slots − reserve``), ``min(burst_cap, d) − cap`` more by
    borrowing; the cluster can use ``min(slots, within + min(borrowed, slots − reserve − within))``:
    a borrower never takes the reserve (docs/design.md §3, borrowing).
    """
    burst_caps = burst_caps or {}
    busy = usable = 0.0
    t = start
    while t < end:
        held = sum(1 for iv in intervals if iv.start_at <= t < (iv.end_at or end))
        within = borrowed = 0
        for tenant, jobs in demand.items():
            unfinished = sum(1 for s, f in jobs if s <= t < f)
            within += min(caps[tenant], unfinished)
            borrowed += max(0, min(burst_caps.get(tenant, 0), unfinished) - caps[tenant])
        room = within + min(borrowed, max(0, slots - reserve - within))
        busy += min(held, slots) * step_s
        usable += min(slots, room) * step_s
        t += step_s
    return busy / usable if usable else float("nan")


class Bench:
    """One run: the endpoint and proxies up once, the workers started per policy."""

    def __init__(self, *, gsi_lag_s: float = 0.0) -> None:
        from collections import Counter

        self.gsi_lag_s = gsi_lag_s
        OUT.mkdir(parents=True, exist_ok=True)
        #: Requests the benchmark itself sent (its polls), taken off the endpoint's counts.
        self.own_requests: Counter = Counter()

    def __enter__(self) -> "Bench":
        from bench.counting_proxy import CountingProxy
        from devstack.localaws import LocalAws

        self.local_aws = LocalAws(log_path=OUT / "moto.log", gsi_lag_s=self.gsi_lag_s).start()
        (OUT / "events").mkdir(parents=True, exist_ok=True)
        upstream = self.local_aws.env
        self.sqs_proxy = CountingProxy(upstream["AWS_ENDPOINT_URL"], "sqs").start()
        self.dynamo_proxy = CountingProxy(upstream["AWS_ENDPOINT_URL_DYNAMODB"], "dynamodb").start()
        self.env = {**upstream, "AWS_ENDPOINT_URL": self.sqs_proxy.url,
                    "AWS_ENDPOINT_URL_DYNAMODB": self.dynamo_proxy.url,
                    "IMPOSITION_REDIS_KEY_NAMESPACE": f"imposition-bench-{uuid.uuid4().hex[:8]}",
                    "IMPOSITION_SWEEP_INTERVAL_S": "10", "IMPOSITION_HEARTBEAT_INTERVAL_S": "10",
                    "IMPOSITION_DEFER_DELAY_S": str(TIMER_DELAY_S), "IMPOSITION_SQS_WAIT_TIME_S": "10",
                    "IMPOSITION_RATE_LIMIT_PER_MIN": "100000", "IMPOSITION_ADMISSION_IN_FLIGHT_CAP": "100000",
                    "IMPOSITION_AUTO_REGISTER_TENANTS": "true",
                    "BENCH_DURATIONS_FILE": str(OUT / "durations.json"),
                    "BENCH_EVENT_LOG_DIR": str(OUT / "events")}
        (OUT / "durations.json").write_text("{}")
        os.environ.update(self.env)
        from imposition.cli.provision import provision
        from leases import dynamo
        from leases.models import reset_connections
        from imposition.common import aws
        from imposition.common.settings import get_settings

        get_settings.cache_clear()
        aws.reset()  # this process's clients point at the previous policy's endpoint
        reset_connections()
        dynamo._connection_for.cache_clear()
        provision()
        return self

    def __exit__(self, *exc: object) -> None:
        from imposition.common import redis_namespace
        from imposition.common.settings import get_settings

        s = get_settings()
        redis_namespace.forget(s.redis_key_namespace, (s.redis_url, s.events_url))
        for proxy in (self.sqs_proxy, self.dynamo_proxy):
            proxy.stop()
        self.local_aws.stop()

    # -- processes --------------------------------------------------------------------------------

    def start_workers(self, policy: str) -> list:
        from imposition.common.settings import get_settings
        from devstack.stack import BEAT_READY, WORKER_READY, ManagedProcess, beat_command, worker_command

        waiting_policy = "timer" if policy == "timer" else "handoff"
        os.environ["IMPOSITION_WAITING_POLICY"] = waiting_policy
        get_settings.cache_clear()
        s = get_settings()
        env = {**self.env, "IMPOSITION_WAITING_POLICY": waiting_policy}
        procs = [
            ManagedProcess(worker_command(s.imposition_queue, s.slots_per_node, "imposer", app="bench.sched_app"),
                           OUT / f"imposer-{policy}.log", env=env, ready_marker=WORKER_READY, ready_timeout_s=90),
            ManagedProcess(worker_command(s.maintenance_queue, 1, "maintenance", app="bench.sched_app"),
                           OUT / f"maintenance-{policy}.log", env=env, ready_marker=WORKER_READY, ready_timeout_s=90),
            ManagedProcess(beat_command(OUT / f"beat-{policy}", app="bench.sched_app"), OUT / f"beat-{policy}.log",
                           env=env, ready_marker=BEAT_READY, ready_timeout_s=90),
        ]
        return procs

    # -- waiting for the end, without counting our own reads ---------------------------------------

    def wait_for_final(self, tenants: list[str], job_ids: list[str], deadline: float) -> dict:
        """Wait until every tenant's counters say nothing is queued, waiting or running (one strongly
        consistent read per tenant a second; a batch read of the jobs' status every 15 s as a
        check), then read every job once. Returns ``{job_id: JobItem}`` of the final ones. The
        benchmark's own requests are added to :attr:`own_requests`, which the endpoint counts
        exclude. The check reads the status alone: a batch read of whole items, 200 jobs, held
        moto's single-threaded DynamoDB endpoint for about 0.9 s, and every chain's commit with it
        (`alone` with borrowing lost some 6 slot-seconds to it)."""
        from leases.models import JobItem, TenantItem

        def final_items(status_only: bool = False) -> dict:
            self.own_requests["dynamodb.BatchGetItem"] += -(-len(job_ids) // 100)
            attributes = ["job_id", "status"] if status_only else None
            return {j.job_id: j for j in JobItem.batch_get(job_ids, attributes_to_get=attributes)
                    if j.status in ("succeeded", "failed")}

        polls = 0
        while time.time() < deadline:
            time.sleep(1)
            polls += 1
            self.own_requests["dynamodb.GetItem"] += len(tenants)
            idle = all(int(t.occupied or 0) == 0 and int(t.waiting or 0) == 0 and int(t.in_flight or 0) == 0
                       for t in (TenantItem.get(name, consistent_read=True) for name in tenants))
            if idle or polls % 15 == 0:
                if len(final_items(status_only=True)) == len(job_ids):
                    break
        return final_items()

    # -- one scenario -----------------------------------------------------------------------------

    def run_scenario(self, scenario: Scenario, policy: str) -> Result:
        from leases.audit import audit
        from leases.eventlog import busy_intervals, held_intervals, max_concurrent, read_events
        from imposition.common.settings import get_settings
        from leases.tenants import set_cap
        from leases.waiting import wake
        from tasks.messages import publish_job
        from tasks.submission import submit_job

        s = get_settings()
        run = uuid.uuid4().hex[:6]
        tenants = {w.tenant: f"{scenario.name}-{w.tenant}-{policy}-{run}" for w in scenario.waves}
        burst_cap = BURST_CAP if policy == "borrow" else None
        for tenant in tenants.values():
            if scenario.backlog:
                set_cap(tenant, 0)  # paused while its backlog is submitted
            elif burst_cap is not None:
                set_cap(tenant, s.default_cap, burst_cap=burst_cap)
        durations = json.loads((OUT / "durations.json").read_text())
        durations.update({tenants[w.tenant]: w.duration_s for w in scenario.waves})
        (OUT / "durations.json").write_text(json.dumps(durations))
        self.sqs_proxy.take(), self.dynamo_proxy.take()
        load = Load(self.local_aws.dynamodb.url if self.local_aws.dynamodb is not None else None)
        started = time.time()
        job_ids: dict[str, list[str]] = {t: [] for t in tenants.values()}
        for wave in sorted(scenario.waves, key=lambda w: w.at_s):
            while time.time() < started + wave.at_s:
                time.sleep(0.05)
            tenant = tenants[wave.tenant]
            for _ in range(wave.count):
                job_id = uuid.uuid4().hex
                job_ids[tenant].append(submit_job(tenant_id=tenant, token=job_id, layout=LAYOUT,
                                                  input_key=f"tenants/{tenant}/jobs/{job_id}/input.pdf",
                                                  job_id=job_id))
        every = [j for ids in job_ids.values() for j in ids]
        released_at = None
        if scenario.backlog:
            load = Load(load.dynamodb_url)  # the run, not its backlog's submission
            released_at = time.time()
            for tenant in tenants.values():
                set_cap(tenant, s.default_cap, burst_cap=burst_cap)
                wake(tenant, publish=publish_job, reason="cap_change")
        budget_s = 120 + 3 * sum(w.count * w.duration_s for w in scenario.waves)
        if policy == "timer":  # its worst case: a tenant's cap of jobs per delay (its copies come due together)
            budget_s += TIMER_DELAY_S * sum(-(-w.count // s.default_cap) for w in scenario.waves)
        items = self.wait_for_final(list(tenants.values()), every, time.time() + budget_s)
        dynamodb_busy, cpu_busy = load.shares()
        requests = self.sqs_proxy.take() + self.dynamo_proxy.take() - self.own_requests
        self.own_requests.clear()
        events = [e for e in read_events(OUT / "events") if e.get("tenant") in job_ids]
        intervals = held_intervals(events)
        busy = busy_intervals(events)  # a slot is busy until its release transaction returned
        peaks = max_concurrent(events)
        done = list(items.values())
        first = released_at or min(float(j.submitted_at) for j in done)
        last = max(float(j.finished_at) for j in done)
        slots = s.slots_per_node
        usable_cap = min(BURST_CAP, slots - s.reserve_slots) if policy == "borrow" else s.default_cap
        caps = {t: usable_cap for t in job_ids}  # the ideal's
        borrowing = {"burst_caps": caps, "reserve": s.reserve_slots} if policy == "borrow" else {}
        demand = {t: [(float(items[j].submitted_at), float(items[j].finished_at)) for j in ids if j in items]
                  for t, ids in job_ids.items()}
        work = {tenants[w.tenant]: 0.0 for w in scenario.waves}
        for w in scenario.waves:
            work[tenants[w.tenant]] += w.count * w.duration_s
        ideal = max(sum(work.values()) / slots, *(v / caps[t] for t, v in work.items()))
        light = [float(items[j].started_at) - float(items[j].submitted_at)
                 for w in scenario.waves if w.light for j in job_ids[tenants[w.tenant]] if j in items]
        commits: dict[str, int] = {}
        for e in events:
            if e["event"] == "releasing" and e.get("outcome") == "succeeded":
                commits[e["job"]] = commits.get(e["job"], 0) + 1
        result = Result(
            scenario=scenario.name, policy=policy, jobs=len(every), finished=len(done),
            makespan_s=last - first, ideal_s=ideal,
            utilisation=utilisation(busy, demand, {t: s.default_cap for t in job_ids}, slots, first, last, **borrowing),
            requests_per_job=sum(requests.values()) / max(1, len(done)), requests=dict(requests.most_common()),
            light_wait_p50_s=_pct(light, 0.5), light_wait_p95_s=_pct(light, 0.95),
            light_wait_max_s=max(light) if light else None,
            most_leases_tenant=max((p.leases for p in peaks.values()), default=0),
            most_leases_cluster=_cluster_peak(intervals), audit_clean=audit(list(job_ids)).clean,
            run_twice=sum(1 for n in commits.values() if n > 1), dynamodb_busy=dynamodb_busy, cpu_busy=cpu_busy,
            idle_after_release_max_s=idle_after_release_s(done),
            woken_by_sweeper=sum(1 for j in done if j.woken_by == "sweeper"),
        )
        _timeline_png(OUT / f"{scenario.name}-{policy}.png", busy, first, last, scenario, policy, tenants)
        from bench.sim_check import save_jobs

        save_jobs(OUT / f"jobs-{scenario.name}-{policy}.json", scenario=scenario.name, policy=policy, tenants=tenants,
                  light={w.tenant for w in scenario.waves if w.light}, items=items, job_ids=job_ids,
                  intervals=intervals, busy=busy, deliveries=[e for e in events if e["event"] in ("delivery", "woken", "in_place")],
                  burst_cap=BURST_CAP if policy == "borrow" else None,
                  defer_delay_s=TIMER_DELAY_S, released_at=released_at)
        return result

    def overhead(self, policy: str, jobs: int = 500) -> list[Result]:
        """``jobs`` no-op jobs through FairTask, then as many plain Celery tasks, each published in
        full before the node starts, so each phase measures only the node draining its queue."""
        from leases.models import JobItem, TenantItem
        from leases.tenants import set_cap
        from imposition.common import aws
        from imposition.common.settings import get_settings
        from devstack.stack import stop_all
        from imposition.common.tenancy import message_group_id
        from tasks import app
        from tasks.submission import submit_job

        s = get_settings()
        tenant = f"overhead-{policy}-{uuid.uuid4().hex[:6]}"
        set_cap(tenant, s.max_cap)  # the cap does not bind: this measures the lease's own cost
        ids = [submit_job(tenant_id=tenant, token=f"o{i}", layout=LAYOUT,
                          input_key=f"tenants/{tenant}/jobs/x{i}/input.pdf") for i in range(jobs)]
        url = aws.queue_url(s.imposition_queue)

        def queue_empty() -> bool:
            attrs = aws.sqs().get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"]) == 0

        def drain(done) -> float:
            procs = self.start_workers(policy)
            started = time.time()
            try:
                while not done() and time.time() < started + 900:
                    time.sleep(0.5)
            finally:
                stop_all(procs)
            return time.time() - started

        def fair_done() -> bool:  # one read a poll: 500 job reads every 0.25 s swamped the endpoint
            item = TenantItem.get(tenant, consistent_read=True)
            return int(item.occupied or 0) == 0 and int(item.in_flight or 0) == 0

        fair_s = drain(fair_done)
        finished = {j.job_id for j in JobItem.batch_get(ids) if j.status == "succeeded"}
        for _ in range(jobs):
            app.send_task("bench.noop", queue=s.imposition_queue, MessageGroupId=message_group_id(tenant))
        plain_s = drain(queue_empty)
        return [Result("overhead", policy, jobs, len(finished), fair_s, plain_s, float("nan"), float("nan"),
                       requests={"fair_jobs_per_s": jobs / fair_s, "plain_tasks_per_s": jobs / plain_s})]


class Load:
    """How loaded the machine and the DynamoDB endpoint were from its creation to :meth:`shares`."""

    def __init__(self, dynamodb_url: str | None) -> None:
        import psutil

        self.dynamodb_url = dynamodb_url
        self.cpu = psutil.cpu_times()
        self.wall = time.monotonic()
        self.busy = self._busy_s()

    def _busy_s(self) -> float | None:
        from devstack.localaws import endpoint_busy

        if self.dynamodb_url is None:
            return None
        try:
            return endpoint_busy(self.dynamodb_url)[0]
        except OSError:
            return None

    def shares(self) -> tuple[float | None, float | None]:
        """``(dynamodb_busy, cpu_busy)``: the DynamoDB endpoint's busy seconds ÷ wall seconds (None if
        it could not be read) and the CPUs' busy time ÷ their total time (idle and I/O wait are
        not busy), both since creation."""
        import psutil

        wall = time.monotonic() - self.wall
        busy = self._busy_s()
        dynamodb = None if busy is None or self.busy is None or wall <= 0 else (busy - self.busy) / wall
        cpu = psutil.cpu_times()
        total = _cpu_total_s(cpu) - _cpu_total_s(self.cpu)
        idle = (cpu.idle - self.cpu.idle) + (getattr(cpu, "iowait", 0.0) - getattr(self.cpu, "iowait", 0.0))
        return dynamodb, (total - idle) / total if total > 0 else None


def _cpu_total_s(times) -> float:
    """All CPU seconds of a ``psutil.cpu_times()`` reading; Linux counts ``guest`` and ``guest_nice``
    within ``user`` and ``nice`` already (as ``psutil.cpu_percent`` does)."""
    return sum(getattr(times, name) for name in times._fields if name not in ("guest", "guest_nice"))


def _cluster_peak(intervals) -> int:
    points = sorted([(iv.start_at, 1) for iv in intervals] + [(iv.end_at or 1e18, -1) for iv in intervals],
                    key=lambda p: (p[0], p[1]))
    now = most = 0
    for _, delta in points:
        now += delta
        most = max(most, now)
    return most


def _timeline_png(path: Path, intervals, start: float, end: float, scenario: Scenario, policy: str,
                  tenants: dict[str, str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step = max(0.1, (end - start) / 600)
    times = [start + i * step for i in range(int((end - start) / step) + 1)]
    fig, ax = plt.subplots(figsize=(9, 3))
    series = []
    for tenant in tenants.values():
        own = [iv for iv in intervals if iv.tenant_id == tenant]
        series.append([sum(1 for iv in own if iv.start_at <= t < (iv.end_at or end)) for t in times])
    ax.stackplot([t - start for t in times], series, labels=list(tenants), step="post")
    ax.set_xlabel("s since the first submission")
    ax.set_ylabel("busy slots")
    ax.set_title(f"{scenario.name} — {policy}")
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def _share(value: float | None) -> str:
    return "—" if value is None or value != value else f"{value * 100:.0f} %"


def table(results: list[Result]) -> str:
    lines = ["| scenario | policy | jobs done | makespan s | ideal s | ÷ ideal | utilisation | AWS req/job | "
             "light wait p50/p95/max s | most leases tenant/cluster | run twice | audit | DynamoDB busy | CPU busy | "
             "idle after release max s | sweeper wakes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.scenario == "overhead":
            lines.append(f"| overhead | {r.policy} | {r.finished}/{r.jobs} | FairTask {r.requests['fair_jobs_per_s']:.1f} "
                         f"jobs/s | plain {r.requests['plain_tasks_per_s']:.1f} tasks/s | "
                         f"{r.requests['fair_jobs_per_s'] / r.requests['plain_tasks_per_s']:.2f}× | | | | | | | | | | |")
            continue
        light = "/".join(_fmt(v) for v in (r.light_wait_p50_s, r.light_wait_p95_s, r.light_wait_max_s)) \
            if r.light_wait_p50_s is not None else "—"
        kept = "" if r.measured_on == time.strftime("%Y-%m-%d") else f" (kept, {r.measured_on})"
        lines.append(f"| {r.scenario}{kept} | {r.policy} | {r.finished}/{r.jobs} | {r.makespan_s:.1f} | {r.ideal_s:.1f} | "
                     f"{r.ratio:.2f} | {r.utilisation * 100:.0f} % | {r.requests_per_job:.1f} | {light} | "
                     f"{r.most_leases_tenant}/{r.most_leases_cluster} | {r.run_twice} | "
                     f"{'clean' if r.audit_clean else 'DRIFT'} | {_share(r.dynamodb_busy)} | {_share(r.cpu_busy)} | "
                     f"{_fmt(r.idle_after_release_max_s)} | {r.woken_by_sweeper} |")
    return "\n".join(lines)


def main() -> None:
    """Run every scenario (and each policy's overhead) on a fresh local endpoint and fresh workers,
    so each starts from empty tables: moto keeps everything in memory (one endpoint for the whole
    run grew past the machine's memory), and it answers an index query by scanning the whole
    table (docs/design.md, "Known limits of the local stack"), so on a shared endpoint each
    hand-off's read of a later scenario cost more for every job of the earlier ones (real
    DynamoDB's cost does not grow with the table; moto's whole-table copies in
    ``TransactWriteItems``, the first reason, are gone: ``devstack.localaws``). ``BENCH_SCHED_KEEP=1`` keeps
    the rows of (policy, scenario) pairs not run now from the previous ``results.json``."""
    from devstack.stack import stop_all

    only = {n for n in os.environ.get("BENCH_SCHED_ONLY", "").split(",") if n}
    policies = [p for p in os.environ.get("BENCH_SCHED_POLICIES", "timer,handoff,borrow").split(",") if p]
    scenarios = [sc for sc in SCENARIOS if not only or sc.name in only]
    results: list[Result] = []
    previous = OUT / "results.json"
    if os.environ.get("BENCH_SCHED_KEEP") and previous.exists():
        names = {sc.name for sc in scenarios} | ({"overhead"} if not only or "overhead" in only else set())
        results = [Result(**r) for r in json.loads(previous.read_text())
                   if r["policy"] not in policies or r["scenario"] not in names]
    for policy in policies:
        for scenario in scenarios:
            with Bench(gsi_lag_s=scenario.gsi_lag_s) as bench:
                procs = bench.start_workers(policy)
                try:
                    results.append(bench.run_scenario(scenario, policy))
                finally:
                    stop_all(procs)
            print(table(results[-1:]).splitlines()[-1], flush=True)
            print(_sim_check(scenario.name, policy), flush=True)
            write_results(results, scenarios, complete=False)
        if not only or "overhead" in only:
            with Bench() as bench:
                results += bench.overhead(policy)
            print(table(results[-1:]).splitlines()[-1], flush=True)
            write_results(results, scenarios, complete=False)
    write_results(results, scenarios, complete=True)
    print(table(results))
    print(before_and_now(results))


def _sim_check(scenario: str, policy: str) -> str:
    """The simulator's replay of the run just saved: the rows of :func:`bench.sim_check.table`."""
    from bench.sim_check import compare
    from bench.sim_check import table as check_table

    check = compare(json.loads((OUT / f"jobs-{scenario}-{policy}.json").read_text()))
    return "\n".join(check_table([check]).splitlines()[2:])


def before_and_now(results: list[Result]) -> str:
    """Each run's ÷ ideal, utilisation, light p95 and requests per job beside the same scenario and
    policy in :data:`BASELINE` (the core before issue 30; its ``source`` names the commit and the
    run), as a Markdown section; empty when no run has a saved counterpart."""
    if not BASELINE.exists():
        return ""
    saved = json.loads(BASELINE.read_text())
    before = {(r["scenario"], r["policy"]): r for r in saved["rows"]}
    lines = []
    for r in results:
        b = before.get((r.scenario, r.policy))
        if r.scenario == "overhead" or b is None or r.measured_on != time.strftime("%Y-%m-%d"):
            continue
        lines.append(f"| {r.scenario} | {r.policy} | {b['ratio']:.2f} → {r.ratio:.2f} | "
                     f"{b['utilisation'] * 100:.0f} → {r.utilisation * 100:.0f} % | "
                     f"{_fmt(b['light_wait_p95_s'])} → {_fmt(r.light_wait_p95_s)} | "
                     f"{b['requests_per_job']:.1f} → {r.requests_per_job:.1f} |")
    if not lines:
        return ""
    return ("\n## Before and now\n\nBefore: " + "; ".join(saved["sources"]) + ". Now: this run.\n\n"
            "| scenario | policy | ÷ ideal | utilisation | light wait p95 s | AWS req/job |\n|---|---|---|---|---|---|\n"
            + "\n".join(lines) + "\n")


def _sim_section(results: list[Result]) -> str:
    """Predicted against measured for every run of ``results`` whose jobs were saved."""
    from bench.sim_check import compare, section

    paths = [OUT / f"jobs-{r.scenario}-{r.policy}.json" for r in results if r.scenario != "overhead"]
    checks = [compare(json.loads(p.read_text())) for p in paths if p.exists()]
    return "\n" + section(checks) if checks else ""


def write_results(results: list[Result], scenarios: list[Scenario], *, complete: bool) -> None:
    """The table so far to ``out/bench-sched/results.json`` and ``bench/RESULTS-scheduling.md``
    (after every scenario, so an interrupted run keeps what it measured)."""
    text = table(results)
    (OUT / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    RESULTS.write_text(("" if complete else "**Partial run** (interrupted before every scenario ran).\n\n") +
        "# Scheduling benchmark (`make bench-sched`)\n\n"
        f"Measured {time.strftime('%Y-%m-%d')} on this machine (2 cores), one node of 8 slots, cap 4, timer "
        f"delay {TIMER_DELAY_S} s; stand-in engine of fixed duration (`bench/sched_app.py`). See "
        "`bench/sched.py` for the columns. Scenarios: "
        + "; ".join(f"`{sc.name}` {sc.note}" for sc in scenarios) + ".\n\n" + text + "\n"
        + before_and_now(results) + _sim_section(results))


if __name__ == "__main__":
    main()
