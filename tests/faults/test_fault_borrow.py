"""Borrowing (docs/design.md §3) on real workers: a tier with a burst cap above its cap takes idle slots,
never the cluster's reserve; a light tenant then starts at once; the slot registry follows the
live nodes.

Its own cluster: one node of 4 slots, ``reserve_slots`` 1 (the default), so a borrowing tenant may
hold at most 3 leases while nobody else runs.
"""

from __future__ import annotations

import time
import uuid

import pytest
from click.testing import CliRunner

from leases import nodes
from leases.eventlog import max_concurrent
from leases.models import JobItem, TenantItem
from imposition.cli.main import main as cli
from imposition.common.settings import get_settings
from tests.conftest import reset_aws
from tests.support.cluster import Cluster
from tests.support.processes import wait_for

SLOTS = 4


def new_tenant(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reset_aws()
    c = Cluster(tmp_path_factory.mktemp("borrow"), nodes=1, concurrency=SLOTS)
    wait_for(lambda: sum(nodes.live_nodes().values()) == SLOTS, 30, what="the node to register its slots")
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def invariants(cluster):
    yield
    cluster.settle()


def _running(tenant: str) -> int:
    return int(TenantItem.get(tenant, consistent_read=True).in_flight or 0)


def test_the_node_registers_its_slots_and_the_counter_follows_leases(cluster):
    slots = nodes.slots()
    assert (int(slots.total), int(slots.borrowable)) == (SLOTS, SLOTS - get_settings().reserve_slots)
    assert nodes.live_nodes() == {next(iter(nodes.live_nodes())): SLOTS}


def test_a_borrowing_tier_takes_idle_slots_but_not_the_reserve_and_a_light_tenant_starts_at_once(cluster):
    heavy, light = new_tenant("heavy"), new_tenant("light")
    result = CliRunner().invoke(cli, ["tenant", "set-cap", heavy, "1", "--burst", str(SLOTS)])
    assert result.exit_code == 0, result.output
    cluster.highest_caps[heavy] = SLOTS - 1  # the lease-event log holds it to what borrowing allows
    jobs = [cluster.submit(heavy, faults={"hold": ""}) for _ in range(6)]
    borrowable = SLOTS - get_settings().reserve_slots
    wait_for(lambda: _running(heavy) == borrowable, 30, what=f"{borrowable} leases by borrowing")
    time.sleep(2 * get_settings().sweep_interval_s)  # sweeps and hand-offs come and go: still not the reserve
    assert _running(heavy) == borrowable
    assert sum(1 for j in jobs if JobItem.get(j, consistent_read=True).status == "waiting") == 6 - borrowable

    quick = cluster.submit(light)  # the reserve slot: starts while heavy holds everything else
    assert cluster.final(quick, timeout_s=30).status == "succeeded"
    assert _running(heavy) == borrowable
    for job_id in jobs:
        (cluster.fault_dir / f"{job_id}.hold").unlink()
    assert all(cluster.final(j).status == "succeeded" for j in jobs)
    peaks = max_concurrent(cluster.events())
    assert peaks[heavy].leases == borrowable
    assert peaks[light].leases == 1


def test_a_borrowing_tier_alone_keeps_its_borrowed_places_and_a_light_tenant_gets_the_reserve(cluster):
    """Cap 1, burst 4 (3 borrowable slots), alone: its commits hand their places on up to the burst
    cap (a handed job then takes a borrowing acquire), so it keeps 3 leases, never more. A light
    tenant whose job is queued gets the reserve slot at once."""
    heavy, light = new_tenant("lendheavy"), new_tenant("lendlight")
    result = CliRunner().invoke(cli, ["tenant", "set-cap", heavy, "1", "--burst", str(SLOTS)])
    assert result.exit_code == 0, result.output
    borrowable = SLOTS - get_settings().reserve_slots
    cluster.highest_caps[heavy] = borrowable
    cluster.mark(f"tenant-{heavy}.sleep", "0.5")
    jobs = [cluster.submit(heavy) for _ in range(24)]
    wait_for(lambda: _running(heavy) == borrowable, 30, what=f"{borrowable} leases by borrowing")
    quick = cluster.submit(light)
    assert cluster.final(quick, timeout_s=30).status == "succeeded"
    finished = [cluster.final(j, timeout_s=90) for j in jobs]
    assert [(j.status, j.attempts) for j in finished] == [("succeeded", 1)] * len(jobs)
    peaks = max_concurrent(cluster.events())
    assert peaks[heavy].leases == borrowable
    assert peaks[light].leases == 1


def test_without_a_burst_cap_the_cap_stays_a_hard_limit(cluster):
    tenant = new_tenant("hard")
    jobs = [cluster.submit(tenant, faults={"sleep": "1"}) for _ in range(3)]
    result = CliRunner().invoke(cli, ["tenant", "set-cap", tenant, "1"])
    assert result.exit_code == 0, result.output
    cluster.highest_caps[tenant] = get_settings().default_cap
    assert all(cluster.final(j).status == "succeeded" for j in jobs)
    later = [cluster.submit(tenant, faults={"sleep": "1"}) for _ in range(3)]
    assert all(cluster.final(j).status == "succeeded" for j in later)
    starts = sorted(float(JobItem.get(j, consistent_read=True).started_at) for j in later)
    ends = sorted(float(JobItem.get(j, consistent_read=True).finished_at) for j in later)
    assert starts[1] >= ends[0] - 0.05 and starts[2] >= ends[1] - 0.05  # one at a time


def test_a_node_that_stops_beating_leaves_the_registry(cluster):
    assert nodes.register("ghost@nowhere", 8, now=time.time() - 10 * get_settings().node_ttl_s)
    assert int(nodes.slots().total) == SLOTS + 8
    wait_for(lambda: "ghost@nowhere" not in nodes.live_nodes() and int(nodes.slots().total) == SLOTS, 30,
             what="the sweeper to drop the dead node")
    assert int(nodes.slots().borrowable) == SLOTS - get_settings().reserve_slots
