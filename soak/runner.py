"""The soak run itself (see :mod:`soak.__main__` for what it does and checks)."""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import signal
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from leases.audit import audit
from leases.eventlog import cap_violations, max_concurrent, read_events, unterminated
from leases.models import JobItem, LeaseItem
from imposition.common import aws, redis_namespace
from imposition.common.settings import get_settings
from devstack.fault_proxy import FaultProxy
from devstack.stack import (
    BEAT_READY,
    REPO,
    WORKER_READY,
    ManagedProcess,
    ReceiverProcess,
    beat_command,
    poll_stale_after_s,
    stop_all,
    wait_for,
    worker_command,
)
from soak import faults as fault_classes
from soak.faults import Fault
from imposition.common.tenancy import input_key
from tasks import storage
from tasks.base import RELEASE_UNREACHABLE
from tasks.sweeper import visible_messages
from tasks.submission import submit_job
from imposition.webhooks.endpoints import set_webhook

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
#: Seconds a probe job (submitted after each fault) has to succeed.
PROBE_TIMEOUT_S = 240.0
#: The probe jobs' tenant (not among the workload's).
PROBE_TENANT = "soak-probe"
#: Webhook statuses that settle a final job's event (``gave_up`` is recorded too, but counted missing:
#: the soak's receiver answers, so a webhook that gave up was lost).
WEBHOOK_SETTLED = ("delivered", "no_endpoint")
#: Seconds to wait, after the last job, for every webhook to settle.
WEBHOOK_SETTLE_S = 240.0
#: The sweeper's note of a reclaimed attempt names its holder ``<node>/<pid>``.
_HOLDER_PID = re.compile(r"worker \S+/(\d+) stopped renewing")


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
    fault_repeats: int = 0
    fault_classes: tuple[str, ...] = fault_classes.CLASSES
    wall_time_s: float = 0.0
    submitted: int = 0
    probes: int = 0
    succeeded: int = 0
    failed: int = 0
    lost: list[str] = field(default_factory=list)
    #: Jobs whose plate was committed more than once (event log), or with more than one plate object.
    doubled: list[str] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    leases_acquired: int = 0
    leases_reclaimed: int = 0
    leases_lost_by_holder: int = 0
    #: Lost attempts by cause (``JobItem.lost_attempts``): ``holder_vanished`` (charged: the kills and
    #: stops), ``infra_lost`` and ``infra_error`` (lost to the infrastructure: not charged).
    lost_attempts: dict = field(default_factory=dict)
    #: Charged attempts that neither the job's success nor one of the soak's SIGKILLs/SIGSTOPs
    #: explains: attempts consumed by the infrastructure (must be 0), and the jobs concerned.
    infra_attempts: int = 0
    infra_attempt_jobs: list[dict] = field(default_factory=list)
    deferrals: int = 0
    attempts: dict = field(default_factory=dict)
    peak_leases: dict = field(default_factory=dict)
    cap_violations: list = field(default_factory=list)
    unterminated_leases: int = 0
    plates: int = 0
    plates_without_success: list[str] = field(default_factory=list)
    #: Final jobs whose webhook is neither delivered nor recorded ``no_endpoint``; statuses seen.
    webhooks_missing: list[str] = field(default_factory=list)
    webhook_statuses: dict = field(default_factory=dict)
    #: Processes restarted: ``planned`` (the warm restarts), ``unplanned`` (found dead and restarted).
    restarts: dict = field(default_factory=lambda: {"planned": 0, "unplanned": 0})
    unplanned_restarts: list[str] = field(default_factory=list)
    processes_alive_at_end: bool = False
    audit_clean: bool = False
    audit_report: str = ""
    leases_left: int = 0

    def fault_counts(self) -> dict[str, int]:
        """Fault class → how many were injected."""
        counts = Counter(f.kind for f in self.faults)
        return {k: counts[k] for k in fault_classes.CLASSES}

    @property
    def passed(self) -> bool:
        """The total-queue rule (every job succeeded exactly once, webhook settled), no cap
        violation, no attempt consumed by the infrastructure, audit clean, every process alive and
        consuming after every fault, every fault class injected ``fault_repeats`` times."""
        return (not self.cap_violations and not self.lost and not self.doubled
                and not self.plates_without_success and self.audit_clean and self.leases_left == 0
                and self.unterminated_leases == 0 and self.succeeded == self.submitted and self.failed == 0
                and not self.webhooks_missing and self.infra_attempts == 0 and self.restarts["unplanned"] == 0
                and self.processes_alive_at_end and all(f.ok for f in self.faults)
                and all(self.fault_counts()[k] >= self.fault_repeats for k in self.fault_classes))

    def describe(self) -> str:
        """A human summary."""
        per_class = ", ".join(f"{k} {n}" for k, n in self.fault_counts().items())
        bad = [f"{f.kind}@{f.at_s:.0f}s" for f in self.faults if not f.ok]
        recovered = [f.recovered_s for f in self.faults if f.recovered_s is not None]
        lines = [
            f"soak: {self.jobs} jobs + {self.probes} probes, {self.tenants} tenants, {self.nodes} nodes × "
            f"{self.slots // self.nodes} slots, clocks {self.clocks}",
            f"  wall time            {self.wall_time_s:.0f} s",
            f"  succeeded / failed   {self.succeeded} / {self.failed} of {self.submitted} submitted",
            f"  faults               {len(self.faults)}: {per_class}",
            f"  after each fault     {len(self.faults) - len(bad)} recovered (alive, consuming, probe succeeded)"
            + (f"; probe {min(recovered):.0f}–{max(recovered):.0f} s after the fault" if recovered else "")
            + (f"; NOT: {', '.join(bad)}" if bad else ""),
            f"  SIGKILLs             {len(self.kills)} ({sum(1 for k in self.kills if k.holding_job)} holding a lease)",
            f"  leases               {self.leases_acquired} acquired, {self.leases_reclaimed} reclaimed by the sweeper, "
            f"{self.leases_lost_by_holder} found lost by their holder",
            f"  lost attempts        {self.lost_attempts} (infra_lost, infra_error: not charged)",
            f"  deferrals            {self.deferrals}",
            f"  attempts per job     {self.attempts}",
            f"  peak leases/tenant   {self.peak_leases}",
            f"  lost                 {len(self.lost)}",
            f"  doubled              {len(self.doubled)}",
            f"  webhooks missing     {len(self.webhooks_missing)} (statuses {self.webhook_statuses})",
            f"  cap violations       {len(self.cap_violations)}",
            f"  infra attempts       {self.infra_attempts} (attempts consumed by the infrastructure)",
            f"  processes restarted  {self.restarts['planned']} planned (warm restarts), "
            f"{self.restarts['unplanned']} found dead{': ' + ', '.join(self.unplanned_restarts) if self.unplanned_restarts else ''}",
            f"  plates               {self.plates} ({len(self.plates_without_success)} without a succeeded job)",
            f"  unterminated leases  {self.unterminated_leases}; leases left {self.leases_left}",
            f"  audit                {'clean' if self.audit_clean else 'DRIFT'}",
            f"  verdict              {'PASS' if self.passed else 'FAIL'}",
        ]
        if not self.audit_clean:
            lines.append(self.audit_report)
        return "\n".join(lines)


