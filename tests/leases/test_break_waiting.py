"""Attacks on the waiting / hand-off layer: real moto DynamoDB, no workers.

Three of them found defects that are fixed now (a paused tier could borrow; the audit called a
borrowed lease over the cap; the sweeper re-published queued jobs that only waited for a busy
worker); the rest held.

Simulated workers are threads that follow ``FairTask``'s protocol (acquire; cap hit → park, or
acquire again; release; wake), sharing an in-memory "queue" instead of SQS, so the races are
between real DynamoDB transactions.
"""

from __future__ import annotations

import queue
import random
import threading
import time
import uuid

import pytest
from click.testing import CliRunner

from leases import nodes, sweeper, transactions, waiting
from leases.audit import audit
from leases.errors import CapReached, JobNotQueued, LeaseContention
from leases.models import JobItem, JobStatus, TenantItem
from leases.tenants import set_cap
from imposition.cli.main import main as cli
from tasks.base import is_duplicate
from tests.leases.helpers import LAYOUT

pytestmark = pytest.mark.file_duration_s(38)  # the long files run first (tests/conftest.py)


def _tenant(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _new_job(tenant_id: str) -> JobItem:
    job_id = uuid.uuid4().hex
    return JobItem(job_id, tenant_id=tenant_id, token=f"tok-{job_id}", max_attempts=3, layout=LAYOUT,
                   input_key=f"tenants/{tenant_id}/jobs/{job_id}/input.pdf", submitted_at=time.time())


class SimCluster:
    """Threads that run the FairTask protocol against real DynamoDB with a shared in-memory queue."""

    def __init__(self, tenant_id: str, *, workers: int, skip_wake_share: float = 0.0,
                 sweepers: int = 0, cap_of=lambda: None) -> None:
        self.tenant_id = tenant_id
        self.q: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.over: list[tuple[int, int]] = []
        self.errors: list[BaseException] = []
        self.skip_wake_share = skip_wake_share
        self.cap_of = cap_of
        self.threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(workers)]
        self.threads += [threading.Thread(target=self._sweeper, daemon=True) for _ in range(sweepers)]

    def publish(self, tenant_id, job_id, *, after_attempt=0, delay_s=0):
        self.q.put((job_id, after_attempt))

    def start(self):
        for t in self.threads:
            t.start()

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _run_one(self, job_id: str, after_attempt: int) -> None:
        tid = self.tenant_id
        try:
            lease = transactions.acquire(job_id, tid, "w")
        except JobNotQueued as exc:
            if not is_duplicate(exc, after_attempt):
                time.sleep(0.05)
                self.q.put((job_id, after_attempt))
            return
        except CapReached:
            lease = None
            for _ in range(5):
                try:
                    if waiting.park(job_id, tid):
                        return
                    lease = transactions.acquire(job_id, tid, "w")
                    break
                except CapReached:
                    continue
                except JobNotQueued:
                    return
            if lease is None:
                self.q.put((job_id, after_attempt))  # a deferral
                return
        except LeaseContention:
            self.q.put((job_id, after_attempt))
            return
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            cap = self.cap_of()
            if cap is not None and self.running > cap:
                self.over.append((self.running, cap))
        time.sleep(random.uniform(0.0, 0.05))
        with self.lock:
            self.running -= 1
        r = random.random()
        job = transactions.read_job(job_id)
        if r < 0.2 and int(job.attempts) < int(job.max_attempts):
            self.publish(tid, job_id, after_attempt=int(job.attempts))  # the retry copy, before the release
            transactions.release_for_retry(lease, error="x", error_code="injected")
        elif r < 0.3:
            transactions.fail_job(lease, error="x", error_code="injected")
        else:
            transactions.commit_success(lease, output_key="k", sheets=1, sides=2)
        if random.random() >= self.skip_wake_share:  # else: a releaser "killed" before its hand-off
            waiting.wake(tid, publish=self.publish)

    def _worker(self):
        while not self.stop.is_set():
            try:
                job_id, after = self.q.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._run_one(job_id, after)
            except BaseException as exc:  # noqa: BLE001 - a thread's error is collected and asserted on
                self.errors.append(exc)

    def _sweeper(self):
        while not self.stop.is_set():
            try:
                sweeper.bring_back(time.time(), publish=self.publish, report=sweeper.SweepReport())
            except BaseException as exc:  # noqa: BLE001 - a thread's error is collected and asserted on
                self.errors.append(exc)
            time.sleep(random.uniform(0.05, 0.3))


