"""The simulator on its own (no servers): known answers of small workloads, each rule visible in
the waits it causes, workload files and the licence verdict."""

from __future__ import annotations

import dataclasses
import math

import pytest

from imposition.capacity.cli import run_nodes
from imposition.capacity.core import Tier
from imposition.capacity.errors import WorkloadError
from imposition.capacity.results import summarise
from imposition.capacity.simulator import ModelParams, SimJob, simulate
from imposition.capacity.workload import Workload, load_spec

#: No latencies: every time in a run is a sum of job durations and the configured delays.
EXACT = ModelParams(slots_per_node=8, default_cap=4, reserve_slots=1, defer_delay_s=30, retry_backoff_base_s=5,
                    retry_backoff_max_s=900, max_attempts=3, poll_latency_s=0.0, wake_latency_s=0.0, park_s=0.0,
                    job_overhead_s=0.0)


def burst(tenant: str, count: int, hold_s: float, at: float = 1_000.0) -> list[SimJob]:
    return [SimJob(tenant, at, hold_s) for _ in range(count)]


def test_a_tenant_alone_runs_in_waves_of_its_cap():
    jobs = burst("solo", 10, 2.0)
    run = simulate(jobs, nodes=1, policy_name="handoff", params=EXACT)
    assert sorted(j.wait_s for j in jobs) == [0.0] * 4 + [2.0] * 4 + [4.0] * 2
    assert run.most_leases == {"solo": 4}
    assert max(j.finished_at for j in jobs) - 1_000.0 == pytest.approx(6.0)
    assert run.busy_slot_s == pytest.approx(20.0)


def test_more_nodes_do_not_help_a_tenant_held_by_its_cap_but_borrowing_does():
    def p95(nodes: int, policy: str) -> float:
        jobs = burst("solo", 40, 1.0)
        simulate(jobs, nodes=nodes, policy_name=policy, params=EXACT, tiers={"solo": Tier(burst_cap=16)})
        return sorted(j.wait_s for j in jobs)[37]

    assert p95(1, "handoff") == p95(3, "handoff") == 9.0
    assert p95(1, "borrow") == 5.0  # 8 slots less the reserve of 1: waves of 7
    assert p95(3, "borrow") == 2.0  # burst cap 16 within 23 borrowable slots


def test_a_handed_job_is_published_and_received_like_any_other():
    # cap 1, jobs of 1 s: each commit hands its place to the next job in its own transaction; the
    # job is published (wake latency) and received (poll) before its lease.
    params = dataclasses.replace(EXACT, default_cap=1, poll_latency_s=0.5, wake_latency_s=0.2)
    jobs = burst("solo", 5, 1.0)
    simulate(jobs, nodes=1, policy_name="handoff", params=params)
    assert sorted(j.started_at - 1_000.0 for j in jobs) == pytest.approx([0.5 + 1.7 * i for i in range(5)])
    timer = burst("solo", 2, 1.0)  # the timer policy never hands on: the copy comes after its delay
    simulate(timer, nodes=1, policy_name="timer", params=params)
    assert max(j.started_at for j in timer) - 1_000.0 == pytest.approx(0.5 + 30 + 0.5)


def test_the_timer_makes_a_capped_job_wait_for_its_copy():
    params = dataclasses.replace(EXACT, poll_latency_s=0.5)
    jobs = burst("solo", 5, 1.0)
    simulate(jobs, nodes=1, policy_name="timer", params=params)
    assert sorted(j.wait_s for j in jobs) == [0.5] * 4 + [0.5 + 30 + 0.5]


