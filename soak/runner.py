"""The soak run itself (see :mod:`soak.__main__` for what it does and checks)."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from leases.audit import audit
from leases.eventlog import cap_violations, max_concurrent, read_events, unterminated
from leases.models import JobItem, LeaseItem
from service import aws, redis_namespace
from service.settings import get_settings
from control.stack import (
    BEAT_READY,
    REPO,
    WORKER_READY,
    ManagedProcess,
    beat_command,
    stop_all,
    wait_for,
    worker_command,
)
from service.tenancy import input_key
from tasks import storage
from tasks.sweeper import visible_messages
from tasks.submission import submit_job

SAMPLES = REPO / "samples"
SADDLE = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}
N_UP = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2, "gutter_mm": 5,
        "crop_marks": True}
WORKLOAD = (("a5_8p.pdf", SADDLE), ("a5_13p_odd.pdf", SADDLE), ("a5_8p.pdf", N_UP), ("a5_16p.pdf", N_UP))
FINAL = ("succeeded", "failed")
#: With no job finishing for this long (s), the run is declared stuck and the rest counted lost.
STALL_S = 180.0
#: Seconds between progress lines.
PROGRESS_EVERY_S = 15.0


@dataclass
class Kill:
    """One SIGKILL: when (s since start), which node and child, and the job it held (if known)."""

    at_s: float
    node: str
    pid: int
    holding_job: str | None


@dataclass
class Summary:
    """The soak's numbers and verdict."""

    jobs: int
    tenants: int
    nodes: int
    slots: int
    clocks: dict
    wall_time_s: float = 0.0
    succeeded: int = 0
    failed: int = 0
    lost: list[str] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    leases_acquired: int = 0
    leases_reclaimed: int = 0
    leases_lost_by_holder: int = 0
    #: Lost attempts by cause (``JobItem.lost_attempts``): ``holder_vanished`` (charged: the kills)
    #: and ``infra_lost`` (attempts lost to the infrastructure, not charged).
    lost_attempts: dict = field(default_factory=dict)
    deferrals: int = 0
    attempts: dict = field(default_factory=dict)
    peak_leases: dict = field(default_factory=dict)
    cap_violations: list = field(default_factory=list)
    unterminated_leases: int = 0
    duplicate_commits: list[str] = field(default_factory=list)
    plates: int = 0
    plates_without_success: list[str] = field(default_factory=list)
    audit_clean: bool = False
    audit_report: str = ""
    leases_left: int = 0

    @property
    def passed(self) -> bool:
        """Zero violations, lost jobs and duplicates; audit clean; every planned kill done."""
        return (not self.cap_violations and not self.lost and not self.duplicate_commits
                and not self.plates_without_success and self.audit_clean and self.leases_left == 0
                and self.unterminated_leases == 0 and self.succeeded + self.failed == self.jobs)

    def describe(self) -> str:
        """A human summary."""
        lines = [
            f"soak: {self.jobs} jobs, {self.tenants} tenants, {self.nodes} nodes × {self.slots // self.nodes} slots, "
            f"clocks {self.clocks}",
            f"  wall time            {self.wall_time_s:.0f} s",
            f"  succeeded / failed   {self.succeeded} / {self.failed}",
            f"  SIGKILLs             {len(self.kills)} ({sum(1 for k in self.kills if k.holding_job)} holding a lease)",
            f"  leases               {self.leases_acquired} acquired, {self.leases_reclaimed} reclaimed by the sweeper, "
            f"{self.leases_lost_by_holder} found lost by their holder",
            f"  lost attempts        {self.lost_attempts} (infra_lost: not charged)",
            f"  deferrals            {self.deferrals}",
            f"  attempts per job     {self.attempts}",
            f"  peak leases/tenant   {self.peak_leases}",
            f"  cap violations       {len(self.cap_violations)}",
            f"  lost jobs            {len(self.lost)}",
            f"  duplicate commits    {len(self.duplicate_commits)}",
            f"  plates               {self.plates} ({len(self.plates_without_success)} without a succeeded job)",
            f"  unterminated leases  {self.unterminated_leases}; leases left {self.leases_left}",
            f"  audit                {'clean' if self.audit_clean else 'DRIFT'}",
            f"  verdict              {'PASS' if self.passed else 'FAIL'}",
        ]
        if not self.audit_clean:
            lines.append(self.audit_report)
        return "\n".join(lines)


