"""leases.skew on the real local DynamoDB (moto over HTTP): a node's reported clock reading makes
the sweeper hold its leases and its registration until they expire by the node's clock, and
only then; a node that reported nothing is judged by the sweeper's clock, as before."""

from __future__ import annotations

import time

from leases import nodes, skew, sweeper, transactions
from leases.models import JobItem, LeaseItem
from tests.leases.helpers import make_job

BEHIND_S = 300.0  # the node's clock is 5 minutes behind the sweeper's


def _reading(offset_s: float) -> skew.ClockReading:
    """A node's reading ``offset_s`` off the endpoint (the sweeper's own is measured: about 0 here)."""
    return skew.ClockReading(offset_s=offset_s, error_s=0.6, at=time.time())


def _publish(tenant: str, job_id: str, *, after_attempt: int) -> None:
    pass  # the re-published copy is not what these tests look at


def test_the_endpoint_reading_of_this_process_is_within_its_error():
    reading = skew.endpoint_offset()
    assert abs(reading.offset_s) <= reading.error_s + 0.5  # moto runs on this machine's clock
    assert 0.5 <= reading.error_s < 2


def test_a_lease_of_a_node_behind_is_held_until_it_expires_by_the_nodes_clock(tenant_id):
    from imposition.common.settings import get_settings

    s = get_settings()
    assert s.lease_ttl_s + s.node_ttl_s < BEHIND_S  # the lease and the registration both look long expired
    node_now = time.time() - BEHIND_S
    nodes.register("behind@host", 4, now=node_now, clock=_reading(-BEHIND_S))
    nodes.register("silent@host", 4, now=time.time())  # reports no clock
    held_job, silent_job = make_job(tenant_id), make_job(tenant_id)
    transactions.acquire(held_job, tenant_id, "behind@host/7", now=node_now)  # written by the node's clock
    transactions.acquire(silent_job, tenant_id, "silent@host/8", now=time.time() - 3600)

    now = time.time() + 5  # the sweeper's clock: the node's lease looks expired by ~4 minutes
    report = sweeper.sweep(now, publish=_publish)
    assert report.held_for_skew == 1 and dict(report.reclaimed) == {tenant_id: 1}
    assert JobItem.get(held_job, consistent_read=True).status == "running"
    assert JobItem.get(silent_job, consistent_read=True).status == "queued"  # no reading: reclaimed as before
    (behind,) = [s for s in skew.known_skews().values() if s.node == "behind@host"]
    assert abs(behind.skew_s + BEHIND_S) < 2
    assert "behind@host" in nodes.live_nodes(now=node_now)  # registration kept (by its own clock)
    assert "behind@host" not in report.nodes_dropped

    later = time.time() + BEHIND_S + max(s.lease_ttl_s, s.node_ttl_s) + 5  # expired by the node's clock too
    report = sweeper.sweep(later, publish=_publish)
    assert report.held_for_skew == 0 and dict(report.reclaimed) == {tenant_id: 1}
    assert JobItem.get(held_job, consistent_read=True).status == "queued"
    assert not list(LeaseItem.scan(consistent_read=True))
    assert "behind@host" in report.nodes_dropped  # its registration expired by its own clock as well
    nodes.deregister("silent@host")
