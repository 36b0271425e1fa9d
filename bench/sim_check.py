"""The simulator against ``make bench-sched``: each scenario's measured arrivals and lease times
replayed in :mod:`imposition.capacity.simulator`, predicted against measured, with the error of each.

``make bench-sched`` saves each run's jobs to ``out/bench-sched/jobs-<scenario>-<policy>.json``
(per job: tenant, submitted/started/finished/woken times, attempts; and the lease intervals of the
event log) and calls :func:`compare` after every scenario. ``python -m bench.sim_check`` compares
the saved runs again (no stack needed), for example after changing a ``sim_*`` setting.

Compared (the issue's bar in brackets): per-tenant p50 and p95 wait (within 10 % or 2 s, whichever
is larger), makespan (within 10 %), slot utilisation as ``bench.sched`` defines it but over the
jobs' lease times (start → fenced commit, what the replay holds; the bench's own column ends each
lease at its ``releasing`` event and reads lower), most leases per tenant (exact). The model's
clocks ``sim_poll_latency_s`` (each delivery drawn from the run's measured latencies),
``sim_wake_latency_s`` and, for the timer's copies, ``sim_delayed_recheck_s`` are measured from the same run (:func:`calibrate`: they depend on the
machine's load far more than on the scheduling);
``BENCH_SIM_CLOCKS=settings`` uses the configured ones instead. Every other number is the
service's configuration. Drawn latencies make a replay one random outcome, so each run is
replayed :func:`replications` times (seeds 1…N) and the prediction is their median (most leases:
their most common value), with the makespans' 10–90 % spread beside it.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

from imposition.capacity.core import Tier
from imposition.capacity.simulator import ModelParams, SimJob, simulate
from imposition.observability.history import percentile

OUT = Path(__file__).resolve().parent.parent / "out" / "bench-sched"


def save_jobs(path: Path, *, scenario: str, policy: str, tenants: dict[str, str], light: set[str],
              items: dict, job_ids: dict[str, list[str]], intervals, busy=(), deliveries=(),
              burst_cap: int | None, defer_delay_s: float, released_at: float | None = None) -> None:
    """Write one run's jobs, lease intervals (held: to ``releasing``; ``released_at``: the end of
    the release transaction, from ``busy``) and deliveries (``began``, ``ended``, ``state``; the
    ``delivery`` events of :mod:`bench.sched_app`), times in epoch s, for :func:`compare`; a job's
    ``in_place`` says its last lease was taken in place (no delivery of its own); ``released_at``:
    when a backlog scenario's paused tenants (cap 0 while it was submitted) had their caps raised."""
    released = {iv.token: iv.end_at for iv in busy}
    short = {full: s for s, full in tenants.items()}
    delivered = [{"tenant": short[e["tenant"]], "job": e.get("job"), "began": e["began"], "ended": e["t"],
                  "state": e.get("state")} for e in deliveries if e.get("tenant") in short and e["event"] == "delivery"]
    published = {e["job"]: e["t"] for e in deliveries if e["event"] == "woken" and e.get("job")}
    in_place = {e["job"] for e in deliveries if e["event"] == "in_place"}
    jobs = [{"tenant": short[t], "job": j, "submitted_at": float(items[j].submitted_at),
             "started_at": _num(items[j].started_at), "finished_at": _num(items[j].finished_at),
             "woken_at": _num(items[j].woken_at), "woken_by": items[j].woken_by,
             "woken_published_at": published.get(j), "first_received_at": _num(items[j].first_received_at),
             "attempts": int(items[j].attempts or 0), "defers": int(items[j].defer_count or 0),
             "in_place": j in in_place}
            for t, ids in job_ids.items() for j in ids if j in items]
    leases = [{"tenant": short.get(iv.tenant_id, iv.tenant_id), "job": iv.job_id, "start_at": iv.start_at,
               "end_at": iv.end_at, "released_at": released.get(iv.token)}
              for iv in intervals if iv.tenant_id in short]
    path.write_text(json.dumps({"scenario": scenario, "policy": policy, "light": sorted(light),
                                "burst_cap": burst_cap, "defer_delay_s": defer_delay_s,
                                "released_at": released_at, "jobs": jobs,
                                "leases": leases, "deliveries": delivered}))


def _num(value) -> float | None:
    return None if value is None else float(value)