class Soak:
    """One soak run; ``args`` as parsed by :mod:`soak.__main__`."""

    def __init__(self, args) -> None:
        self.args = args
        self.out: Path = args.out
        self.event_dir = self.out / "events"
        self.random = random.Random(args.seed)
        self.processes: dict[str, ManagedProcess] = {}
        self.started_at = time.monotonic()
        self.status: dict[str, str] = {}
        self.kills: list[Kill] = []
        self._stop = threading.Event()

    # -- the stack -------------------------------------------------------------------------------

    def _start_stack(self) -> None:
        """Start the celery processes (the AWS endpoint is up and provisioned already)."""
        self.event_dir.mkdir(parents=True, exist_ok=True)
        settings = get_settings()
        for n in range(1, self.args.nodes + 1):
            name = f"imposer{n}"
            self.processes[name] = ManagedProcess(
                worker_command(settings.imposition_queue, self.args.concurrency, name, app="soak.app"),
                self.out / f"{name}.log", ready_marker=WORKER_READY)
        self.processes["maintenance"] = ManagedProcess(
            worker_command(settings.maintenance_queue, 1, "maintenance", app="soak.app"),
            self.out / "maintenance.log", ready_marker=WORKER_READY)
        self.processes["beat"] = ManagedProcess(beat_command(self.out / "beat-schedule", app="soak.app"),
                                                self.out / "beat.log", ready_marker=BEAT_READY)

    def _stop_stack(self) -> None:
        stop_all(list(self.processes.values()))
        s = get_settings()
        redis_namespace.forget(s.redis_key_namespace, (s.redis_url, s.events_url))

    # -- workload ----------------------------------------------------------------------------------

    def _plan(self) -> list[tuple[str, str, dict]]:
        tenants = [f"soak-{chr(ord('a') + i)}" for i in range(self.args.tenants)]
        weights = list(range(self.args.tenants, 0, -1))
        plan = []
        for _ in range(self.args.jobs):
            tenant = self.random.choices(tenants, weights)[0]
            sample, layout = self.random.choice(WORKLOAD)
            plan.append((tenant, sample, layout))
        return plan

    def _submit(self, tenant: str, sample: str, layout: dict) -> str:
        job_id = uuid.uuid4().hex
        key = input_key(tenant, job_id)
        storage.upload(SAMPLES / sample, key)
        return submit_job(tenant_id=tenant, token=f"soak-{job_id}", input_key=key, layout=layout, job_id=job_id)

    def _refresh_status(self) -> None:
        """Read the status of the unfinished jobs only (a batch get: light on the DynamoDB server)."""
        unfinished = [j for j, status in self.status.items() if status not in FINAL]
        for job in JobItem.batch_get(unfinished, attributes_to_get=["job_id", "status"]):
            self.status[job.job_id] = job.status

    def _unfinished(self) -> int:
        return sum(1 for s in self.status.values() if s not in FINAL)

    # -- faults ----------------------------------------------------------------------------------

    def _held_by_pid(self) -> dict[int, str]:
        open_tokens: dict[str, dict] = {}
        for e in read_events(self.event_dir):
            if e["event"] == "acquired":
                open_tokens[e["token"]] = e
            elif e["event"] in ("releasing", "reclaimed", "lost"):
                open_tokens.pop(e["token"], None)
        return {e["pid"]: e["job"] for e in open_tokens.values()}

    def _kill_one(self) -> None:
        nodes = [n for n in self.processes if n.startswith("imposer")]
        held = self._held_by_pid()
        children = {n: [c.pid for c in psutil.Process(self.processes[n].pid).children()] for n in nodes}
        holding = [(n, pid) for n in nodes for pid in children[n] if pid in held]
        if holding and len(self.kills) % 2 == 0:
            node, pid = self.random.choice(holding)
        else:
            node = self.random.choice(nodes)
            if not children[node]:
                return
            pid = self.random.choice(children[node])
        try:
            psutil.Process(pid).send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            return
        self.kills.append(Kill(round(time.monotonic() - self.started_at, 1), node, pid, held.get(pid)))
        print(f"  SIGKILL #{len(self.kills)}: {node} child {pid} (holding {held.get(pid) or 'no lease'})", flush=True)

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> Summary:
        args = self.args
        try:
            self._start_stack()
            self.started_at = time.monotonic()
            plan = self._plan()
            kill_every = max(1, args.jobs // (args.kills + 1))
            next_kill_at = kill_every
            last_progress = last_print = time.monotonic()
            done_before = 0
            while True:
                self._refresh_status()
                done = len(self.status) - self._unfinished()
                while plan and self._unfinished() < args.backlog:
                    tenant, sample, layout = plan.pop()
                    self.status[self._submit(tenant, sample, layout)] = "queued"
                if len(self.kills) < args.kills and done >= next_kill_at:
                    self._kill_one()
                    next_kill_at += kill_every
                now = time.monotonic()
                if done > done_before:
                    done_before, last_progress = done, now
                if now - last_print > PROGRESS_EVERY_S:
                    print(f"  {now - self.started_at:5.0f} s: {len(self.status)} submitted, {done} final, "
                          f"{len(self.kills)} kills", flush=True)
                    last_print = now
                if not plan and self._unfinished() == 0:
                    break
                if now - last_progress > STALL_S:
                    print(f"  no job finished for {STALL_S:.0f} s: stopping", flush=True)
                    break
                time.sleep(1.0)
            wall_time_s = time.monotonic() - self.started_at
            s = get_settings()
            wait_for(lambda: not list(LeaseItem.scan(consistent_read=True)),
                     s.lease_ttl_s + 2 * s.sweep_interval_s + 30, what="leases to drain")
            return self._summarise(wall_time_s)
        finally:
            self._stop_stack()

    def _summarise(self, wall_time_s: float) -> Summary:
        s = get_settings()
        args = self.args
        summary = Summary(jobs=args.jobs, tenants=args.tenants, nodes=args.nodes, slots=args.nodes * args.concurrency,
                          clocks={"lease_ttl_s": s.lease_ttl_s, "heartbeat_interval_s": s.heartbeat_interval_s,
                                  "sweep_interval_s": s.sweep_interval_s}, wall_time_s=wall_time_s, kills=self.kills)
        jobs = {job.job_id: job for job in JobItem.scan(consistent_read=True) if job.job_id in self.status}
        summary.succeeded = sum(1 for j in jobs.values() if j.status == "succeeded")
        summary.failed = sum(1 for j in jobs.values() if j.status == "failed")
        summary.lost = sorted(j for j in self.status if j not in jobs or jobs[j].status not in FINAL)
        summary.attempts = dict(sorted(Counter(int(j.attempts) for j in jobs.values()).items()))
        summary.deferrals = sum(int(j.defer_count or 0) for j in jobs.values())
        summary.lost_attempts = dict(sorted(Counter(e["cause"] for j in jobs.values()
                                                    for e in (j.lost_attempts or [])).items()))

        events = read_events(self.event_dir)
        kinds = Counter(e["event"] for e in events)
        summary.leases_acquired = kinds["acquired"]
        summary.leases_reclaimed = kinds["reclaimed"]
        summary.leases_lost_by_holder = kinds["lost"]
        summary.peak_leases = {t: p.leases for t, p in sorted(max_concurrent(events).items())}
        summary.cap_violations = [asdict(v) for v in cap_violations(events, {}, s.default_cap)]
        summary.unterminated_leases = len(unterminated(events))
        refused = {e["token"] for e in events if e["event"] == "lost"}
        commits = Counter(e["job"] for e in events
                          if e["event"] == "releasing" and e["outcome"] == "succeeded" and e["token"] not in refused)
        summary.duplicate_commits = sorted(j for j, n in commits.items() if n > 1)

        plates = []
        for page in aws.s3().get_paginator("list_objects_v2").paginate(Bucket=s.bucket):
            plates += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith("/plate.pdf")]
        summary.plates = len(plates)
        plate_jobs = Counter(key.split("/")[3] for key in plates)
        summary.plates_without_success = sorted(j for j in plate_jobs if jobs.get(j) is None
                                                or jobs[j].status != "succeeded")
        report = audit(backlog=visible_messages)  # lost queued jobs too
        summary.audit_clean, summary.audit_report = report.clean, report.describe()
        summary.leases_left = len(list(LeaseItem.scan(consistent_read=True)))
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(
            {**asdict(summary), "passed": summary.passed, "lost": summary.lost[:50]}, indent=2, default=str))
        return summary