def test_a_waiting_receive_sees_a_due_copy_at_its_recheck_or_at_the_next_send():
    # cap 1: the second job is deferred at 0, its copy due at 30; the idle workers' receive has
    # waited since 0 and rechecks every 4 s (moto: 1 s), so it sees the copy at 32, not 30.
    params = dataclasses.replace(EXACT, default_cap=1, delayed_recheck_s=4.0)
    jobs = burst("solo", 2, 1.0)
    simulate(jobs, nodes=1, policy_name="timer", params=params)
    assert sorted(j.wait_s for j in jobs) == [0.0, pytest.approx(32.0)]
    # another tenant's job sent at 31 wakes the waiting receive, which then sees the copy too
    jobs = burst("solo", 2, 1.0) + [SimJob("other", 1_031.0, 1.0)]
    simulate(jobs, nodes=1, policy_name="timer", params=params)
    assert sorted(j.wait_s for j in jobs if j.tenant == "solo") == [0.0, pytest.approx(31.0)]
    # AWS SQS (0): the copy is seen when due
    jobs = burst("solo", 2, 1.0)
    simulate(jobs, nodes=1, policy_name="timer", params=dataclasses.replace(params, delayed_recheck_s=0.0))
    assert sorted(j.wait_s for j in jobs) == [0.0, pytest.approx(30.0)]


def test_hand_off_wakes_the_oldest_waiting_job_within_the_wake_latency():
    params = dataclasses.replace(EXACT, poll_latency_s=0.25, wake_latency_s=0.5)
    jobs = [SimJob("solo", 1_000.0 + i * 0.01, 2.0) for i in range(5)]
    simulate(jobs, nodes=1, policy_name="handoff", params=params)
    first_out = min(j.finished_at for j in jobs[:4])
    assert jobs[4].started_at == pytest.approx(first_out + 0.5 + 0.25)


def test_fair_delivery_lets_a_light_tenant_past_a_backlog():
    def light_wait(order: str) -> float:
        jobs = burst("heavy", 200, 1.0, at=1_000.0) + burst("light", 3, 1.0, at=1_001.0)
        params = dataclasses.replace(EXACT, poll_latency_s=0.05, park_s=0.05, delivery_order=order)
        simulate(jobs, nodes=1, policy_name="timer", params=params)
        return max(j.wait_s for j in jobs if j.tenant == "light")

    assert light_wait("fair") < 1.0 < light_wait("arrival")


def test_a_light_tenant_behind_three_heavy_ones_takes_the_first_slots_that_free():
    # Cap 4 on 8 slots, jobs of 5 s, delivered in arrival order. heavy0 and heavy1 fill the slots;
    # heavy2's four messages and then light's two wait in the queue. At 1,005 heavy0's four slots free.
    # heavy2 takes the first (a tie: neither holds a lease); its other messages give way once, so
    # light takes the next two, not the round that frees at 1,007.5 (a wait of 3.5 s).
    jobs = (burst("heavy0", 16, 5.0, at=1_000.0) + burst("heavy1", 16, 5.0, at=1_002.5)
            + burst("heavy2", 16, 5.0, at=1_003.0) + burst("light", 2, 5.0, at=1_004.0))
    for i, job in enumerate(jobs):
        job.submitted_at += i * 1e-3  # one after another, as a caller submits them
    simulate(jobs, nodes=1, policy_name="handoff", params=EXACT)
    assert max(j.wait_s for j in jobs if j.tenant == "light") == pytest.approx(1.0, abs=0.1)
    assert all(j.status == "succeeded" and j.attempts == 1 for j in jobs)


def test_a_failed_attempt_is_retried_after_its_backoff_and_the_budget_ends_it():
    retried, doomed = SimJob("t", 0.0, 1.0, fails=1), SimJob("u", 0.0, 1.0, fails=5)
    simulate([retried, doomed], nodes=1, policy_name="handoff", params=EXACT)
    assert (retried.status, retried.attempts, retried.finished_at) == ("succeeded", 2, pytest.approx(1 + 5 + 1))
    assert (doomed.status, doomed.attempts) == ("failed", 3)
    assert doomed.finished_at == pytest.approx(1 + 5 + 1 + 10 + 1)  # backoff 5, then 10


def test_a_paused_tenant_never_starts_and_is_reported_unfinished():
    jobs = burst("paused", 3, 1.0) + burst("other", 1, 1.0)
    run = simulate(jobs, nodes=1, policy_name="handoff", params=EXACT, tiers={"paused": Tier(cap=0)})
    assert summarise(run).unfinished == 3
    assert [j.wait_s for j in jobs if j.tenant == "paused"] == [None] * 3


