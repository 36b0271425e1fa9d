"""The scale envelope of docs/deploy.md, section 9: the numbers it states are what
imposition.capacity.envelope computes, and the slot counter binds first below 100 nodes."""

from __future__ import annotations

import pytest

from imposition.capacity.envelope import envelope

TARGET = {"slots_per_node": 8, "job_s": 30, "heartbeat_interval_s": 60}


def nodes(limits) -> dict[str, float]:
    return {limit.name: round(limit.nodes, 1) for limit in limits}


def test_the_numbers_of_the_deploy_doc():
    limits = envelope(**TARGET, transaction_s=0.010)
    assert limits[0].name == "cluster item 'slots' (transaction conflicts)"
    assert (limits[0].jobs_per_s, round(limits[0].nodes, 1)) == (25.0, 93.8)
    assert nodes(limits) == {
        "cluster item 'slots' (transaction conflicts)": 93.8,
        "by-pending GSI 'pending' (reads)": 450.0,
        "by-webhook-due GSI 'outbox'": 937.5,
        "cluster item 'slots' (write units)": 937.5,
        "by-expiry GSI 'lease'": 1250.0,
        "by-pending GSI 'pending'": 1250.0,
        "SQS in flight, imposition queue": 15000.0,
        "nodes-by-expiry GSI 'node'": 30000.0,
    }
    slow = envelope(**TARGET, transaction_s=0.025)
    assert (slow[0].jobs_per_s, round(slow[0].nodes, 1)) == (10.0, 37.5)
    assert 8 * 100 / 30 > slow[0].jobs_per_s and 8 * 100 / 30 > limits[0].jobs_per_s  # binds below 100 nodes


def test_sixteen_slot_counter_items_move_the_binding_limit_far_above_100_nodes():
    """docs/deploy.md: with ``cluster_slot_shards`` 16 the give way's read of the pending tenants
    binds first, at 450 nodes with 200 of them; the counter binds at 600 nodes (25 ms transactions)
    and the outbox index at 938."""
    fast, slow = (envelope(**TARGET, transaction_s=w, slot_shards=16) for w in (0.010, 0.025))
    assert (fast[0].name, round(fast[0].nodes, 1)) == ("by-pending GSI 'pending' (reads)", 450.0)
    assert nodes(fast)["by-webhook-due GSI 'outbox'"] == 937.5
    assert nodes(fast)["cluster item 'slots' (transaction conflicts)"] == 1500.0
    assert nodes(slow)["cluster item 'slots' (transaction conflicts)"] == 600.0
    assert nodes(fast)["cluster item 'slots' (write units)"] == 15000.0


def test_the_give_way_read_grows_with_the_tenants_that_wait():
    """Each delivery reads every pending tenant: 1,000 of them bind at 90 nodes of 30 s jobs."""
    many = envelope(**TARGET, transaction_s=0.010, slot_shards=16, pending_tenants=1000)
    assert (many[0].name, many[0].jobs_per_s, round(many[0].nodes, 1)) == ("by-pending GSI 'pending' (reads)", 24.0, 90.0)


def test_longer_jobs_carry_more_nodes():
    assert envelope(**{**TARGET, "job_s": 60}, transaction_s=0.010)[0].nodes == pytest.approx(187.5)


@pytest.mark.parametrize("field", ["slots_per_node", "job_s", "heartbeat_interval_s", "slot_shards", "pending_tenants"])
def test_a_value_not_positive_is_named(field):
    with pytest.raises(ValueError, match=rf"{field}=0: must be > 0"):
        envelope(**{**TARGET, field: 0}, transaction_s=0.010)