@dataclass
class Check:
    """One (scenario, policy): measured and predicted figures, and whether each is within the bar."""

    scenario: str
    policy: str
    tenants: dict = field(default_factory=dict)  # tenant -> {measured/predicted p50, p95, leases}
    makespan_s: tuple[float, float] = (0.0, 0.0)
    #: The replications' predicted makespans, 10th and 90th percentile (equal with one replication).
    makespan_spread_s: tuple[float, float] = (0.0, 0.0)
    utilisation: tuple[float, float] = (0.0, 0.0)
    calibration: dict = field(default_factory=dict)

    @property
    def within(self) -> bool:
        """Every figure within the issue's bar."""
        waits_ok = all(_wait_ok(m, p) for t in self.tenants.values()
                       for m, p in ((t["p50"][0], t["p50"][1]), (t["p95"][0], t["p95"][1])))
        leases_ok = all(t["leases"][0] == t["leases"][1] for t in self.tenants.values())
        m, p = self.makespan_s
        return waits_ok and leases_ok and abs(p - m) <= 0.1 * m


def _wait_ok(measured: float | None, predicted: float | None) -> bool:
    if measured is None or predicted is None:
        return measured is None and predicted is None
    return abs(predicted - measured) <= max(0.1 * measured, 2.0)


def calibrate(jobs: list[dict], leases: list[dict] = (), deliveries: list[dict] = (),
              defer_delay_s: float = 30.0, workers: int = 8) -> dict:
    """The model's clocks as measured in one run (seconds; None where the run has no such event).

    The simulator's cycle of a slot is: a lease held ``hold``, its release, ``wake_latency`` to the
    woken job's publish, a delivery ``poll_latency`` later, which takes the lease (or parks for
    ``park_s``). A release that hands its place on reads the successor before the release and
    publishes it after, and the worker can receive it before the publisher's own clock reads the
    publish; so the calibration measures the whole gap from the freeing release to the next lease
    and gives it to ``poll_latency`` (``wake_latency`` 0):

    * ``poll_latency_samples``: per taken lease, its start − the moment its message was due: for a
      woken job the end of its tenant's last release transaction before it (``released_at``),
      for a job sent straight to the queue its submission; a message due while all ``workers``
      were in a delivery counts from the first one's end (the queue wait is the model's own), and
      none before the run's first delivery (a backlog published before the workers started) or
      before the job sent to the queue just before it started (moto delivers in arrival order). A
      timer's copies are not sampled: measured as the gap from ``defer_delay_s`` after the
      deferring delivery's end, they include waits of the node's receive cadence under churn
      that iid draws misplace (the burst's light tenants were then predicted 5 s of wait
      against 0.2 s measured);
    * ``in_place_latency_samples``: the same gap for a job the releasing worker ran in place (from
      that release to its lease; no queue wait: the worker was the releaser);
    * ``park_s``: the mean worker time of a delivery that parked or deferred its job;
    * ``delayed_recheck_s``: how often a waiting receive rechecks for copies that became due, from
      each copy's lag (its next delivery's start − the deferring delivery's end − ``defer_delay_s``;
      only copies that came due while a worker was free and no other due message stood in the
      queue: one that waited for a worker or behind other messages measures the queue, the model's
      own, and a backlog of 1,000 copies had the period at 68–79 s):
      in the model a uniform wait for the recheck plus a constant latency, so the recheck period is
      the lags' 5th-to-95th-percentile spread ÷ 0.9 (None with fewer than 20 copies);
    * ``holds``: job id → acquire to the end of the release transaction of its successful lease;
    * ``wake_latency_s`` (reported, not used): a woken job's publish − that release's end.

    Runs saved before the delivery events (no ``released_at``, no deliveries) are measured from
    the jobs' own times, as far as they go.
    """
    finished = {j["job"]: j for j in jobs if j["finished_at"] is not None and j["started_at"] is not None}
    last_lease: dict[str, dict] = {}
    for lease in leases:
        if lease.get("job") and lease.get("end_at") is not None:
            if lease["job"] not in last_lease or lease["start_at"] > last_lease[lease["job"]]["start_at"]:
                last_lease[lease["job"]] = lease
    releases: dict[str, list[float]] = {}
    for lease in leases:
        end = lease.get("released_at") or lease.get("end_at")
        if end is not None:
            releases.setdefault(lease["tenant"], []).append(end)
    for ends in releases.values():
        ends.sort()
    began = sorted(d["began"] for d in deliveries)
    ended = sorted(d["ended"] for d in deliveries)

    def due_after_queue(due: float) -> float:
        if began and due < began[0]:  # a backlog published before the workers started
            due = began[0]
        busy = bisect.bisect_right(began, due) - bisect.bisect_right(ended, due)
        if busy >= workers:
            i = bisect.bisect_right(ended, due)
            return ended[i] if i < len(ended) else due
        return due

    def last_release(tenant: str, before: float) -> float | None:
        ends = releases.get(tenant, [])
        i = bisect.bisect_right(ends, before) - 1
        return ends[i] if i >= 0 else None

    # Jobs sent straight to the queue are received in submission order (moto's): one whose message
    # had another ahead of it still unreceived counts from that one's receipt.
    ahead: dict[str, float] = {}
    previous = None
    for j in sorted((j for j in finished.values() if j["woken_at"] is None and j["defers"] == 0),
                    key=lambda j: j["submitted_at"]):
        if previous is not None:
            ahead[j["job"]] = previous
        previous = j["started_at"]
    samples: list[float] = []
    in_place: list[float] = []
    wakes: list[float] = []
    holds: dict[str, float] = {}
    for job_id, j in finished.items():
        lease = last_lease.get(job_id)
        start = lease["start_at"] if lease else j["started_at"]
        end = (lease.get("released_at") or lease["end_at"]) if lease else j["finished_at"]
        holds[job_id] = end - start
        if j["woken_at"] is not None:
            freed = last_release(j["tenant"], start)
            due = freed if freed is not None and freed >= j["submitted_at"] else None
            if j.get("woken_published_at") and freed is not None:
                wakes.append(max(0.0, j["woken_published_at"] - freed))
        elif j["defers"] == 0:
            due = max(j["submitted_at"], ahead.get(job_id, j["submitted_at"]))
        else:
            due = None  # a timer's copy: see the docstring
        if due is not None and j.get("in_place"):  # taken by the releasing worker: no queue, no receive
            if start >= due:
                in_place.append(start - due)
        elif due is not None:
            due = due_after_queue(due)
            if start >= due:
                samples.append(start - due)
    parks = [d["ended"] - d["began"] for d in deliveries if d.get("state") == "RETRY"]
    by_job: dict[str, list[dict]] = {}
    for d in sorted(deliveries, key=lambda d: d["began"]):
        by_job.setdefault(d.get("job") or "", []).append(d)
    # Messages due by a moment (each job's first at its submission, each copy at its deferral's end
    # + the delay) less the deliveries begun by then: how many stood in the queue at that moment.
    due_at = sorted([j["submitted_at"] for j in jobs]
                    + [d["ended"] + defer_delay_s for d in deliveries if d.get("state") == "RETRY"])

    def alone_in_queue(t: float) -> bool:
        return bisect.bisect_right(due_at, t) - bisect.bisect_right(began, t) <= 1

    lags = sorted(b["began"] - a["ended"] - defer_delay_s for job, ds in by_job.items() if job
                  for a, b in zip(ds, ds[1:])
                  if a.get("state") == "RETRY" and alone_in_queue(a["ended"] + defer_delay_s)
                  and due_after_queue(a["ended"] + defer_delay_s) == a["ended"] + defer_delay_s)
    recheck = (percentile(lags, 0.95) - percentile(lags, 0.05)) / 0.9 if len(lags) >= 20 else None
    return {"poll_latency_s": statistics.fmean(samples) if samples else None, "poll_latency_samples": samples,
            "in_place_latency_s": statistics.fmean(in_place) if in_place else None,
            "in_place_latency_samples": in_place,
            "wake_latency_s": statistics.fmean(wakes) if wakes else None,
            "park_s": statistics.fmean(parks) if parks else None, "parks": len(parks),
            "delayed_recheck_s": recheck, "copies": len(lags),
            "lease_s_median": statistics.median(holds.values()) if holds else None, "holds": holds}