@pytest.mark.parametrize("nodes", [0, -1])
def test_a_run_needs_a_node(nodes):
    with pytest.raises(WorkloadError, match="nodes"):
        simulate(burst("t", 1, 1.0), nodes=nodes, policy_name="handoff", params=EXACT)


def test_the_licence_verdict_follows_the_capacity_reports_rule():
    """A Monday where 20 tenants (default caps) keep 10 slots busy: on one node of 8 slots the
    backlog grows all day (busy days and long waits: warranted); two nodes are 62 % busy."""
    day = 1_767_571_200.0  # Monday 2026-01-05 00:00 UTC
    rows = [(f"t{i}", day + k * 120.0 + i * 6.0, 60.0, 0) for i in range(20) for k in range(720)]
    summaries, samples = run_nodes(Workload(rows, {}, "test"), [1, 2], policy="handoff")
    one, two = summaries
    assert one.report.warranted and not two.report.warranted
    assert one.utilisation > 0.8 > two.utilisation
    assert set(samples[1]) == {f"t{i}" for i in range(20)}


def test_a_workload_file_draws_what_it_says(tmp_path):
    spec = tmp_path / "w.toml"
    spec.write_text("""
seed = 3
[[tenants]]
name = "a"
cap = 2
burst_cap = 5
arrivals = { pattern = "poisson", rate_per_h = 100, from_h = 8, for_h = 10, days = 5 }
duration = { distribution = "lognormal", median_s = 30, sigma = 0.4 }
[[tenants]]
name = "b"
arrivals = { pattern = "burst", count = 50, at_s = 60 }
duration = { distribution = "fixed", s = 12 }
[[tenants]]
name = "c"
arrivals = { pattern = "replay", at_s = [0, 1, 2.5] }
duration = { distribution = "uniform", min_s = 1, max_s = 2 }
""")
    w = load_spec(spec, job_overhead_s=0.25)
    counts = {t: sum(1 for r in w.rows if r[0] == t) for t in "abc"}
    assert abs(counts["a"] - 5000) < 5 * math.sqrt(5000)
    assert counts["b"] == 50 and counts["c"] == 3
    assert {r[2] for r in w.rows if r[0] == "b"} == {12.25}
    assert all(1.25 <= r[2] <= 2.25 for r in w.rows if r[0] == "c")
    assert w.tiers["a"] == Tier(cap=2, burst_cap=5)
    assert load_spec(spec, job_overhead_s=0.25).rows == w.rows  # the seed makes it repeatable


def test_a_paused_tenant_raised_later_starts_its_backlog_at_the_raise_or_at_its_copies():
    # A backlog as `make bench-sched` makes one: 6 jobs of 1 s submitted at 0 while the tenant is
    # paused (cap 0), its cap raised to 2 at 10. Hand-off: parked at the door, woken at the raise,
    # waves of 2 from 10. Timer: every delivery at cap 0 defers its copy 30 s (due at 30); the
    # raise wakes nothing (nothing waits), so the backlog starts at 30, in waves of 2 by copies.
    change = [(1_010.0, "solo", Tier(cap=2))]
    handoff = burst("solo", 6, 1.0, at=1_000.0)
    simulate(handoff, nodes=1, policy_name="handoff", params=EXACT, tiers={"solo": Tier(cap=0)}, tier_changes=change)
    assert sorted(j.wait_s for j in handoff) == [10.0] * 2 + [11.0] * 2 + [12.0] * 2
    timer = burst("solo", 6, 1.0, at=1_000.0)
    simulate(timer, nodes=1, policy_name="timer", params=EXACT, tiers={"solo": Tier(cap=0)}, tier_changes=change)
    assert sorted(j.wait_s for j in timer) == [30.0] * 2 + [60.0] * 2 + [90.0] * 2
    unpaused = burst("solo", 6, 1.0, at=1_000.0)  # without the pause: the raise's cap from the start
    simulate(unpaused, nodes=1, policy_name="timer", params=EXACT, tiers={"solo": Tier(cap=2)})
    assert sorted(j.wait_s for j in unpaused) == [0.0] * 2 + [30.0] * 2 + [60.0] * 2
