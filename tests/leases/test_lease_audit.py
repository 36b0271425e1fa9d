"""``imposition audit``: it catches staged violations, and ``--repair`` fixes drift while leases move.

The invariant checkers must be able to fail: each test here stages a violation by hand-editing the
tables (what our transactions never do) and shows that the audit, and the lease-event log replay,
catch it.
"""

from __future__ import annotations

import json
import threading
import time

from click.testing import CliRunner

from leases import audit, transactions, conditions
from leases.errors import CapReached, LeaseContention
from leases.eventlog import EventLog, cap_violations, read_events
from leases.models import ClusterItem, JobItem, JobStatus, LeaseItem, TenantItem
from leases.transactions import Lease
from imposition.cli.main import main
from tests.leases.helpers import make_job


def _stage_lease(tenant_id: str, job_id: str, token: str) -> Lease:
    """Hand-write a lease and its job's running state, and bump in_flight: a cap bypass."""
    now = time.time()
    LeaseItem(job_id, tenant_id=tenant_id, worker="intruder", token=token, acquired_at=now,
              heartbeat_at=now, expires_at=now + 600).save()
    JobItem(job_id).update(actions=[JobItem.status.set(JobStatus.RUNNING.value), JobItem.lease_token.set(token),
                                    JobItem.attempts.set(1), JobItem.queued_tenant.remove()])
    TenantItem(tenant_id).update(actions=[TenantItem.in_flight.add(1), TenantItem.queued.add(-1)])
    conditions.slots_item().update(actions=[ClusterItem.busy.add(1)])
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


def test_repair_fixes_counter_orphan_and_stranded_job_while_leases_move(tenant_id):
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
    conditions.slots_item().update(actions=[ClusterItem.busy.add(1)])
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
        while not stop.wait(0.05):
            try:
                lease = transactions.acquire(job_id, tenant_id, "churn")
                acquired = time.monotonic()
                time.sleep(0.1)
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
