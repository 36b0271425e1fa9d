"""``make bench-sim``: how fast the simulator runs four weeks of history (not a test: prints figures).

100 tenants, 10,000 jobs a day for 28 days (Poisson arrivals in working hours, lognormal durations
of median 20 s), one node of ``slots_per_node`` slots, each policy, on one core (this process).
Prints jobs, simulated events, wall seconds and jobs per second per policy, and the run's p95 wait.
"""

from __future__ import annotations

import os
import random
import time

from imposition.capacity.core import Tier
from imposition.capacity.simulator import ModelParams, SimJob, simulate

TENANTS = 100
JOBS_PER_DAY = 10_000
DAYS = 28
DAY_S = 86_400.0


def history(seed: int = 1) -> list[SimJob]:
    """Four weeks of jobs: each tenant's share of the day's jobs (Zipf-like weights) arrives as a
    Poisson process between 06:00 and 22:00; durations lognormal, median 20 s."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(TENANTS)]
    total = sum(weights)
    jobs = []
    for day in range(DAYS):
        start = day * DAY_S + 6 * 3600
        for i, w in enumerate(weights):
            n = int(round(JOBS_PER_DAY * w / total))
            jobs += [SimJob(f"t{i:03d}", start + rng.uniform(0, 16 * 3600), rng.lognormvariate(2.995, 0.6))
                     for _ in range(n)]
    return jobs


def main() -> None:
    params = ModelParams.from_settings()
    policies = [p for p in os.environ.get("BENCH_SIM_POLICIES", "handoff,timer,borrow").split(",") if p]
    tiers = {f"t{i:03d}": Tier(cap=None, burst_cap=8) for i in range(TENANTS)}
    print(f"bench-sim: {TENANTS} tenants, {JOBS_PER_DAY:,} jobs/day, {DAYS} days, 1 node of {params.slots_per_node} slots")
    for name in policies:
        jobs = history()
        began = time.process_time()
        wall = time.perf_counter()
        simulate(jobs, nodes=1, policy_name=name, params=params, tiers=tiers, keep_intervals=False)
        cpu_s, wall_s = time.process_time() - began, time.perf_counter() - wall
        waits = sorted(j.wait_s for j in jobs if j.wait_s is not None)
        p95 = waits[int(0.95 * (len(waits) - 1))] if waits else float("nan")
        print(f"  {name:8} {len(jobs):>8,} jobs  {cpu_s:6.2f} s CPU  {wall_s:6.2f} s wall  "
              f"{len(jobs) / cpu_s:>9,.0f} jobs/s  (budget 10 s: {cpu_s / 10:.2f} of it)  p95 wait {p95:.1f} s",
              flush=True)


if __name__ == "__main__":
    main()
