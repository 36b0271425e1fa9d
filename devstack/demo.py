"""``make run``: the main job on the embedded stack, end to end, in one command.

1. starts the local AWS endpoint (moto servers for SQS, S3 and DynamoDB) and checks Redis;
2. provisions queues (with dead-letter queues), tables and bucket from the CloudFormation template;
3. starts the processes of docs/design.md §7: an imposition worker (``-c 8``), a maintenance worker, a
   notifications worker (webhooks), beat, Flower (on the Redis events channel), a local webhook
   receiver that verifies each tenant's signed webhooks and confirms the jobs, and, where Debian's
   ``prometheus`` package is installed, a Prometheus server scraping every worker node and loading
   the shipped alert rules (:mod:`imposition.observability.alerts`);
4. submits a real multi-tenant workload: ``acme`` 40 jobs at once, then ``globex``, ``initech`` and
   ``umbrella`` 3 each, over the multi-page PDFs in ``samples/``;
5. shows progress until every job is final, then prints the per-tenant table, writes the plate
   files to ``./out/`` and checks each (it opens with pikepdf and has the right number of sides);
6. stops every process it started, also on Ctrl-C.

While it runs (and with ``--keep``, until Ctrl-C) a supervisor (:class:`devstack.stack.Supervisor`)
watches every process: a worker, beat or Flower that exits, or a worker that stops polling its
queue (``poll_stale_after_s``), is named in the progress output with its last log lines and
restarted, up to ``Settings.supervise_max_restarts`` times; then, or if the webhook receiver or the
embedded AWS endpoint dies (neither can be restarted without losing what the run needs), the run
fails with exit 1 and the last log lines.

Logs go to ``.run/`` (``--run-dir``), held by one run at a time (:class:`devstack.stack.RunDirectory`):
a second run there refuses before it touches anything, naming the first. Exit status: 0 when every
job succeeded and every plate checked out, 1 otherwise (a refused second run too).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from devstack.stack import (
    BEAT_READY,
    PROMETHEUS_BINARY,
    PROMETHEUS_READY,
    REPO,
    WORKER_READY,
    ManagedProcess,
    STOP_REQUESTED,
    ReceiverProcess,
    RunDirectory,
    RunDirectoryTaken,
    SupervisionFailed,
    Supervisor,
    beat_command,
    flower_command,
    flower_login,
    free_port,
    how_this_run_started,
    poll_stale_after_s,
    prometheus_command,
    raise_if_stop_requested,
    relay_make_signals,
    stop_all,
    wait_for,
    worker_command,
)

if TYPE_CHECKING:  # imported where the stack starts
    from devstack.localaws import LocalAws

#: The run directory of ``make run``: logs, poll stamps, the ``env`` file, Prometheus' data.
RUN_DIR = REPO / ".run"
#: What each prefork child of a worker logs once its AWS clients are open (tasks.celery_app).
SLOT_WARM = "slot warmed up"
#: The user of the local Flower's login; its password is generated at each start and printed.
FLOWER_USER = "operator"
OUT_DIR = REPO / "out"
SAMPLES = REPO / "samples"


@dataclass(frozen=True)
class DemoJob:
    """One job of the workload: which sample, which layout, how many sides its plate must have."""

    tenant_id: str
    sample: str
    layout: dict
    expected_sides: int


SADDLE = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}
N_UP = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2,
        "gutter_mm": 5, "crop_marks": True}


def expected_sides(layout: dict, pages: int) -> int:
    """Sides a plate must have: a saddle-stitch booklet prints 4 pages per sheet on 2 sides;
    a 2 × 2 n-up sheet holds 4 pages on one side."""
    if layout["layout"] == "saddle_stitch":
        return 2 * math.ceil(pages / 4)
    return math.ceil(pages / (layout["columns"] * layout["rows"]))


def workload() -> list[DemoJob]:
    """acme's burst of 40 first, then 3 jobs each for globex, initech and umbrella."""
    import pikepdf

    samples = sorted(SAMPLES.glob("*.pdf"))
    if not samples:
        raise click.ClickException(f"no sample PDFs in {SAMPLES}")
    pages = {p.name: len(pikepdf.open(p).pages) for p in samples}
    jobs = []
    plan = [("acme", 40)] + [(t, 3) for t in ("globex", "initech", "umbrella")]
    i = 0
    for tenant, count in plan:
        for _ in range(count):
            sample = samples[i % len(samples)].name
            layout = SADDLE if i % 2 == 0 else N_UP
            jobs.append(DemoJob(tenant, sample, layout, expected_sides(layout, pages[sample])))
            i += 1
    return jobs


