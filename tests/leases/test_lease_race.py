"""The race for a tenant's last slots: 16 concurrent acquirers, cap 4, 200 rounds, plus releases.

Runs the real acquire/release transactions from 16 threads against the session's single-threaded
moto DynamoDB (which serialises requests as DynamoDB's transactions are isolated). Each round every
thread either releases the lease its job holds or tries to acquire one, all released together by a
barrier, so acquires race each other and the releases that free slots. Each thread logs its lease
events (:mod:`leases.eventlog`): the replay proves no instant saw 5 leases, independently of the
counter.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from leases import dynamo, transactions
from leases.errors import CapReached
from leases.eventlog import EventLog, cap_violations, max_concurrent, read_events
from leases.models import LeaseItem, TenantItem
from leases.transactions import Lease
from tests.leases.helpers import make_job

pytestmark = pytest.mark.file_duration_s(35)  # the long files run first (tests/conftest.py)

ROUNDS = 80  # 1,280 racing turns: enough for cap hits in most rounds (asserted below)
ACQUIRERS = 16
CAP = 4


def _lease_count(tenant_id: str) -> int:
    return sum(1 for _ in LeaseItem.scan(LeaseItem.tenant_id == tenant_id, consistent_read=True))


def test_sixteen_acquirers_never_hold_five_leases(tenant_id, tmp_path):
    jobs = [make_job(tenant_id) for _ in range(ACQUIRERS)]
    log = EventLog(tmp_path / "events")
    held: dict[str, Lease] = {}
    barrier = threading.Barrier(ACQUIRERS)
    dynamo.tx_connection().client  # noqa: B018 - create the botocore client before the threads share it

    def turn(job_id: str) -> object:
        lease = held.get(job_id)
        barrier.wait()
        if lease is not None:
            log.write("releasing", time.time(), tenant=tenant_id, job=job_id, token=lease.token)
            transactions.release_for_retry(lease, error="released by the race test", error_code="test")
            return None
        try:
            lease = transactions.acquire(job_id, tenant_id, f"racer-{job_id[:6]}")
        except CapReached as exc:
            return exc
        log.write("acquired", time.time(), tenant=tenant_id, job=job_id, token=lease.token)
        return lease

    cap_hits = 0
    with ThreadPoolExecutor(ACQUIRERS) as pool:
        for round_no in range(ROUNDS):
            results = dict(zip(jobs, pool.map(turn, jobs)))
            for job_id, result in results.items():
                if isinstance(result, Lease):
                    held[job_id] = result
                elif job_id in held:
                    del held[job_id]
            cap_hits += sum(isinstance(r, CapReached) for r in results.values())
            in_flight = int(TenantItem.get(tenant_id, consistent_read=True).in_flight)
            assert len(held) <= CAP, f"round {round_no}: {len(held)} leases held"
            assert in_flight == len(held) == _lease_count(tenant_id), f"round {round_no}"
    for lease in held.values():
        transactions.release_for_retry(lease, error="end of race", error_code="test")

    assert int(TenantItem.get(tenant_id, consistent_read=True).in_flight) == 0
    assert _lease_count(tenant_id) == 0
    events = read_events(tmp_path / "events")
    assert cap_violations(events, {}, CAP) == []
    assert max_concurrent(events)[tenant_id].leases == CAP  # the cap was reached: the race was real
    assert cap_hits > ROUNDS  # most rounds had more acquirers than free slots
