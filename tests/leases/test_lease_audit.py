"""``imposition audit``: it catches staged violations, and ``--repair`` fixes drift while leases move.

The invariant checkers must be able to fail: each test here stages a violation by hand-editing the
tables (what our transactions never do) and shows that the audit, and the lease-event log replay,
catch it.

The module runs with the slot counter in :data:`SHARDS` items (``cluster_slot_shards``), so the
audit, its repair and borrowing are shown on a sharded counter; the rest of the suite runs unsharded.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from click.testing import CliRunner

from leases import audit, conditions, nodes, transactions
from leases.errors import CapReached, LeaseContention
from leases.eventlog import EventLog, cap_violations, read_events
from leases.models import ClusterItem, JobItem, JobStatus, LeaseItem, TenantItem, slot_shard_of
from leases.tenants import set_cap
from leases.transactions import Lease
from imposition.cli.main import main
from imposition.common.settings import get_settings
from tests.leases.helpers import make_job

pytestmark = pytest.mark.file_duration_s(60)  # the long files run first (tests/conftest.py)

#: Items of the slot counter in this module.
SHARDS = 4


@pytest.fixture(scope="module", autouse=True)
def sharded_counter():
    """The slot counter in :data:`SHARDS` items for this module's tests (settings read afresh)."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("IMPOSITION_CLUSTER_SLOT_SHARDS", str(SHARDS))
        get_settings.cache_clear()
        try:
            yield
        finally:
            get_settings.cache_clear()
    get_settings.cache_clear()


def _jobs_on_shard(tenant_id: str, shard: int, n: int) -> list[str]:
    """``n`` queued jobs of ``tenant_id`` whose leases count on slot-counter shard ``shard``."""
    ids: list[str] = []
    while len(ids) < n:
        job_id = uuid.uuid4().hex
        if slot_shard_of(job_id, SHARDS) == shard:
            ids.append(make_job(tenant_id, job_id))
    return ids


def _stage_lease(tenant_id: str, job_id: str, token: str) -> Lease:
    """Hand-write a lease and its job's running state, and bump in_flight: a cap bypass."""
    now = time.time()
    LeaseItem(job_id, tenant_id=tenant_id, worker="intruder", token=token, acquired_at=now,
              heartbeat_at=now, expires_at=now + 600).save()
    JobItem(job_id).update(actions=[JobItem.status.set(JobStatus.RUNNING.value), JobItem.lease_token.set(token),
                                    JobItem.attempts.set(1), JobItem.queued_tenant.remove()])
    TenantItem(tenant_id).update(actions=[TenantItem.in_flight.add(1), TenantItem.queued.add(-1)])
    conditions.slots_item(job_id).update(actions=[ClusterItem.busy.add(1)])
    return Lease(job_id, tenant_id, "intruder", token, now, now + 600)


def test_a_staged_fifth_lease_is_caught_by_the_audit_and_the_event_log(tenant_id, tmp_path):
    log = EventLog(tmp_path / "events")
    jobs = [make_job(tenant_id) for _ in range(5)]
    leases = [transactions.acquire(job_id, tenant_id, "w") for job_id in jobs[:4]]
    intruder = _stage_lease(tenant_id, jobs[4], "f" * 32)
    for lease in [*leases, intruder]:
        log.write("acquired", time.time(), tenant=tenant_id, job=lease.job_id, token=lease.token)

    report = audit.audit([tenant_id])
    assert [(d.kind, d.job_id) for d in report.drifts] == [("over_cap", jobs[4])]
    result = CliRunner().invoke(main, ["audit", "--tenant", tenant_id])
    assert result.exit_code == 1 and "over_cap" in result.output
    [peak] = cap_violations(read_events(tmp_path / "events"), {}, 4)
    assert (peak.tenant_id, peak.leases) == (tenant_id, 5)

    repaired = audit.repair([tenant_id], publish=lambda *_, **__: None)  # over cap: nothing may be killed
    assert [d.kind for d in repaired.drifts] == ["over_cap"] and repaired.repairs == []
    for lease in [*leases, intruder]:
        transactions.fail_job(lease, error="done", error_code="test")
    assert CliRunner().invoke(main, ["audit", "--tenant", tenant_id]).exit_code == 0