class LeaseSampler(threading.Thread):
    """Reads every tenant's ``in_flight`` counter each ``interval_s`` and keeps the most seen.

    The counter is what the lease transactions keep equal to the tenant's number of leases, and a
    read of one item is a consistent point-in-time value; scanning the leases table instead would
    not be (a scan that races a release and an acquire can see both leases). Sampling can miss a
    brief peak, never invent one.
    """

    def __init__(self, tenants: list[str], interval_s: float = 0.2) -> None:
        super().__init__(daemon=True, name="lease-sampler")
        self.tenants = tenants
        self.interval_s = interval_s
        self.most: Counter = Counter()
        self.now: Counter = Counter()
        self._stop = threading.Event()

    def run(self) -> None:
        from leases.models import TenantItem

        while not self._stop.wait(self.interval_s):
            try:
                held = Counter({t.tenant_id: int(t.in_flight or 0)
                                for t in TenantItem.batch_get(self.tenants, attributes_to_get=["tenant_id", "in_flight"])})
            except Exception:  # noqa: BLE001 - a missed sample is not worth stopping the demo
                continue
            self.now = held
            for tenant, n in held.items():
                self.most[tenant] = max(self.most[tenant], n)

    def stop(self) -> None:
        self._stop.set()


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0–1) of ``values`` (inclusive method), or NaN for none."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(round(q * 100)) - 1]