class Soak:
    """One soak run; ``args`` as parsed by :mod:`soak.__main__`; ``proxies`` (``aws``, ``dynamodb``,
    ``redis``) are the fault proxies every process of the stack reaches its endpoints through."""

    def __init__(self, args, proxies: dict[str, FaultProxy]) -> None:
        self.args = args
        self.proxies = proxies
        self.out: Path = args.out
        self.event_dir = self.out / "events"
        self.stamp_dir = self.out / "stamps"
        self.random = random.Random(args.seed)
        self.fault_random = random.Random(args.seed + 1)
        self.processes: dict[str, ManagedProcess] = {}
        self.receiver: ReceiverProcess | None = None
        self.started_at = time.monotonic()
        self.status: dict[str, str] = {}
        self.kills: list[Kill] = []
        self.faults: list[Fault] = []
        #: PIDs the soak SIGKILLed or SIGSTOPped: their lost attempts are the soak's, not the infrastructure's.
        self.culled_pids: set[int] = set()
        self.restarts = {"planned": 0, "unplanned": 0}
        self.unplanned: list[str] = []
        self.probes: list[str] = []
        self._procs = threading.Lock()  # held while the fault thread stops, restarts or signals processes
        self._status = threading.Lock()
        self._fault_thread: threading.Thread | None = None
        self._fault_error: str | None = None
        self._stop = threading.Event()

    def _t(self) -> float:
        return round(time.monotonic() - self.started_at, 1)

    # -- the stack -------------------------------------------------------------------------------

    def _env(self, name: str | None) -> dict[str, str]:
        """A process's environment: every endpoint through its fault proxy; a worker's poll stamp."""
        aws_url, dynamo_url, redis_port = self.proxies["aws"].url, self.proxies["dynamodb"].url, self.proxies["redis"].port
        env = {"AWS_ENDPOINT_URL": aws_url, "AWS_ENDPOINT_URL_SQS": aws_url, "AWS_ENDPOINT_URL_S3": aws_url,
               "AWS_ENDPOINT_URL_DYNAMODB": dynamo_url,
               "IMPOSITION_REDIS_URL": f"redis://127.0.0.1:{redis_port}/10",
               "IMPOSITION_EVENTS_URL": f"redis://127.0.0.1:{redis_port}/9"}
        if name is not None:
            env["IMPOSITION_POLL_STAMP_PATH"] = str(self.stamp_dir / f"{name}.polled")
        return env

    def _workers(self) -> dict[str, tuple[str, int]]:
        """Worker name → (queue, pool size)."""
        s = get_settings()
        workers = {f"imposer{n}": (s.imposition_queue, self.args.concurrency) for n in range(1, self.args.nodes + 1)}
        workers["maintenance"] = (s.maintenance_queue, 1)
        # 4 slots: with one, its receives (one message each) kept up with ~1.5 rounds a second, fewer
        # than the jobs ending; the webhooks of the last 400 jobs were still queued 10 minutes later.
        workers["notifier"] = (s.notifications_queue, 4)
        return workers

    def _start_stack(self) -> None:
        """Start the webhook receiver and the celery processes (the AWS endpoint is up and provisioned)."""
        self.event_dir.mkdir(parents=True, exist_ok=True)
        self.stamp_dir.mkdir(parents=True, exist_ok=True)
        self.receiver = ReceiverProcess(self.out / "receiver.log")
        for tenant in self._tenants()[::2]:  # every other tenant has a webhook; the others none (no_endpoint)
            set_webhook(tenant, self.receiver.url(tenant), secrets.token_hex(32))
        for name, (queue, concurrency) in self._workers().items():
            self.processes[name] = ManagedProcess(worker_command(queue, concurrency, name, app="soak.app"),
                                                  self.out / f"{name}.log", env=self._env(name),
                                                  ready_marker=WORKER_READY, ready_timeout_s=120)
        self.processes["beat"] = ManagedProcess(beat_command(self.out / "beat-schedule", app="soak.app"),
                                                self.out / "beat.log", env=self._env(None), ready_marker=BEAT_READY)

    def _stop_stack(self) -> None:
        for proxy in self.proxies.values():
            proxy.set_mode("forward")
        for proc in self.processes.values():
            if proc.proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        stop_all(list(self.processes.values()))
        if self.receiver is not None:
            self.receiver.stop()
        s = get_settings()
        redis_namespace.forget(s.redis_key_namespace, (s.redis_url, s.events_url))

    def _revive_dead(self) -> None:
        """A process that exited outside a planned restart is counted, named and started again."""
        if not self._procs.acquire(blocking=False):
            return
        try:
            for name, proc in list(self.processes.items()):
                if proc.proc.poll() is not None:
                    self.restarts["unplanned"] += 1
                    self.unplanned.append(f"{name}@{self._t():.0f}s (exit {proc.proc.returncode})")
                    print(f"  {name} EXITED ({proc.proc.returncode}); restarting it. Last lines:\n{proc.tail(8)}",
                          flush=True)
                    self.processes[name] = proc.restarted()
        finally:
            self._procs.release()

    # -- workload ----------------------------------------------------------------------------------

    def _tenants(self) -> list[str]:
        return [f"soak-{chr(ord('a') + i)}" for i in range(self.args.tenants)]

    def _plan(self) -> list[tuple[str, str, dict]]:
        tenants = self._tenants()
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
        job_id = submit_job(tenant_id=tenant, token=f"soak-{job_id}", input_key=key, layout=layout, job_id=job_id)
        with self._status:
            self.status[job_id] = "queued"
        return job_id

    def _refresh_status(self) -> None:
        """Read the status of the unfinished jobs only (a batch get: light on the DynamoDB server)."""
        with self._status:
            unfinished = [j for j, status in self.status.items() if status not in FINAL]
        found = {job.job_id: job.status for job in JobItem.batch_get(unfinished, attributes_to_get=["job_id", "status"])}
        with self._status:
            self.status.update(found)

    def _unfinished(self) -> int:
        with self._status:
            return sum(1 for s in self.status.values() if s not in FINAL)

    # -- SIGKILLs --------------------------------------------------------------------------------

    def _held_by_pid(self) -> dict[int, str]:
        open_tokens: dict[str, dict] = {}
        for e in read_events(self.event_dir):
            if e["event"] == "acquired":
                open_tokens[e["token"]] = e
            elif e["event"] in ("releasing", "reclaimed", "lost"):
                open_tokens.pop(e["token"], None)
        return {e["pid"]: e["job"] for e in open_tokens.values()}

    def _kill_one(self) -> bool:
        """SIGKILL one pool child (every other one chosen among those holding a lease); False if the
        fault thread holds the processes right now (try again later)."""
        if not self._procs.acquire(blocking=False):
            return False
        try:
            nodes = [n for n in self.processes if n.startswith("imposer")]
            held = self._held_by_pid()
            try:
                children = {n: [c.pid for c in psutil.Process(self.processes[n].pid).children()] for n in nodes}
            except psutil.NoSuchProcess:
                return False
            holding = [(n, pid) for n in nodes for pid in children[n] if pid in held]
            if holding and len(self.kills) % 2 == 0:
                node, pid = self.random.choice(holding)
            else:
                node = self.random.choice(nodes)
                if not children[node]:
                    return False
                pid = self.random.choice(children[node])
            try:
                psutil.Process(pid).send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                return False
            self.culled_pids.add(pid)
            self.kills.append(Kill(self._t(), node, pid, held.get(pid)))
            print(f"  SIGKILL #{len(self.kills)}: {node} child {pid} (holding {held.get(pid) or 'no lease'})",
                  flush=True)
            return True
        finally:
            self._procs.release()

    # -- faults ----------------------------------------------------------------------------------

    def _fault_loop(self) -> None:
        """Inject the planned faults one at a time, each followed by its recovery check."""
        try:
            if self._stop.wait(self.args.fault_warmup):
                return
            occurrences: Counter = Counter()
            kinds = fault_classes.plan(self.args.fault_repeats, self.fault_random, self.args.fault_classes)
            for n, kind in enumerate(kinds, start=1):
                if self._stop.is_set():
                    return
                fault = self._inject(kind, occurrences[kind])
                occurrences[kind] += 1
                self.faults.append(fault)
                self._recover(fault)
                print(f"  fault {len(self.faults)} {kind} ({fault.detail}): "
                      f"{'recovered' if fault.ok else 'NOT RECOVERED'}"
                      + (f", probe {fault.recovered_s:.0f} s after its end" if fault.recovered_s is not None else "")
                      + (f"; not consuming: {fault.not_consuming}" if fault.not_consuming else ""), flush=True)
                if n < len(kinds) and self._stop.wait(self.fault_random.uniform(0.5, 1.5) * self.args.fault_gap):
                    return
        except Exception:  # noqa: BLE001 - reported in the summary: the run fails, the stack is still stopped
            self._fault_error = traceback.format_exc()
            print(f"  the fault thread failed:\n{self._fault_error}", flush=True)

    def _inject(self, kind: str, occurrence: int) -> Fault:
        """Inject one fault of ``kind`` (its ``occurrence``-th, from 0); returns when it has ended."""
        s = get_settings()
        stop_s = s.lease_ttl_s + 2 * s.sweep_interval_s + 4
        length_s = fault_classes.duration_s(kind, self.fault_random, stop_s)
        fault = Fault(kind, self._t(), length_s)
        print(f"  fault {len(self.faults) + 1} {kind} for {length_s:g} s", flush=True)
        if kind in fault_classes.PROXY_FAULTS:
            proxy_name, modes = fault_classes.PROXY_FAULTS[kind]
            mode = modes[occurrence % len(modes)]
            proxy = self.proxies[proxy_name]
            before = proxy.faults[mode]
            with proxy.failing(mode):
                time.sleep(length_s)
            fault.detail = f"{proxy_name} proxy {mode} {length_s:g} s"
            fault.faults_counted = proxy.faults[mode] - before
        elif kind == "sigstop":
            with self._procs:
                nodes = [n for n in self.processes if n.startswith("imposer")]
                held = self._held_by_pid()
                by_node = {n: [c.pid for c in psutil.Process(self.processes[n].pid).children(recursive=True)]
                           for n in nodes}
                node = max(nodes, key=lambda n: (sum(1 for pid in by_node[n] if pid in held), self.fault_random.random()))
                proc = self.processes[node]
                self.culled_pids.update([proc.pid, *by_node[node]])
                holding = sum(1 for pid in by_node[node] if pid in held)
                os.killpg(proc.pid, signal.SIGSTOP)
                try:
                    time.sleep(length_s)
                finally:
                    os.killpg(proc.pid, signal.SIGCONT)
            fault.detail = f"{node} stopped {length_s:g} s holding {holding} lease(s)"
        elif kind == "warm_restart":
            began = time.monotonic()
            with self._procs:
                workers = [n for n in self.processes if n != "beat"]
                for name in workers:
                    self.processes[name].terminate()
                for name in workers:
                    self.processes[name] = self.processes[name].restarted()
                self.restarts["planned"] += len(workers)
            fault.duration_s = round(time.monotonic() - began, 1)
            fault.detail = f"{len(workers)} workers warm-restarted in {fault.duration_s:g} s"
        return fault

    def _recover(self, fault: Fault) -> None:
        """After ``fault``: every process alive and polling its queue again, and a probe job succeeds."""
        ended = time.time()
        ended_mono = time.monotonic()
        bound_s = poll_stale_after_s(get_settings()) + 30

        def stale() -> list[str]:
            late = []
            for name in self._workers():
                try:
                    polled = (self.stamp_dir / f"{name}.polled").stat().st_mtime
                except FileNotFoundError:
                    polled = 0.0
                if polled <= ended:
                    late.append(name)
            return late

        try:
            wait_for(lambda: not stale(), bound_s, interval_s=0.5, what="every worker to poll again")
        except TimeoutError:
            pass
        fault.not_consuming = stale()
        fault.consuming = not fault.not_consuming
        with self._procs:
            fault.alive = all(p.proc.poll() is None for p in self.processes.values())
        job_id = self._submit(PROBE_TENANT, "a5_8p.pdf", SADDLE)
        fault.probe_job = job_id
        self.probes.append(job_id)

        def probe_done() -> bool:
            return JobItem.get(job_id, consistent_read=True, attributes_to_get=["status"]).status == "succeeded"

        try:
            wait_for(probe_done, PROBE_TIMEOUT_S, interval_s=0.5, what=f"probe job {job_id}")
            fault.recovered_s = round(time.monotonic() - ended_mono, 1)
        except TimeoutError:
            fault.recovered_s = None

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> Summary:
        args = self.args
        try:
            self._start_stack()
            self.started_at = time.monotonic()
            if args.fault_repeats > 0:
                self._fault_thread = threading.Thread(target=self._fault_loop, name="soak-faults", daemon=True)
                self._fault_thread.start()
            plan = self._plan()
            kill_every = max(1, args.jobs // (args.kills + 1))
            next_kill_at = kill_every
            last_progress = last_print = time.monotonic()
            done_before = 0
            while True:
                self._refresh_status()
                with self._status:
                    done = len(self.status) - sum(1 for st in self.status.values() if st not in FINAL)
                while plan and self._unfinished() < args.backlog:
                    tenant, sample, layout = plan.pop()
                    self._submit(tenant, sample, layout)
                if len(self.kills) < args.kills and done >= next_kill_at and self._kill_one():
                    next_kill_at += kill_every
                self._revive_dead()
                now = time.monotonic()
                faulting = self._fault_thread is not None and self._fault_thread.is_alive()
                if done > done_before or faulting:
                    done_before, last_progress = done, now
                if now - last_print > PROGRESS_EVERY_S:
                    print(f"  {now - self.started_at:5.0f} s: {len(self.status)} submitted, {done} final, "
                          f"{len(self.kills)} kills, {len(self.faults)} faults", flush=True)
                    last_print = now
                if not plan and self._unfinished() == 0 and not faulting:
                    break
                if now - last_progress > STALL_S:
                    print(f"  no job finished for {STALL_S:.0f} s: stopping", flush=True)
                    break
                time.sleep(1.0)
            self._stop.set()
            wall_time_s = time.monotonic() - self.started_at
            s = get_settings()
            try:
                wait_for(lambda: not list(LeaseItem.scan(consistent_read=True)),
                         s.lease_ttl_s + 2 * s.sweep_interval_s + 30, what="leases to drain")
            except TimeoutError as exc:
                print(f"  {exc}", flush=True)
            try:
                wait_for(self._webhooks_settled, WEBHOOK_SETTLE_S, interval_s=2, what="every webhook to settle")
            except TimeoutError as exc:
                print(f"  {exc}", flush=True)
            return self._summarise(wall_time_s)
        finally:
            self._stop.set()
            self._stop_stack()

    def _webhooks_settled(self) -> bool:
        jobs = JobItem.batch_get(list(self.status), attributes_to_get=["job_id", "status", "webhook_status"])
        return all(j.webhook_status in WEBHOOK_SETTLED for j in jobs if j.status in FINAL)

    def _summarise(self, wall_time_s: float) -> Summary:
        s = get_settings()
        args = self.args
        summary = Summary(jobs=args.jobs, tenants=args.tenants, nodes=args.nodes, slots=args.nodes * args.concurrency,
                          clocks={"lease_ttl_s": s.lease_ttl_s, "heartbeat_interval_s": s.heartbeat_interval_s,
                                  "sweep_interval_s": s.sweep_interval_s}, fault_repeats=args.fault_repeats,
                          fault_classes=tuple(args.fault_classes),
                          wall_time_s=wall_time_s, kills=self.kills, faults=self.faults,
                          restarts=dict(self.restarts), unplanned_restarts=list(self.unplanned))
        summary.submitted, summary.probes = len(self.status), len(self.probes)
        summary.processes_alive_at_end = all(p.proc.poll() is None for p in self.processes.values())
        jobs = {job.job_id: job for job in JobItem.scan(consistent_read=True) if job.job_id in self.status}
        summary.succeeded = sum(1 for j in jobs.values() if j.status == "succeeded")
        summary.failed = sum(1 for j in jobs.values() if j.status == "failed")
        summary.lost = sorted(j for j in self.status if j not in jobs or jobs[j].status not in FINAL)
        summary.attempts = dict(sorted(Counter(int(j.attempts) for j in jobs.values()).items()))
        summary.deferrals = sum(int(j.defer_count or 0) for j in jobs.values())
        summary.lost_attempts = dict(sorted(Counter(e["cause"] for j in jobs.values()
                                                    for e in (j.lost_attempts or [])).items()))
        for job in jobs.values():
            extra = self._infra_charged(job)
            if extra:
                summary.infra_attempts += extra
                summary.infra_attempt_jobs.append({
                    "job": job.job_id, "extra": extra, "status": job.status, "attempts": int(job.attempts),
                    "infra_lost_attempts": sorted(int(a) for a in (job.infra_lost_attempts or ())),
                    "lost_attempts": job.lost_attempts or [], "error_code": job.error_code, "error": job.error})
        final = [j for j in jobs.values() if j.status in FINAL]
        summary.webhook_statuses = dict(sorted(Counter(str(j.webhook_status) for j in final).items()))
        summary.webhooks_missing = sorted(j.job_id for j in final if j.webhook_status not in WEBHOOK_SETTLED)

        events = read_events(self.event_dir)
        kinds = Counter(e["event"] for e in events)
        summary.leases_acquired = kinds["acquired"]
        summary.leases_reclaimed = kinds["reclaimed"]
        summary.leases_lost_by_holder = kinds["lost"]
        summary.peak_leases = {t: p.leases for t, p in sorted(max_concurrent(events).items())}
        summary.cap_violations = [asdict(v) for v in cap_violations(events, {}, s.default_cap)]
        summary.unterminated_leases = len(unterminated(events))
        # A commit attempt that did not apply: its holder found the lease lost (not merely unconfirmed:
        # RELEASE_UNREACHABLE may have applied), or the sweeper reclaimed that lease afterwards (a
        # reclaim needs the lease, which an applied commit deletes: a holder SIGKILLed between
        # ``releasing`` and its transaction).
        refused = {e["token"] for e in events if e["event"] == "reclaimed"
                   or (e["event"] == "lost" and not str(e.get("detail", "")).startswith(RELEASE_UNREACHABLE))}
        commits = Counter(e["job"] for e in events
                          if e["event"] == "releasing" and e["outcome"] == "succeeded" and e["token"] not in refused)

        plates = []
        for page in aws.s3().get_paginator("list_objects_v2").paginate(Bucket=s.bucket):
            plates += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith("/plate.pdf")]
        summary.plates = len(plates)
        plate_jobs = Counter(key.split("/")[3] for key in plates)
        summary.plates_without_success = sorted(j for j in plate_jobs if jobs.get(j) is None
                                                or jobs[j].status != "succeeded")
        summary.doubled = sorted({j for j, n in commits.items() if n > 1} | {j for j, n in plate_jobs.items() if n > 1})
        report = audit(backlog=visible_messages)  # lost queued jobs too
        summary.audit_clean, summary.audit_report = report.clean, report.describe()
        summary.leases_left = len(list(LeaseItem.scan(consistent_read=True)))
        if self._fault_error:
            summary.audit_report += f"\nthe fault thread failed:\n{self._fault_error}"
            summary.faults.append(Fault("fault_thread_failed", 0.0, 0.0, detail=self._fault_error[-500:]))
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(
            {**asdict(summary), "passed": summary.passed, "fault_counts": summary.fault_counts(),
             "lost": summary.lost[:50], "lost_count": len(summary.lost), "doubled_count": len(summary.doubled),
             "webhooks_missing": summary.webhooks_missing[:50], "webhooks_missing_count": len(summary.webhooks_missing),
             "cap_violation_count": len(summary.cap_violations)}, indent=2, default=str))
        return summary

    def _infra_charged(self, job: JobItem) -> int:
        """Charged attempts of ``job`` that neither its success nor a lease reclaimed from a process
        the soak SIGKILLed or SIGSTOPped explains (the workload's jobs never fail by themselves)."""
        uncharged = {int(a) for a in (job.infra_lost_attempts or ())}
        culled = sum(1 for e in (job.lost_attempts or [])
                     if e["cause"] == "holder_vanished" and int(e["attempt"]) not in uncharged
                     and (m := _HOLDER_PID.search(str(e.get("detail", "")))) and int(m.group(1)) in self.culled_pids)
        explained = culled + (1 if job.status == "succeeded" else 0)
        return max(0, job.charged_attempts - explained)