@pytest.mark.parametrize("gap_s, hold_s", [(0.05, 0.1), (0.001, 0.01)], ids=["paced", "tight"])
def test_repair_fixes_counter_orphan_and_stranded_job_while_leases_move(tenant_id, gap_s, hold_s):
    """Paced, some reads see no lease move and judge the counter; tight, every read may see one,
    and the repair recounts the tenant with its acquires frozen."""
    from leases.tenants import set_cap

    set_cap(tenant_id, 20)
    finished, stranded = make_job(tenant_id), make_job(tenant_id)
    # Counter drift: three slots counted that no lease holds.
    TenantItem(tenant_id).update(actions=[TenantItem.in_flight.add(3)])
    # Orphan: a lease (and its slot) whose job is not running under it.
    now = time.time()
    LeaseItem(finished, tenant_id=tenant_id, worker="ghost", token="a" * 32, acquired_at=now, heartbeat_at=now,
              expires_at=now + 600).save()
    TenantItem(tenant_id).update(actions=[TenantItem.in_flight.add(1), TenantItem.occupied.add(1)])
    conditions.slots_item(finished).update(actions=[ClusterItem.busy.add(1)])
    # Stranded: a running job whose lease is gone.
    JobItem(stranded).update(actions=[JobItem.status.set(JobStatus.RUNNING.value), JobItem.queued_tenant.remove(),
                                      JobItem.lease_token.set("b" * 32), JobItem.attempts.set(1)])
    TenantItem(tenant_id).update(actions=[TenantItem.queued.add(-1), TenantItem.occupied.add(-1)])

    kinds = sorted(d.kind for d in audit.audit([tenant_id]).drifts)
    assert kinds == ["counter", "orphan_lease", "stranded_job"]

    busy = [make_job(tenant_id) for _ in range(4)]
    stop = threading.Event()
    errors: list[BaseException] = []
    cycles: list[tuple[float, float]] = []  # (acquired, released) of each completed lease, monotonic s
    first_cycle = threading.Event()

    def churn(job_id: str) -> None:  # a busy worker's pace: acquire, run a moment, release, again
        while not stop.wait(gap_s):
            try:
                lease = transactions.acquire(job_id, tenant_id, "churn")
                acquired = time.monotonic()
                time.sleep(hold_s)
                transactions.release_for_retry(lease, error="churn", error_code="test")
                cycles.append((acquired, time.monotonic()))
                first_cycle.set()
            except (CapReached, LeaseContention):
                continue
            except BaseException as exc:  # noqa: BLE001 - a thread's error is collected and asserted on
                errors.append(exc)
                return

    threads = [threading.Thread(target=churn, args=(job_id,)) for job_id in busy]
    for t in threads:
        t.start()
    published: list[str] = []
    try:
        assert first_cycle.wait(30), "the churn never completed a lease"
        repair_start = time.monotonic()
        report = audit.repair([tenant_id], publish=lambda t, j, **_: published.append(j))
        repair_end = time.monotonic()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    # the leases did move while the repair ran: some lease was held or released during it
    assert any(acquired < repair_end and released > repair_start for acquired, released in cycles), \
        (repair_start, repair_end, cycles[-8:])
    assert report.clean, report.describe()
    assert len(report.repairs) == 3, report.repairs
    assert published == [stranded]
    assert JobItem.get(stranded, consistent_read=True).status == "queued"
    assert int(TenantItem.get(tenant_id, consistent_read=True).in_flight) == 0
    result = CliRunner().invoke(main, ["audit", "--tenant", tenant_id, "--json"])
    # The command also looks at the queue: these jobs were re-queued with no message in SQS (the
    # churn and the repair published none), so once overdue they are lost jobs, and nothing else.
    drifts = [d for t in json.loads(result.output)["tenants"] for d in t["drifts"]]
    assert {d["kind"] for d in drifts} <= {"lost_job"}, result.output
    assert {d["job_id"] for d in drifts} <= {finished, stranded, *busy}, result.output


def test_leases_spread_over_the_shards_and_their_busy_adds_up_to_the_live_leases(tenant_id):
    set_cap(tenant_id, 32)
    leases = [transactions.acquire(make_job(tenant_id), tenant_id, "w") for _ in range(32)]
    shards = nodes.slot_shards()
    assert len(shards) == SHARDS  # 32 random job ids: every shard met (a miss: 4 × (3/4)^32, 1 in 2,500)
    busy = {item.key: int(item.busy or 0) for item in shards}
    assert sum(busy.values()) == int(nodes.slots().busy) == 32
    assert max(busy.values()) < 32
    report = audit.audit()
    assert report.cluster == (32, 32) and report.clean, report.describe()
    for lease in leases[:5]:
        transactions.fail_job(lease, error="done", error_code="test")
    assert int(nodes.slots().busy) == 27 == sum(1 for _ in LeaseItem.scan(consistent_read=True))
    assert min(int(item.busy or 0) for item in nodes.slot_shards()) >= 0