class Demo:
    """The whole ``make run`` session; :meth:`run` returns the exit status."""

    def __init__(self, *, keep: bool = False, run_dir: Path = RUN_DIR) -> None:
        self.keep = keep  # the stack stays up after the workload (``make run KEEP=1``)
        self.run_dir = run_dir  # claimed by main() before the run starts (one run per directory)
        self.processes: list[ManagedProcess] = []
        self.local_aws: LocalAws | None = None
        self.run_id = uuid.uuid4().hex[:8]
        self.namespace = f"imposition-demo-{self.run_id}"  # this run's Redis keys (deleted at stop)
        self.redis_urls: tuple[str, ...] = ()  # where they may be, once the settings are read
        self.receiver: ReceiverProcess | None = None
        self.flower: ManagedProcess | None = None
        self.prometheus_url: str | None = None
        self.supervisor: Supervisor | None = None
        self.metrics_urls: dict[str, str] = {}  # node → its metrics endpoint, once started

    # -- set-up --------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        click.echo(text, err=False)

    def start_stack(self) -> dict[str, str]:
        from devstack.localaws import LocalAws

        self.run_dir.mkdir(exist_ok=True)
        self.say("• starting the local AWS endpoint (moto server: SQS, S3, DynamoDB) …")
        local_aws = self.local_aws = LocalAws(log_path=self.run_dir / "moto.log")
        local_aws.start()
        env = {
            **local_aws.env,
            # The demo's webhook receiver listens on 127.0.0.1, which the SSRF guard refuses by default.
            "IMPOSITION_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true",
            # This run's own Redis keys (admission, recent counts): runs sharing a Redis never meet;
            # stop() deletes them.
            "IMPOSITION_REDIS_KEY_NAMESPACE": self.namespace,
            # The metrics endpoints of the local stack answer on loopback only, and their
            # multiprocess files are this checkout's own (two runs never share a node's files).
            "IMPOSITION_METRICS_ADDRESS": "127.0.0.1",
            "IMPOSITION_METRICS_DIR": str(self.run_dir / "metrics"),
            # The demo's tenants are not created first: they register on their first submission.
            "IMPOSITION_AUTO_REGISTER_TENANTS": "true",
        }
        os.environ.update(env)
        from imposition.common.settings import get_settings

        get_settings.cache_clear()
        settings = get_settings()
        self.redis_urls = (settings.redis_url, settings.events_url)
        for name, url in (("IMPOSITION_REDIS_URL", settings.redis_url), ("IMPOSITION_EVENTS_URL", settings.events_url)):
            self._check_redis(name, url)
        self.say(f"  SQS/S3 at {env['AWS_ENDPOINT_URL']}, DynamoDB at {env['AWS_ENDPOINT_URL_DYNAMODB']}")
        self.say("• tenants register on their first submission here (IMPOSITION_AUTO_REGISTER_TENANTS=true); "
                 "in production it is off: `imposition tenant create T` first, else `unknown_tenant`")
        from imposition.cli.provision import provision

        report = provision()
        self.say(f"• provisioned from the template (imposition render-template): queues {', '.join(report.queues)}; "
                 f"tables {', '.join(report.tables)}; bucket {', '.join(report.bucket)}")
        return env

    def _check_redis(self, name: str, url: str) -> None:
        import redis

        try:
            redis.Redis.from_url(url, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            raise click.ClickException(f"Redis at {url} does not answer ({exc}); start it, or set {name}") from None

    def _forget_redis_keys(self) -> None:
        """Delete this run's Redis keys (its namespace) from the admission and the events database."""
        import redis

        from imposition.common import redis_namespace

        if not self.redis_urls:
            return  # stopped before the settings were read: no key was written
        try:
            redis_namespace.forget(self.namespace, self.redis_urls)
        except redis.RedisError as exc:
            self.say(f"  (could not delete this run's Redis keys: {exc})")

    def start(self, name: str, cmd: list[str], ready: str | None, env: dict[str, str], *,
              consumer: bool = False) -> ManagedProcess:
        """Start one process of the stack and put it under the supervisor (a ``consumer`` sets a
        poll stamp, so that one that stops polling is noticed too)."""
        from imposition.common.settings import get_settings

        stamp = self.run_dir / f"{name}.polled" if consumer else None
        if stamp is not None:
            stamp.unlink(missing_ok=True)
            env = {**env, "IMPOSITION_POLL_STAMP_PATH": str(stamp)}
        proc = ManagedProcess(cmd, self.run_dir / f"{name}.log", env=env, ready_marker=ready, ready_timeout_s=90)
        self.processes.append(proc)
        self.supervised().add(name, proc, poll_stamp=stamp, max_restarts=get_settings().supervise_max_restarts)
        return proc

    def supervised(self) -> Supervisor:
        """The run's supervisor (started with the first process)."""
        if self.supervisor is None:
            from imposition.common.settings import get_settings

            s = get_settings()

            def replace(old: ManagedProcess, new: ManagedProcess) -> None:
                self.processes[self.processes.index(old)] = new
                if self.flower is old:
                    self.flower = new

            self.supervisor = Supervisor(self.say, stale_after_s=poll_stale_after_s(s),
                                         interval_s=s.supervise_interval_s, on_restart=replace).start()
        return self.supervisor

    def check_supervision(self) -> None:
        """Raise the supervisor's failure, if any (the run then fails with it).

        Raises:
            SupervisionFailed: a process kept dying or stopped polling past its restarts.
            KeyboardInterrupt: a stop signal arrived and was not handled yet.
        """
        raise_if_stop_requested()  # a stop signal swallowed while a process was forked
        if self.supervisor is not None and self.supervisor.failure is not None:
            raise self.supervisor.failure
        assert self.local_aws is not None, "check_supervision() before start_stack()"
        for name, server in (("moto SQS/S3 server", self.local_aws.main), ("moto DynamoDB server", self.local_aws.dynamodb)):
            if server is not None and server.proc.poll() is not None:
                # Not restarted: the embedded endpoint keeps every queue, table and object in memory.
                tail = "\n".join((self.run_dir / "moto.log").read_text(errors="replace").splitlines()[-20:])
                raise SupervisionFailed(f"the {name} exited with status {server.proc.returncode}; restarting it "
                                        f"would lose every queue, table and object; the last lines of "
                                        f"{self.run_dir / 'moto.log'}:\n{tail}")

    def start_processes(self, env: dict[str, str]) -> str:
        from imposition.common.settings import get_settings

        s = get_settings()
        self.say(f"• starting celery worker -Q {s.imposition_queue} -c {s.slots_per_node}, "
                 f"a maintenance worker, a notifications worker, beat, Flower and a webhook receiver …")
        # observability: one metrics port per worker node; Flower on the events side channel
        ports = {"imposer": free_port(), "maintenance": free_port()}
        self.metrics_urls = {node: f"http://127.0.0.1:{p}/metrics" for node, p in ports.items()}
        imposer = self.start("worker-imposition", worker_command(s.imposition_queue, s.slots_per_node, "imposer"),
                             WORKER_READY, {**env, "IMPOSITION_METRICS_PORT": str(ports["imposer"])}, consumer=True)
        self.start("worker-maintenance", worker_command(s.maintenance_queue, 1, "maintenance"), WORKER_READY,
                   {**env, "IMPOSITION_METRICS_PORT": str(ports["maintenance"])}, consumer=True)
        self.start("worker-notifications", worker_command(s.notifications_queue, 2, "notifier"), WORKER_READY, env,
                   consumer=True)
        beat_port = free_port()  # beat's /healthz (not scraped: its /metrics has only process metrics)
        self.start("beat", beat_command(self.run_dir / "beat-schedule"), BEAT_READY,
                   {**env, "IMPOSITION_METRICS_PORT": str(beat_port)})
        port = free_port()
        # Flower on 127.0.0.1 behind a login made now, sealed with the local KMS key, as in production
        flower_env, password = flower_login(port, FLOWER_USER)
        self.flower = self.start("flower", flower_command(), None, {**env, **flower_env})
        self.prometheus_url = self.start_prometheus(env, ports)
        # Submit only once every slot has its AWS clients: a fair start for every tenant.
        wait_for(lambda: imposer.log().count(SLOT_WARM) >= s.slots_per_node, 60, what="warm slots")
        (self.run_dir / "env").write_text(env_file_text(operator_environment(env, s.events_url, self.run_dir)))
        self.say("• metrics: " + ", ".join(f"{node} {url}" for node, url in self.metrics_urls.items())
                 + f"; beat's health http://127.0.0.1:{beat_port}/healthz")
        if self.prometheus_url:
            self.say(f"• Prometheus: {self.prometheus_url} (scrapes both nodes, alert rules loaded: "
                     f"{self.alerts_url()})")
        self.say(f"• in another terminal: . {shown_path(self.run_dir / 'env')} && .venv/bin/imposition status")
        return f"http://127.0.0.1:{port}/ (log in as {FLOWER_USER}, password {password})"

    def alerts_url(self) -> str:
        """Prometheus's page of the alert rules: ``/alerts``, or ``/classic/alerts`` on the 2.x
        releases Debian ships without the new UI (``/alerts`` answers 404 there)."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.prometheus_url}alerts", timeout=2):
                return f"{self.prometheus_url}alerts"
        except (urllib.error.URLError, OSError):
            return f"{self.prometheus_url}classic/alerts"

    def start_prometheus(self, env: dict[str, str], ports: dict[str, int]) -> str | None:
        """Start Debian's Prometheus on a free loopback port, scraping the worker nodes ``ports`` and
        loading the shipped rules; its URL, or None (said) when the package is not installed."""
        from imposition.observability.alerts import write_prometheus_config
        from imposition.common.settings import get_settings

        if not os.access(PROMETHEUS_BINARY, os.X_OK):
            self.say(f"• Prometheus not started: {PROMETHEUS_BINARY} missing (Debian package 'prometheus'; "
                     "`make run` installs it when it can)")
            return None
        s = get_settings()
        config = write_prometheus_config(self.run_dir / "prometheus.yml",
                                         {node: f"127.0.0.1:{port}" for node, port in ports.items()})
        data_dir = self.run_dir / "prometheus-data"
        shutil.rmtree(data_dir, ignore_errors=True)  # this run's series only
        port = free_port()
        retention = f"{s.capacity_weeks * 7 + 7}d"
        self.start("prometheus", prometheus_command(config, data_dir, port, retention=retention),
                   PROMETHEUS_READY, env)
        return f"http://127.0.0.1:{port}/"

    def start_receiver(self, env: dict[str, str], tenants: list[str]) -> None:
        """Start the local webhook receiver and give each demo tenant a signed webhook to it."""
        import secrets

        from imposition.webhooks.endpoints import set_webhook

        receiver = self.receiver = ReceiverProcess(self.run_dir / "receiver.log", env=env)
        self.processes.append(receiver.process)
        # Not restarted: a new receiver would listen on another port than the tenants' webhook URLs.
        self.supervised().add("webhook receiver", receiver.process, max_restarts=0)
        for tenant in tenants:
            set_webhook(tenant, receiver.url(tenant), secrets.token_hex(32))

    # -- the workload --------------------------------------------------------------------------

    def submit_all(self, jobs: list[DemoJob]) -> dict[str, DemoJob]:
        """Submit each tenant's jobs at once (in parallel), tenant after tenant, in workload order."""
        from concurrent.futures import ThreadPoolExecutor

        from tasks.submission import submit

        per_tenant: dict[str, list[tuple[int, DemoJob]]] = defaultdict(list)
        for n, job in enumerate(jobs):
            per_tenant[job.tenant_id].append((n, job))
        self.say("• submitting: " + ", ".join(f"{t} {len(js)} jobs" for t, js in per_tenant.items()))
        submitted: dict[str, DemoJob] = {}
        with ThreadPoolExecutor(max_workers=8) as pool:
            for tenant_jobs in per_tenant.values():
                ids = pool.map(lambda nj: submit(SAMPLES / nj[1].sample, tenant_id=nj[1].tenant_id,
                                                 token=f"demo-{self.run_id}-{nj[0]}", layout=nj[1].layout),
                               tenant_jobs)
                submitted.update(zip(ids, (job for _, job in tenant_jobs)))
        return submitted

    def wait(self, submitted: dict[str, DemoJob], sampler: LeaseSampler, timeout_s: float) -> list:
        from leases.models import JobItem, JobStatus

        started = time.monotonic()
        tenants = sorted({j.tenant_id for j in submitted.values()})
        while True:
            self.check_supervision()
            items = list(JobItem.batch_get(list(submitted)))
            by_tenant: defaultdict[str, Counter[str]] = defaultdict(Counter)
            for item in items:
                by_tenant[item.tenant_id][item.status] += 1
            done = sum(1 for i in items if JobStatus(i.status).is_final)
            elapsed = time.monotonic() - started
            parts = []
            for t in tenants:
                c = by_tenant[t]
                total = sum(c.values())
                wait = f", {c['waiting']} waiting" if c["waiting"] else ""
                held = sampler.now.get(t, 0)
                parts.append(f"{t} {c['succeeded'] + c['failed']}/{total} "
                             f"({held} lease{'' if held == 1 else 's'}{wait})")
            defers = sum(int(i.defer_count or 0) for i in items)
            self.say(f"  {elapsed:5.0f}s  " + " | ".join(parts) + f" | cap defers {defers}")
            if done == len(submitted):
                return items
            if elapsed > timeout_s:
                self.say(f"  gave up waiting after {timeout_s:.0f} s")
                return items
            time.sleep(2)

    # -- results -------------------------------------------------------------------------------

    def table(self, items: list, sampler: LeaseSampler) -> None:
        from imposition.common.settings import get_settings

        cap = get_settings().default_cap
        rows = defaultdict(list)
        for item in items:
            rows[item.tenant_id].append(item)
        self.say("")
        header = (f"{'tenant':10} {'done':>5} {'failed':>6} {'wait p50 s':>10} {'wait p95 s':>10} "
                  f"{'max leases':>10} {'cap defers':>10} {'webhooks confirmed':>18}")
        self.say(header)
        self.say("-" * len(header))
        for tenant in sorted(rows):
            jobs = rows[tenant]
            ok = [j for j in jobs if j.status == "succeeded"]
            failed = [j for j in jobs if j.status == "failed"]
            waits = sorted(j.started_at - j.submitted_at for j in jobs if j.started_at)
            most = sampler.most.get(tenant, 0)
            defers = sum(int(j.defer_count or 0) for j in jobs)
            confirmed = self.confirmed(tenant)
            self.say(f"{tenant:10} {len(ok):>5} {len(failed):>6} {percentile(waits, .5):>10.1f} "
                     f"{percentile(waits, .95):>10.1f} {most:>10} {defers:>10} {confirmed:>18}")
        self.say(f"(queue wait = start − submit; cap = {cap} leases per tenant of 8 slots; "
                 "webhooks confirmed = signed webhooks the receiver verified and confirmed)")

    def confirmed(self, tenant: str) -> int:
        """Jobs of ``tenant`` whose webhook the local receiver verified and confirmed."""
        return self.receiver.tenant_counts(tenant)["confirmed"] if self.receiver else 0

    def wait_for_webhooks(self, items: list, timeout_s: float = 60) -> None:
        """Webhooks go out after each job; wait until the receiver confirmed every final job."""
        final = Counter(i.tenant_id for i in items if i.status in ("succeeded", "failed"))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.confirmed(t) >= n for t, n in final.items()):
                return
            time.sleep(1)
        self.say("  (some webhooks were not confirmed in time; see .run/worker-notifications.log)")

    def fetch_plates(self, items: list, submitted: dict[str, DemoJob]) -> list[str]:
        import pikepdf

        from imposition.common import aws
        from imposition.common.settings import get_settings

        for tenant in {item.tenant_id for item in items}:  # this run's plates replace the last run's
            shutil.rmtree(OUT_DIR / tenant, ignore_errors=True)
        problems = []
        bucket = get_settings().bucket
        for item in items:
            if item.status != "succeeded":
                problems.append(f"job {item.job_id} of {item.tenant_id} ended {item.status}: {item.error}")
                continue
            target = OUT_DIR / item.tenant_id / f"{item.job_id}.pdf"
            target.parent.mkdir(parents=True, exist_ok=True)
            aws.s3().download_file(bucket, item.output_key, str(target))
            with pikepdf.open(target) as pdf:
                sides = len(pdf.pages)
            want = submitted[item.job_id].expected_sides
            if sides != want:
                problems.append(f"{target}: {sides} sides, expected {want}")
        return problems

    # -- the whole run -------------------------------------------------------------------------

    def run(self, timeout_s: float) -> int:
        t0 = time.monotonic()
        env = self.start_stack()
        flower_url = self.start_processes(env)
        self.say(f"• Flower: {flower_url}  (open it while the jobs run)")
        jobs = workload()
        self.start_receiver(env, sorted({j.tenant_id for j in jobs}))
        sampler = LeaseSampler(sorted({j.tenant_id for j in jobs}))
        sampler.start()
        submitted = self.submit_all(jobs)
        items = self.wait(submitted, sampler, timeout_s)
        sampler.stop()
        self.wait_for_webhooks(items)
        self.table(items, sampler)
        problems = self.fetch_plates(items, submitted)
        n_plates = sum((OUT_DIR / item.tenant_id / f"{item.job_id}.pdf").is_file() for item in items)
        self.say(f"\n• {n_plates} plate files in {shown_path(OUT_DIR)}/ (each opened with pikepdf, sides checked)")
        for p in problems:
            self.say(f"  PROBLEM: {p}")
        self.outcomes()
        self.capacity_report()
        self.say(f"• Flower {'is' if self.keep else 'was'} at {flower_url}; process logs are in {shown_path(self.run_dir)}/")
        if self.prometheus_url:
            self.say(f"• Prometheus {'is' if self.keep else 'was'} at {self.prometheus_url} "
                     f"(alerts: {self.alerts_url()})")
        self.say(f"• finished in {time.monotonic() - t0:.0f} s")
        return 1 if problems or len(items) != len(jobs) else 0

    def outcomes(self) -> None:
        """observability: the run's ``imposition_jobs_total`` by outcome, summed over the worker nodes' metrics
        endpoints, each label with what it means (docs/operations.md, "Outcomes")."""
        import urllib.request

        texts = []
        for node, url in self.metrics_urls.items():
            try:
                texts.append(urllib.request.urlopen(url, timeout=5).read().decode())
            except OSError as exc:
                self.say(f"  ({node}'s metrics not read: {exc})")
        lines = outcome_lines(texts)
        if lines:
            self.say("\n• imposition_jobs_total by outcome (Prometheus; docs/operations.md, \"Outcomes\", says when to worry):")
            for line in lines:
                self.say(f"  {line}")

    def capacity_report(self) -> None:
        """observability: the second-licence verdict over the configured window, and its chart."""
        from imposition.observability.capacity import build_report, write_png

        report = build_report()
        png = write_png(report, OUT_DIR / "capacity-report.png")
        self.say(f"\n• capacity report ({len(report.days)} working days; "
                 f"`imposition capacity-report` for the daily table; chart {shown_path(png)}):")
        hours = report.hours.label() if report.hours is not None else "as given"
        for line in (f"working hours: {hours}", *report.condition_lines(), report.verdict):
            self.say(f"  {line}")

    def keep_running(self) -> None:
        """Leave the stack up for the command line and Flower until Ctrl-C (``make run KEEP=1``)."""
        self.say(f"\n• the stack stays up: in another terminal `. {shown_path(self.run_dir / 'env')}` and use "
                 "`.venv/bin/imposition` (status, job show, tenant show, audit, submit …); Ctrl-C stops it")
        while True:
            self.check_supervision()
            time.sleep(2)

    def stop(self) -> None:
        """Stop every process, the local endpoint last, and delete this run's Redis keys and env file.

        Further Ctrl-C and SIGTERM are ignored meanwhile (the stop is bounded: at most 20 s a stage),
        so a second Ctrl-C cannot skip the clean-up. Workers and beat stop first, while the webhook
        receiver still answers their last deliveries; then Flower and the receiver.
        """
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        if self.supervisor is not None:
            self.supervisor.stop()  # before the processes stop: a stop is not a death
        try:
            if any(proc.proc.poll() is None for proc in self.processes):
                self.say("• stopping: workers finish the tasks they are running (warm shutdown, at most 20 s; "
                         "Ctrl-C is ignored until done) …")
            last = [p for p in (self.flower, self.receiver.process if self.receiver else None) if p is not None]
            stop_all([p for p in reversed(self.processes) if p not in last])
            stop_all(last)
        finally:
            try:
                self._forget_redis_keys()
            finally:
                if self.local_aws is not None:
                    self.local_aws.stop()
                (self.run_dir / "env").unlink(missing_ok=True)  # its endpoints are gone
        self.say("• stopped every process this run started")