def _bench_utilisation(intervals, demand, caps, slots, start, end, **borrowing) -> float:
    from bench.sched import utilisation  # noqa: PLC0415 (one definition of the column)

    return utilisation(intervals, demand, caps, slots, start, end, **borrowing)


def compare(record: dict, params: ModelParams | None = None) -> Check:
    """Replay one saved run in the simulator and compare (see the module docstring).

    ``params`` None: the configured model, with the clocks measured in this run
    (:func:`calibrate`) unless ``BENCH_SIM_CLOCKS=settings``.
    """
    policy = record["policy"]
    jobs = [j for j in record["jobs"] if j["started_at"] is not None and j["finished_at"] is not None]
    calibration = calibrate(jobs, record.get("leases", []), record.get("deliveries", []), record["defer_delay_s"],
                            ModelParams.from_settings().slots_per_node)
    holds = calibration.pop("holds")
    if params is None:
        measured = {} if os.environ.get("BENCH_SIM_CLOCKS") == "settings" else {
            "poll_latency_s": calibration["poll_latency_s"], "wake_latency_s": 0.0,
            "park_s": calibration["park_s"], "poll_latency_samples": tuple(calibration["poll_latency_samples"]),
            "delayed_recheck_s": calibration["delayed_recheck_s"]}
        params = ModelParams.from_settings(defer_delay_s=record["defer_delay_s"], **measured)
    tenants = sorted({j["tenant"] for j in jobs})
    burst = record.get("burst_cap")
    tiers = {t: Tier(burst_cap=burst) for t in tenants} if policy == "borrow" and burst else {}
    released_at = record.get("released_at")
    changes = None
    if released_at is not None:  # a backlog: submitted while paused (cap 0), then the caps raised
        changes = [(released_at, t, tiers.get(t, Tier())) for t in tenants]
        tiers = {t: Tier(cap=0) for t in tenants}
    deliveries = record.get("deliveries", [])
    online = min(d["began"] for d in deliveries) if deliveries else None  # the node's first receipt
    first = min(j["submitted_at"] for j in jobs)
    m_last = max(j["finished_at"] for j in jobs)
    slots = params.slots_per_node
    caps = {t: params.default_cap for t in tenants}
    borrowing = ({"burst_caps": {t: min(burst, slots - params.reserve_slots) for t in tenants},
                  "reserve": params.reserve_slots} if policy == "borrow" and burst else {})
    random_draws = bool(params.poll_latency_samples)
    runs = []  # per replication: (waits per tenant, most leases per tenant, makespan, utilisation)
    for seed in range(1, 1 + (replications() if random_draws else 1)):
        sim_jobs = [SimJob(j["tenant"], j["submitted_at"], holds[j["job"]], max(0, j["attempts"] - 1)) for j in jobs]
        run = simulate(sim_jobs, nodes=1, policy_name=policy, params=dataclasses.replace(params, seed=seed),
                       tiers=tiers, workers_online_at=online, tier_changes=changes)
        p_last = max(s.finished_at for s in sim_jobs if s.finished_at is not None)
        p_demand = {t: [(s.submitted_at, s.finished_at) for s in sim_jobs if s.tenant == t] for t in tenants}
        p_iv = [SimpleNamespace(start_at=a, end_at=b) for a, b, _ in run.intervals]
        runs.append(({t: [s.wait_s for s in sim_jobs if s.tenant == t and s.wait_s is not None] for t in tenants},
                     run.most_leases, p_last - first, _bench_utilisation(p_iv, p_demand, caps, slots, first, p_last, **borrowing)))
    check = Check(record["scenario"], policy, calibration=calibration)
    measured_peaks = _peaks([(lease["start_at"], lease["end_at"] or 1e18, lease["tenant"]) for lease in record["leases"]])
    for t in tenants:
        m = [j["started_at"] - j["submitted_at"] for j in jobs if j["tenant"] == t]
        check.tenants[t] = {"p50": (percentile(m, 0.5), statistics.median(percentile(r[0][t], 0.5) for r in runs)),
                            "p95": (percentile(m, 0.95), statistics.median(percentile(r[0][t], 0.95) for r in runs)),
                            "leases": (measured_peaks.get(t, 0), min(statistics.multimode(r[1].get(t, 0) for r in runs)))}
    check.makespan_s = (m_last - first, statistics.median(r[2] for r in runs))
    spans = sorted(r[2] for r in runs)
    check.makespan_spread_s = (percentile(spans, 0.1), percentile(spans, 0.9))
    m_demand = {t: [(j["submitted_at"], j["finished_at"]) for j in jobs if j["tenant"] == t] for t in tenants}
    m_iv = [SimpleNamespace(start_at=j["started_at"], end_at=j["finished_at"]) for j in jobs]
    check.utilisation = (_bench_utilisation(m_iv, m_demand, caps, slots, first, m_last, **borrowing),
                         statistics.median(r[3] for r in runs))
    return check


