"""What a run means: per-tenant waits, slot utilisation, and the seed's licence conditions.

The conditions are the capacity report's own (:func:`imposition.observability.capacity.compute_report` on the
simulated jobs, over the working days they span), so "would a second node change the verdict?" is
answered by the same rule that gives the measured verdict.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo

from imposition.capacity.simulator import RunResult
from imposition.observability.capacity import (
    CapacityReport,
    Thresholds,
    WorkingDay,
    WorkingHours,
    compute_report,
    percent,
    working_days,
    working_hours,
)
from imposition.observability.history import percentile
from imposition.common.settings import Settings, get_settings


@dataclass(frozen=True)
class TenantWaits:
    """One tenant's waits (seconds; None with no started job)."""

    tenant: str
    jobs: int
    p50_s: float | None
    p95_s: float | None
    max_s: float | None
    most_leases: int


@dataclass(frozen=True)
class Summary:
    """One run (one node count) summarised."""

    nodes: int
    slots_total: int
    tenants: list[TenantWaits]
    utilisation: float  # busy slot-seconds ÷ (slots × first submission → last finish)
    makespan_s: float
    unfinished: int
    report: CapacityReport
    #: The tier the run used for tenants without one of their own: ``{"cap", "cap_source",
    #: "burst_cap", "burst_cap_source"}`` (a source is the option or setting it came from).
    tier: dict = field(default_factory=dict)

    @property
    def hours(self) -> WorkingHours:
        """The working hours the run was judged in (set, or inferred from the arrivals)."""
        assert self.report.hours is not None, "summarise() always gives the report its hours"
        return self.report.hours

    @property
    def working_day_utilisation(self) -> float | None:
        """Busy ÷ available slot-seconds over the working days, in the working hours (the licence
        rule's, :attr:`hours`); None if the run's window holds no working hour."""
        capacity = sum(d.capacity_slot_s for d in self.report.days)
        return sum(d.busy_slot_s for d in self.report.days) / capacity if capacity else None

    def utilisation_line(self) -> str:
        """``utilisation 78.1% in working hours over 20 working days; 27.2% from the first arrival to
        the last finish (25.4 days)``: two figures over two spans, each named (the second counts the
        nights and weekends inside the run too). The hours are :attr:`hours` (said once, above)."""
        span = f"{self.utilisation:.1%} from the first arrival to the last finish ({_duration(self.makespan_s)})"
        within = self.working_day_utilisation
        if within is None:
            return f"utilisation {span}; no working hour in its window"
        return f"utilisation {percent(within)} in working hours over {len(self.report.days)} working days; {span}"

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return {"nodes": self.nodes, "slots_total": self.slots_total, "utilisation": self.utilisation,
                "working_day_utilisation": self.working_day_utilisation, "working_hours": self.hours.as_dict(),
                "working_days": len(self.report.days), **self.tier,
                "makespan_s": self.makespan_s, "unfinished": self.unfinished,
                "tenants": [t.__dict__ for t in self.tenants],
                "utilisation_condition": self.report.utilisation_condition,
                "wait_condition": self.report.wait_condition, "warranted": self.report.warranted,
                "verdict": self.report.verdict}