def test_a_shard_counting_the_wrong_leases_is_drift_even_when_the_sum_is_right_and_repair_fixes_it(tenant_id):
    [job] = _jobs_on_shard(tenant_id, 1, 1)
    lease = transactions.acquire(job, tenant_id, "w")
    # The lease moved to shard 2 by hand: the sum still equals the leases.
    conditions.slots_item(job).update(actions=[ClusterItem.busy.add(-1)])
    ClusterItem(conditions.slots_item(_jobs_on_shard(tenant_id, 2, 1)[0]).key).update(
        actions=[ClusterItem.busy.add(1)])
    report = audit.audit()
    assert report.cluster == (1, 1) and report.shard_drifts == {1: (0, 1), 2: (1, 0)}
    assert not report.clean and "shard 1: busy=0 leases=1" in report.describe()
    repaired = audit.repair(publish=lambda *_, **__: None)
    assert repaired.clean, repaired.describe()
    assert any("shard 1: busy 0 → 1" in note for note in repaired.repairs), repaired.repairs
    transactions.fail_job(lease, error="done", error_code="test")


def test_borrowing_is_conditioned_on_the_share_of_the_jobs_shard(tenant_id):
    """Seven slots above the reserve over four shards: shares 2, 2, 2, 1. The shard with one lends
    one slot; its second borrow is refused while other shards still lend."""
    nodes.register(f"node-{uuid.uuid4().hex[:6]}", 7 + get_settings().reserve_slots)
    assert [int(item.borrowable) for item in sorted(nodes.slot_shards(), key=lambda i: i.key)] == [2, 2, 2, 1]
    assert int(nodes.slots().borrowable) == 7
    set_cap(tenant_id, 1, burst_cap=5)
    held = [transactions.acquire(_jobs_on_shard(tenant_id, 0, 1)[0], tenant_id, "w")]  # its cap: shard 0 busy 1
    on_three = _jobs_on_shard(tenant_id, 3, 2)
    held.append(transactions.acquire(on_three[0], tenant_id, "w", borrow=True))
    with pytest.raises(CapReached):
        transactions.acquire(on_three[1], tenant_id, "w", borrow=True)
    [on_zero] = _jobs_on_shard(tenant_id, 0, 1)
    held.append(transactions.acquire(on_zero, tenant_id, "w", borrow=True))  # shard 0: busy 1 < 2
    for lease in held:
        transactions.fail_job(lease, error="done", error_code="test")
    assert nodes.deregister(next(iter(nodes.live_nodes())))
    assert int(nodes.slots().total) == 0


def test_a_busy_tenant_shows_no_drift_even_in_one_snapshot(tenant_id, monkeypatch):
    """Leases, jobs and counters are read one after the other, and a busy tenant acquires and
    releases between the reads. A suspect lease or job is read again on the other side, and
    ``lease_moves`` tells when an acquire and a release cancel out in ``in_flight`` or a shard's
    ``busy``: counters are judged only from reads no lease moved through (reported unsettled
    meanwhile). So a single snapshot already tells traffic from drift."""
    set_cap(tenant_id, 20)
    monkeypatch.setenv("IMPOSITION_AUDIT_CONFIRM_SNAPSHOTS", "1")
    get_settings.cache_clear()
    stop = threading.Event()
    errors: list[BaseException] = []
    cycles = [0]

    def churn(job_id: str) -> None:  # acquire and release back to back, as fast as the endpoint goes
        while not stop.is_set():
            try:
                lease = transactions.acquire(job_id, tenant_id, "churn")
                transactions.release_for_retry(lease, error="churn", error_code="test")
                cycles[0] += 1
            except (CapReached, LeaseContention):
                continue
            except BaseException as exc:  # noqa: BLE001 - a thread's error is collected and asserted on
                errors.append(exc)
                return

    threads = [threading.Thread(target=churn, args=(make_job(tenant_id),)) for _ in range(8)]
    for t in threads:
        t.start()
    seen: list[str] = []
    try:
        for scope in ([tenant_id], None, [tenant_id], None):  # the tenant, then the whole cluster too
            report = audit.audit(scope)
            seen += [f"{d.kind}: {d.detail}" for d in report.drifts] + [f"shard {k}" for k in report.shard_drifts]
    finally:
        stop.set()
        for t in threads:
            t.join()
        monkeypatch.delenv("IMPOSITION_AUDIT_CONFIRM_SNAPSHOTS")
        get_settings.cache_clear()
    assert not errors, errors
    assert cycles[0] >= 3, cycles  # the leases did move while the audits ran
    assert seen == [], seen
    quiet = audit.audit([tenant_id])  # nothing moves now: judged, and clean
    assert quiet.clean and [t.settled for t in quiet.tenants] == [True], quiet.describe()