def replications() -> int:
    """How many seeded replications :func:`compare` runs when the model draws its latencies from a
    run's samples (``BENCH_SIM_REPLICATIONS``, default 21): each predicted wait, makespan and
    utilisation is their median, each most-leases figure their most common value (the lower of a
    tie). One draw is one sample of the outcome, not a forecast of it: under the timer, whether a
    copy meets a free slot moves a run by whole 30 s rounds (`burst`: 188-280 s over 20 seeds of
    one replay, 11 of them at 188-191 s, 7 at 217-221 s)."""
    return max(1, int(os.environ.get("BENCH_SIM_REPLICATIONS", "21")))


def _peaks(intervals: list[tuple[float, float, str]]) -> dict[str, int]:
    points = sorted([(a, 1, t) for a, _, t in intervals] + [(b, -1, t) for _, b, t in intervals],
                    key=lambda p: (p[0], p[1]))
    now: dict[str, int] = {}
    most: dict[str, int] = {}
    for _, delta, t in points:
        now[t] = now.get(t, 0) + delta
        most[t] = max(most.get(t, 0), now[t])
    return most


def _fmt(pair, digits: int = 1) -> str:
    m, p = pair
    if m is None or p is None:
        return "—"
    err = p - m
    return f"{m:.{digits}f} / {p:.{digits}f} ({err:+.{digits}f})"


