"""A small real cluster for fault tests: imposer nodes, a maintenance worker and beat, all running
the fault-injection app (:mod:`tests.support.fault_app`), plus helpers to submit and inspect jobs."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from leases.audit import audit
from leases.eventlog import cap_violations, read_events
from leases.models import JobItem, LeaseItem, TenantItem
from imposition.common import aws
from imposition.common.settings import get_settings
from devstack.stack import stop_all
from imposition.common.tenancy import input_key, job_prefix
from tasks import storage
from tasks.submission import submit_job
from tests.support.processes import CeleryProcess, start_beat, start_worker, wait_for

FAULT_APP = "tests.support.fault_app"
CASES = Path(__file__).resolve().parents[1] / "data" / "cases"
SADDLE_A4 = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


class Cluster:
    """``nodes`` imposer nodes (``-c concurrency`` each, node names imposer1…), a maintenance worker
    and beat (and, with ``notifications``, a notifications worker), sharing ``fault_dir`` (markers)
    and ``event_dir`` (the lease-event log).

    Args:
        tmp: a directory of its own (logs, markers, events).
        env: extra environment of every process (e.g. shorter clocks).
        notifications: also start a notifications worker (``-c 1``, node name notifier).
        node_env: extra environment of the imposer nodes only (e.g. a shifted clock).
        maintenance_env: extra environment of the maintenance worker only (e.g. its metrics port).
    """

    def __init__(self, tmp: Path, *, nodes: int = 2, concurrency: int = 4, env: dict[str, str] | None = None,
                 notifications: bool = False, node_env: dict[str, str] | None = None,
                 maintenance_env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.fault_dir = tmp / "faults"
        self.event_dir = tmp / "events"
        self.fault_dir.mkdir(parents=True, exist_ok=True)
        self.env = {"FAULT_DIR": str(self.fault_dir), "LEASE_EVENT_LOG_DIR": str(self.event_dir), **(env or {})}
        self.nodes: dict[str, CeleryProcess] = {}
        #: Tenant → the highest cap it had, for tenants whose cap a test lowered.
        self.highest_caps: dict[str, int] = {}
        self.others: list[CeleryProcess] = []
        self._concurrency = concurrency
        self._node_env = node_env or {}
        try:
            # Started together, then waited for: N start-ups take about as long as the slowest.
            for n in range(1, nodes + 1):
                self.start_node(f"imposer{n}", wait=False)
            self.others.append(start_worker(tmp, queue=get_settings().maintenance_queue, concurrency=1,
                                            name="maintenance", env={**self.env, **(maintenance_env or {})},
                                            app=FAULT_APP, wait=False))
            self.others.append(start_beat(tmp, env=self.env, wait=False))
            if notifications:
                self.others.append(start_worker(tmp, queue=get_settings().notifications_queue, concurrency=1,
                                                name="notifier", env=self.env, app=FAULT_APP, wait=False))
            for process in self.processes():
                process.await_ready()
        except BaseException:
            self.stop()
            raise

    def start_node(self, name: str, *, wait: bool = True) -> CeleryProcess:
        """Start (or restart) imposer node ``name``; ready when this returns, unless ``wait=False``."""
        self.nodes[name] = start_worker(self.tmp, concurrency=self._concurrency, name=name,
                                        env={**self.env, **self._node_env}, app=FAULT_APP, wait=wait)
        return self.nodes[name]

    def stop(self) -> None:
        """Stop every process (a stopped one is continued first)."""
        stop_all(self.processes())

    def processes(self) -> list[CeleryProcess]:
        """Every process of the cluster: imposer nodes first, then the others in start order."""
        return [*self.nodes.values(), *self.others]

    def republished(self, job_ids: list[str]) -> int:
        """How many copies the sweeper re-published of ``job_ids`` so far (its log lines). A message a
        node received but has not started within ``Clocks.lost_message_after_s`` (2 s under the tests'
        clocks: a loaded machine's pool child still warming up) looks lost and is copied; the copy is
        dropped as a duplicate later, but it is a message in the queue meanwhile."""
        maintenance = self.others[0].log()
        return sum(maintenance.count(f"re-published job {job_id} ") for job_id in job_ids)

    @contextmanager
    def sweeper_stopped(self, settle_s: float = 0.5) -> Iterator[None]:
        """The maintenance worker and its pool child SIGSTOPped (its process group) for the block,
        then continued: no sweep starts meanwhile, so a test can tell what its own action did from
        what the sweeper's safety net would have done a moment later. The block starts ``settle_s``
        seconds after the stop, so a request the sweeper had already sent lands first. Beat goes on
        queueing sweeps; the worker runs them once continued."""
        maintenance = self.others[0]
        os.killpg(maintenance.pid, signal.SIGSTOP)
        try:
            time.sleep(settle_s)
            yield
        finally:
            os.killpg(maintenance.pid, signal.SIGCONT)

    def exited(self) -> dict[str, int]:
        """Log file name → exit status of every process that is no longer running."""
        return {p.log_path.name: p.proc.returncode for p in self.processes() if p.proc.poll() is not None}

    # -- jobs ------------------------------------------------------------------------------------

    def mark(self, name: str, content: str = "") -> Path:
        """Write fault marker ``name`` (see :mod:`tests.support.fault_app`)."""
        path = self.fault_dir / name
        path.write_text(content)
        return path

    def submit(self, tenant_id: str, *, sample: str = "a5_8p.pdf", layout: dict | None = None,
               faults: dict[str, str] | None = None, max_attempts: int | None = None) -> str:
        """Upload ``sample``, write the job's fault markers, submit; returns the job id."""
        return self.submit_staged(self.stage(tenant_id, sample=sample, faults=faults),
                                  layout=layout, max_attempts=max_attempts)

    def stage(self, tenant_id: str, *, sample: str = "a5_8p.pdf",
              faults: dict[str, str] | None = None) -> tuple[str, str, str]:
        """The part of :meth:`submit` before the submission: a new job id, its fault markers and its
        uploaded input; returns ``(tenant_id, job_id, input_key)`` for :meth:`submit_staged`. A test
        that times its submissions against the cluster's progress stages first (an upload costs
        more than a submission on a loaded machine)."""
        job_id = uuid.uuid4().hex
        for fault, content in (faults or {}).items():
            self.mark(f"{job_id}.{fault}", content)
        key = input_key(tenant_id, job_id)
        storage.upload(CASES / sample, key)
        return tenant_id, job_id, key

    @staticmethod
    def submit_staged(staged: tuple[str, str, str], *, layout: dict | None = None,
                      max_attempts: int | None = None) -> str:
        """Submit a job :meth:`stage` prepared; returns its job id."""
        tenant_id, job_id, key = staged
        return submit_job(tenant_id=tenant_id, token=f"tok-{job_id}", input_key=key, layout=layout or SADDLE_A4,
                          max_attempts=max_attempts, job_id=job_id)

    @staticmethod
    def final(job_id: str, timeout_s: float = 90) -> JobItem:
        """Wait until the job is ``succeeded`` or ``failed``; return it."""
        def done():
            job = JobItem.get(job_id, consistent_read=True)
            return job if job.status in ("succeeded", "failed") else None
        return wait_for(done, timeout_s, interval_s=0.25, what=f"job {job_id} to finish")

    def events(self) -> list[dict]:
        """The lease-event log of every process so far."""
        return read_events(self.event_dir)

    def events_of_tenant(self, tenant_id: str, kind: str) -> list[dict]:
        """The tenant's lease events of one kind, oldest first."""
        return [e for e in self.events() if e.get("tenant") == tenant_id and e["event"] == kind]

    def events_of(self, job_id: str, kind: str | None = None) -> list[dict]:
        """The job's lease events (of one kind, if given)."""
        return [e for e in self.events() if e.get("job") == job_id and (kind is None or e["event"] == kind)]

    @staticmethod
    def job_objects(tenant_id: str, job_id: str) -> list[str]:
        """Keys of every S3 object under the job's prefix."""
        listing = aws.s3().list_objects_v2(Bucket=get_settings().bucket, Prefix=job_prefix(tenant_id, job_id))
        return sorted(o["Key"] for o in listing.get("Contents", []))

    @staticmethod
    def no_leases_left() -> bool:
        """True once no lease item exists."""
        return not list(LeaseItem.scan(consistent_read=True))

    def settle(self, timeout_s: float = 30) -> None:
        """End a test on the cluster: lift every hold marker the test left (a test that failed
        before its own release would otherwise keep its slots held, and every later test of the
        module would fail behind it), wait until no lease is left, then :meth:`check_invariants`."""
        for pattern in ("*.hold", "*.hold-before-release"):
            for marker in self.fault_dir.glob(pattern):
                marker.unlink(missing_ok=True)
        wait_for(self.no_leases_left, timeout_s, what="every lease to be released")
        self.check_invariants()

    def check_invariants(self) -> None:
        """Audit clean; no tenant above its cap in the lease-event log.

        Caps come from the tenants table, or from :attr:`highest_caps` for a tenant whose cap a
        test lowered (its earlier leases were held under the higher cap).
        """
        report = audit()
        assert report.clean, "audit found drift:\n" + report.describe()
        caps = {t.tenant_id: int(t.cap) for t in TenantItem.scan() if t.cap is not None}
        caps.update(self.highest_caps)
        violations = cap_violations(self.events(), caps, get_settings().default_cap)
        assert violations == [], f"lease-event log: more leases than the cap at once: {violations}"