def _submit(sim: SimCluster, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        job = _new_job(sim.tenant_id)
        if waiting.admit(job):
            sim.publish(sim.tenant_id, job.job_id)
        else:
            waiting.wake(sim.tenant_id, publish=sim.publish, reason="door")
        ids.append(job.job_id)
    return ids


def _wait_final(ids: list[str], timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        statuses = {j.job_id: j.status for j in JobItem.batch_get(ids, consistent_read=True)}
        if all(JobStatus(s).is_final for s in statuses.values()) or time.monotonic() > deadline:
            return statuses
        time.sleep(0.5)


def _assert_clean(tenant_id: str, statuses: dict[str, str]) -> None:
    stuck = {j: s for j, s in statuses.items() if not JobStatus(s).is_final}
    item = TenantItem.get(tenant_id, consistent_read=True)
    counters = {k: int(getattr(item, k) or 0) for k in ("in_flight", "queued", "waiting", "occupied")}
    report = audit([tenant_id])
    assert not stuck and report.clean and set(counters.values()) == {0}, (stuck, counters, report.describe())


def test_many_releasers_and_wakers_keep_the_cap_and_counters(fresh_aws):
    tenant = _tenant("storm")
    set_cap(tenant, 2)
    sim = SimCluster(tenant, workers=6, cap_of=lambda: 2)
    sim.start()
    ids = _submit(sim, 30)
    statuses = _wait_final(ids, 150)
    sim.join()
    assert not sim.errors, sim.errors[:3]
    assert not sim.over, sim.over[:5]
    _assert_clean(tenant, statuses)


def test_releasers_that_skip_the_wake_are_covered_by_two_concurrent_sweepers(fresh_aws):
    tenant = _tenant("sweep2")
    set_cap(tenant, 2)
    sim = SimCluster(tenant, workers=4, skip_wake_share=0.5, sweepers=2, cap_of=lambda: 2)
    sim.start()
    ids = _submit(sim, 20)
    statuses = _wait_final(ids, 150)
    sim.join()
    assert not sim.errors, sim.errors[:3]
    assert not sim.over, sim.over[:5]
    _assert_clean(tenant, statuses)


def test_cap_lowered_raised_and_zero_while_jobs_wait(fresh_aws):
    tenant = _tenant("flap")
    set_cap(tenant, 2)
    sim = SimCluster(tenant, workers=4, sweepers=1)
    sim.start()
    ids = _submit(sim, 20)
    for cap in (0, 3, 1, 0, 0, 4, 2, 0, 3):
        set_cap(tenant, cap)
        waiting.wake(tenant, publish=sim.publish, reason="cap_change")  # what the CLI does
        time.sleep(0.7)
    set_cap(tenant, 2)
    waiting.wake(tenant, publish=sim.publish, reason="cap_change")
    statuses = _wait_final(ids, 150)
    sim.join()
    assert not sim.errors, sim.errors[:3]
    _assert_clean(tenant, statuses)


def test_a_paused_tenant_does_not_run(fresh_aws):
    """README: 'A cap of 0 pauses a tenant: its jobs are parked until it is raised.' A paused tier
    cannot be given a burst cap, and nothing of it is woken."""
    nodes.register(f"node-{uuid.uuid4().hex[:6]}", 8)
    tenant = _tenant("paused")
    result = CliRunner().invoke(cli, ["tenant", "set-cap", tenant, "0", "--burst", "3"])
    assert result.exit_code == 2 and "paused tenant (cap 0) cannot borrow" in result.output, result.output
    assert CliRunner().invoke(cli, ["tenant", "set-cap", tenant, "0"]).exit_code == 0
    job = _new_job(tenant)
    assert waiting.admit(job) is False  # parked at the door
    assert waiting.wake(tenant, publish=lambda *a, **k: None, reason="sweeper") == []
    assert JobItem.get(job.job_id, consistent_read=True).status == "waiting"


@pytest.mark.parametrize("args", [
    ["4", "--burst", "2"],       # M < N
    ["4", "--burst", "-1"],      # negative
    ["4", "--burst", "99999"],   # above max_cap
    ["4", "--burst", "abc"],     # not an integer
    ["4", "--burst", "4.5"],
    ["-1"],
    ["1001"],
    ["--default", "--burst", "2"],  # below the default cap 4
])
def test_set_cap_refuses_bad_values_with_exit_2(fresh_aws, args):
    tenant = _tenant("bad")
    result = CliRunner().invoke(cli, ["tenant", "set-cap", tenant, *args])
    assert result.exit_code == 2, (args, result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output


def test_a_queued_job_waiting_for_a_busy_worker_is_not_re_published_a_lost_one_is(fresh_aws):
    """While its message is visible in SQS (every worker busy), an overdue queued job is not
    re-published at each sweep; once the queue has no visible message, it is, once a sweep."""
    from imposition.common import aws
    from imposition.common.clocks import get_clocks
    from imposition.common.settings import get_settings
    from tasks.messages import publish_job
    from tasks.sweeper import visible_messages

    tenant = _tenant("busy")
    job = _new_job(tenant)
    assert waiting.admit(job) is True
    publish_job(tenant, job.job_id)  # the real message is there, just not received yet
    grace = get_clocks().lost_message_after_s
    published = []

    def sweep_at(k: int) -> None:
        sweeper.bring_back(time.time() + k * (grace + 1), report=sweeper.SweepReport(), backlog=visible_messages,
                           publish=lambda t, j, **kw: (published.append(j), publish_job(t, j, **kw)))

    for k in range(1, 4):
        sweep_at(k)
    assert published == []
    url = aws.queue_url(get_settings().imposition_queue)
    [msg] = aws.sqs().receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    aws.sqs().delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])  # the message is lost
    sweep_at(4)
    assert published == [job.job_id]


def test_audit_accepts_legitimate_borrowed_leases(fresh_aws):
    """A borrowing tier (cap 1, burst 3) holding 2 leases, the second borrowed, is not drift."""
    nodes.register(f"node-{uuid.uuid4().hex[:6]}", 8)
    tenant = _tenant("borrow")
    set_cap(tenant, 1, burst_cap=3)
    a, b = _new_job(tenant), _new_job(tenant)
    for job in (a, b):
        waiting.admit(job, door=False)
    transactions.acquire(a.job_id, tenant, "w")
    with pytest.raises(CapReached) as refused:
        transactions.acquire(b.job_id, tenant, "w")
    assert refused.value.may_borrow
    transactions.acquire(b.job_id, tenant, "w", borrow=True)
    report = audit([tenant])
    assert report.clean, report.describe()


def test_harsher_storm_ten_workers_two_sweepers_lost_wakes(fresh_aws):
    tenant = _tenant("harsh")
    set_cap(tenant, 3)
    sim = SimCluster(tenant, workers=10, skip_wake_share=0.3, sweepers=2, cap_of=lambda: 3)
    sim.start()
    ids = _submit(sim, 60)
    statuses = _wait_final(ids, 200)
    sim.join()
    assert not sim.errors, sim.errors[:3]
    assert not sim.over, sim.over[:5]
    _assert_clean(tenant, statuses)