def outcome_lines(metrics_texts: list[str]) -> list[str]:
    """``imposition_jobs_total`` summed by outcome over the given Prometheus text expositions, one line per
    outcome seen (``succeeded  49  jobs that ended …``), its meaning from
    :data:`imposition.observability.metrics.OUTCOME_MEANINGS`; an outcome without one is marked
    ``UNEXPLAINED`` (a label added without its documentation)."""
    from prometheus_client.parser import text_string_to_metric_families

    from imposition.observability.metrics import OUTCOME_MEANINGS

    counts: dict[str, float] = defaultdict(float)
    for text in metrics_texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "imposition_jobs_total":
                    counts[sample.labels.get("outcome", "")] += sample.value
    meanings = {str(outcome): meaning for outcome, meaning in OUTCOME_MEANINGS.items()}
    width = max((len(outcome) for outcome in counts), default=0)
    return [f"{outcome:{width}}  {count:>4.0f}  {meanings.get(outcome, 'UNEXPLAINED: not in docs/operations.md')}"
            for outcome, count in sorted(counts.items()) if count]




def _raise_keyboard_interrupt(signum, frame):
    STOP_REQUESTED.set()  # raised again by the next wait if Python swallows this one
    raise KeyboardInterrupt


def operator_environment(env: dict[str, str], events_url: str, run_dir: Path) -> dict[str, str]:
    """What ``.run/env`` sets for an operator's shell: the stack's ``env`` (endpoints, namespace), the
    events channel, and, as in production, no auto-registration: an unregistered (or mistyped)
    tenant is refused, even if the shell says otherwise (README, "Operating it")."""
    return {**env, "IMPOSITION_AUTO_REGISTER_TENANTS": "false", "IMPOSITION_EVENTS_URL": events_url,
            "IMPOSITION_BEAT_SCHEDULE_PATH": str(run_dir.resolve() / "beat-schedule-operator")}