def table(checks: list[Check]) -> str:
    """Markdown: one row per (scenario, policy, tenant); measured / predicted (error)."""
    lines = ["| scenario | policy | tenant | wait p50 s | wait p95 s | most leases | makespan s | utilisation % | "
             "within the bar |", "|---|---|---|---|---|---|---|---|---|"]
    for c in checks:
        first = True
        for t, v in c.tenants.items():
            leases = f"{v['leases'][0]} / {v['leases'][1]}" + ("" if v["leases"][0] == v["leases"][1] else " ✗")
            low, high = c.makespan_spread_s
            spread = f" (10–90 %: {low:.1f}–{high:.1f})" if high > low else ""
            span = _fmt(c.makespan_s) + f" {100 * (c.makespan_s[1] - c.makespan_s[0]) / c.makespan_s[0]:+.0f} %" \
                + spread if first else ""
            util = _fmt((100 * c.utilisation[0], 100 * c.utilisation[1]), 0) if first else ""
            mark = "yes" if c.within else "no"
            ok = lambda pair: "" if _wait_ok(*pair) else " ✗"  # noqa: E731
            lines.append(f"| {c.scenario if first else ''} | {c.policy if first else ''} | {t} | "
                         f"{_fmt(v['p50'])}{ok(v['p50'])} | {_fmt(v['p95'])}{ok(v['p95'])} | {leases} | {span} | "
                         f"{util} | {mark if first else ''} |")
            first = False
    return "\n".join(lines)


def calibration_lines(checks: list[Check], params: ModelParams) -> list[str]:
    """The configured clocks against those measured in each run."""
    source = "configured" if os.environ.get("BENCH_SIM_CLOCKS") == "settings" else "measured per run (used)"
    out = [f"Model clocks configured: sim_poll_latency_s={params.poll_latency_s:g}, "
           f"sim_wake_latency_s={params.wake_latency_s:g}, sim_park_s={params.park_s:g}; {source}:"]
    for c in checks:
        cal = c.calibration
        out.append(f"- `{c.scenario}` {c.policy}: poll latency (start − due) mean "
                   f"{_opt(cal['poll_latency_s'])} s, wake latency (wake − previous release) mean "
                   f"{_opt(cal['wake_latency_s'])} s, park (worker time of a parking delivery) mean "
                   f"{_opt(cal.get('park_s'))} s over {cal.get('parks', 0)}, delayed recheck "
                   f"{_opt(cal.get('delayed_recheck_s'))} s over {cal.get('copies', 0)} copies, lease median "
                   f"{_opt(cal['lease_s_median'])} s")
    return out


def _opt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def section(checks: list[Check]) -> str:
    """The part of ``bench/RESULTS-scheduling.md`` this module writes."""
    params = ModelParams.from_settings()
    return "\n".join(["## The simulator against these runs (`bench/sim_check.py`)", "",
                      "Each run's arrivals and measured lease times replayed in `imposition.capacity.simulator` (one node "
                      "of 8 slots, the run's policy; each delivery's latency drawn, seeded, from the run's own "
                      "measured gaps from a message's due moment to its lease, the park time its mean; "
                      "`calibrate` says how), "
                      f"{replications()} times with seeds 1…{replications()}: each predicted figure is the "
                      "replications' median (most leases: their most common value), the makespan's 10–90 % "
                      "spread over them in brackets; each cell is measured / predicted (predicted − measured); "
                      "makespans here count from the first submission (the table above counts a backlog's "
                      "from the raise of its cap). "
                      "The bar: waits within 10 % or 2 s, makespan within 10 %, most leases exact.", "",
                      table(checks), "", *calibration_lines(checks, params), ""])


def main() -> None:
    """Compare every saved run in ``out/bench-sched/`` and print the table."""
    checks = [compare(json.loads(p.read_text())) for p in sorted(OUT.glob("jobs-*.json"))]
    print(table(checks))
    print("\n".join(calibration_lines(checks, ModelParams.from_settings())))
    (OUT / "sim-check.json").write_text(json.dumps([asdict(c) for c in checks], indent=2))


if __name__ == "__main__":
    main()