def summarise(run: RunResult, settings: Settings | None = None, *, days: list[WorkingDay] | None = None,
              hours: WorkingHours | None = None, tier: dict | None = None) -> Summary:
    """Waits per tenant, utilisation, and the licence conditions of ``run``, over ``days`` in
    ``hours`` (the working days of a measured window: ``capacity-report --what-if`` and ``simulate
    --from-history`` pass the measured report's, so both parts speak of the same days and hours),
    else over the working days the run spans, in the hours set or inferred from the run's arrivals
    (:func:`imposition.observability.capacity.working_hours`). ``tier`` is kept as :attr:`Summary.tier`."""
    s = settings or get_settings()
    by_tenant: dict[str, list[float]] = {}
    for job in run.jobs:
        by_tenant.setdefault(job.tenant, [])
        if job.wait_s is not None:
            by_tenant[job.tenant].append(job.wait_s)
    tenants = [TenantWaits(t, len(w), percentile(w, 0.5), percentile(w, 0.95), max(w) if w else None,
                           run.most_leases.get(t, 0)) for t, w in sorted(by_tenant.items())]
    first = min(j.submitted_at for j in run.jobs)
    finished = [j.finished_at for j in run.jobs if j.finished_at is not None]
    last = max(finished) if finished else first
    span = max(last - first, 1e-9)
    tz = ZoneInfo(s.capacity_timezone)
    if days is None or hours is None:
        hours = working_hours((j.submitted_at for j in run.jobs), s)
        days = working_days(dt.datetime.fromtimestamp(first, tz).date(), dt.datetime.fromtimestamp(last, tz).date(),
                            tz=tz, start_hour=hours.start_hour, end_hour=hours.end_hour, until=last + 1)
    report = compute_report(run.jobs, days=days, tz=tz, slots_total=run.slots_total, now=last,
                            thresholds=Thresholds.from_settings(s), hours=hours, nodes=run.nodes)
    return Summary(run.nodes, run.slots_total, tenants, run.busy_slot_s / (run.slots_total * span), last - first,
                   len(run.jobs) - len(finished), report, dict(tier or {}))


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _duration(seconds: float) -> str:
    """``31 s``, ``12.5 min``, ``3.2 h``, ``25.4 days``."""
    for unit, size in (("days", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def tier_words(tier: dict) -> str:
    """``cap 3 (--cap), burst cap 8 (sim_borrow_burst_cap)``, or ``cap 4 (default_cap), no
    borrowing``: the tier a run gave tenants without one of their own, and where each number came from."""
    if not tier:
        return ""
    words = f"cap {tier['cap']} ({tier['cap_source']})"
    if tier.get("burst_cap") is None:
        return words + ", no borrowing"
    return words + f", burst cap {tier['burst_cap']} ({tier['burst_cap_source']})"


def render(summaries: list[Summary], *, policy: str, source: str, max_tenants: int = 30) -> str:
    """The text form: per node count, one line per tenant, utilisation, the two conditions."""
    tier = tier_words(summaries[0].tier) if summaries else ""
    lines = [f"simulation of {source}, policy {policy}" + (f"; tenants without a tier: {tier}" if tier else "")]
    if summaries:
        lines.append(f"working hours: {summaries[0].hours.label()}")
    for sm in summaries:
        lines += ["", f"{sm.nodes} node(s), {sm.slots_total} slots: {sm.utilisation_line()}"
                      + (f"; {sm.unfinished} jobs never finished" if sm.unfinished else ""),
                  f"  {'tenant':24} {'jobs':>7} {'p50 s':>8} {'p95 s':>8} {'max s':>8} {'leases':>6}"]
        shown = sorted(sm.tenants, key=lambda t: -t.jobs)[:max_tenants]
        for t in sorted(shown, key=lambda t: t.tenant):
            lines.append(f"  {t.tenant[:24]:24} {t.jobs:>7} {_f(t.p50_s):>8} {_f(t.p95_s):>8} {_f(t.max_s):>8} "
                         f"{t.most_leases:>6}")
        if len(sm.tenants) > len(shown):
            lines.append(f"  ({len(sm.tenants) - len(shown)} smaller tenants not shown; --json has all)")
        lines += [f"  {line}" for line in sm.report.condition_lines()] + [f"  {sm.report.verdict}"]
    if len(summaries) > 1:
        lines += ["", *comparison_lines(summaries)]
    return "\n".join(lines)


def comparison_lines(summaries: list[Summary]) -> list[str]:
    """What each further node count changes against the first: long waits and the worst tenant's p95
    wait (does a licence shorten the waits, or do they wait for a cap?)."""
    first = summaries[0]

    def worst(sm: Summary) -> TenantWaits | None:
        return max((t for t in sm.tenants if t.p95_s is not None), key=lambda t: t.p95_s or 0.0, default=None)

    lines = []
    for sm in summaries[1:]:
        a, b = worst(first), worst(sm)
        tail = (f"; worst tenant p95 wait {_f(a.p95_s)} s ({a.tenant}) → {_f(b.p95_s)} s ({b.tenant})"
                if a is not None and b is not None else "")
        lines.append(f"{first.nodes} → {sm.nodes} node(s): long waits {percent(first.report.long_wait_share)} → "
                     f"{percent(sm.report.long_wait_share)} of jobs{tail}")
    return lines


def write_png(summaries: list[Summary], path: Path, *, policy: str, wait_samples: dict[int, dict[str, list[float]]],
              max_tenants: int = 12) -> Path:
    """p95 wait (worst tenant and each shown tenant) and utilisation against the node count, and
    each tenant's wait distribution (box plots) for every node count, to ``path`` (PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 (heavy import)
    from matplotlib.figure import Figure  # noqa: PLC0415

    nodes = [sm.nodes for sm in summaries]
    biggest = [t.tenant for t in sorted(summaries[0].tenants, key=lambda t: -t.jobs)[:max_tenants]]
    fig = Figure(figsize=(11, 4 + 3 * len(summaries)), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(1 + len(summaries), 2)
    ax_wait, ax_util = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    for tenant in biggest:
        series = [next((t.p95_s for t in sm.tenants if t.tenant == tenant), None) for sm in summaries]
        ax_wait.plot(nodes, [v if v is not None else float("nan") for v in series], marker="o", label=tenant)
    worst = [max((t.p95_s or 0.0) for t in sm.tenants) for sm in summaries]
    ax_wait.plot(nodes, worst, color="black", linestyle="--", marker="s", label="worst tenant")
    ax_wait.set_xlabel("nodes")
    ax_wait.set_ylabel("p95 wait (s)")
    ax_wait.set_xticks(nodes)
    ax_wait.set_title(f"p95 wait per tenant ({policy})")
    ax_wait.legend(fontsize="x-small", ncol=2)
    th = summaries[0].report.thresholds
    ax_util.plot(nodes, [100 * (sm.working_day_utilisation or 0.0) for sm in summaries], marker="o",
                 label=f"in working hours ({summaries[0].hours.span()})")
    ax_util.plot(nodes, [100 * sm.report.busy_day_share for sm in summaries], marker="^",
                 label=f"share of working days above {th.utilisation:.0%}")
    ax_util.axhline(100 * th.busy_day_share, color="black", linestyle="--", label="busy-day share needed")
    ax_util.set_xlabel("nodes")
    ax_util.set_ylabel("%")
    ax_util.set_xticks(nodes)
    ax_util.set_ylim(0, 105)
    ax_util.set_title("slot utilisation")
    ax_util.legend(fontsize="x-small")
    for row, sm in enumerate(summaries, start=1):
        ax = fig.add_subplot(grid[row, :])
        samples = wait_samples[sm.nodes]
        data = [samples.get(t) or [0.0] for t in biggest]
        ax.boxplot(data, whis=(5, 95), showfliers=False)
        ax.set_xticks(range(1, len(biggest) + 1), biggest, rotation=30, ha="right", fontsize=8)
        ax.axhline(th.long_wait_s, color="tab:red", linestyle=":", label=f"long wait ({th.long_wait_s:g} s)")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("wait (s, log above 1 s)")
        ax.set_title(f"{sm.nodes} node(s): wait per tenant (box: quartiles, whiskers: p5–p95)\n"
                     f"{sm.report.verdict.removeprefix('VERDICT: ')}", fontsize=9)
        ax.legend(fontsize="x-small", loc="upper right")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    return path