def env_file_text(variables: dict[str, str]) -> str:
    """``.run/env``: an ``export`` line per variable, then the venv's commands first on ``PATH``."""
    return ("".join(f"export {k}={v}\n" for k, v in variables.items())
            + f'export PATH="{Path(sys.executable).parent}:$PATH"\n')


def shown_path(path: Path) -> Path:
    """``path`` relative to the checkout when it lies inside it (``.run/env``), else as given."""
    try:
        return path.resolve().relative_to(REPO)
    except ValueError:
        return path


def _stop_hint(keep: bool) -> str:
    """How to stop this run, as a second run's refusal says it."""
    how = f"Ctrl-C in its terminal, or `kill {os.getpid()}` (SIGTERM, the same clean stop)"
    return how if keep else how + ", or wait: it ends by itself after its workload"


@click.command()
@click.option("--timeout", "timeout_s", default=420.0, show_default=True, help="Seconds to wait for the jobs.")
@click.option("--keep", is_flag=True, help="Keep the stack running after the workload, until Ctrl-C.")
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=str(RUN_DIR),
              show_default=True, help="The run directory: logs, poll stamps, the env file (one run at a time).")
def main(timeout_s: float, keep: bool, run_dir: Path) -> None:
    """Run the demo workload on the embedded stack (see module docstring).

    Exit status 1 also when another run holds the run directory (it is named; nothing of it changed).
    """
    try:  # before anything: a second run must not touch the first run's files
        claim = RunDirectory(run_dir).claim(started_by=how_this_run_started(), stop_hint=_stop_hint(keep))
    except RunDirectoryTaken as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    # Ctrl-C and SIGTERM: the same clean stop (set explicitly: a shell may start us with SIGINT ignored).
    signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    relay_make_signals()  # a SIGINT sent to `make run` itself stops us too (GNU make does not pass it on)
    demo = Demo(keep=keep, run_dir=run_dir)
    status = 1
    try:
        status = demo.run(timeout_s)
        if keep:
            demo.keep_running()
    except KeyboardInterrupt:
        STOP_REQUESTED.clear()  # handled: the stop below must not be interrupted by it again
        click.echo("\n• interrupted")
    except SupervisionFailed as exc:
        click.echo(f"\n• the run failed: {exc}")
        status = 1
    finally:
        demo.stop()
        claim.release()
    sys.exit(status)


if __name__ == "__main__":
    main()
