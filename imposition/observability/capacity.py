"""``imposition capacity-report``: is a second press-tool licence warranted? (docs/design.md §8)

The seed's rule, every threshold a setting:

    warranted  ⇔  utilisation > ``capacity_utilisation_threshold`` (80 %) on more than
                  ``capacity_busy_day_share_threshold`` (half) of the working days
              and  more than ``capacity_long_wait_share_threshold`` (20 %) of the jobs waited
                  longer than ``capacity_long_wait_s`` (3 min),
                  both in the same window (``capacity_weeks``, 4 weeks).

The verdict names each condition with its value against its threshold, whether it held and by how
much, and what the rule concludes from the pair (:attr:`CapacityReport.verdict`). Both figures come
from the job items (:func:`compute_report` defines them), over the working days of the window, in
the shop's working hours (:class:`WorkingHours`): the hours set (``capacity_day_start_hour``,
``capacity_day_end_hour``) or, left unset, inferred from the arrivals (:func:`infer_hours`), and the
report says which. Counting a day-shift shop's idle night as working time would halve its
utilisation and the condition could hardly ever hold. The PNG (matplotlib, no display needed) plots
the daily utilisation against the utilisation line and the daily share of long waits against the
share line.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo

import click

from imposition.observability.errors import ReportWindowError
from leases.models import JobStatus
from imposition.observability.history import JobTimes, jobs_submitted, tenant_ids, wait_s
from imposition.common.settings import Settings, get_settings

#: Monday..Friday as ``date.weekday()`` numbers.
WORKING_WEEKDAYS = frozenset(range(5))
_DAY_S = 86_400


@dataclass(frozen=True)
class Thresholds:
    """The rule's numbers (fractions 0–1 and seconds)."""

    utilisation: float
    busy_day_share: float
    long_wait_s: float
    long_wait_share: float

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> "Thresholds":
        """The configured thresholds."""
        s = settings or get_settings()
        return cls(s.capacity_utilisation_threshold, s.capacity_busy_day_share_threshold, s.capacity_long_wait_s,
                   s.capacity_long_wait_share_threshold)


#: Where a report's working hours came from (:attr:`WorkingHours.source`).
HOURS_SET, HOURS_INFERRED, HOURS_WHOLE_DAY = "set", "inferred", "whole_day"


@dataclass(frozen=True)
class WorkingHours:
    """The hours of a working day (Monday–Friday, ``start_hour`` to ``end_hour`` in ``timezone``) that
    utilisation is counted over, and where they came from: ``set`` (the settings),
    ``inferred`` (from ``arrivals`` job submissions, :func:`infer_hours`) or ``whole_day`` (unset,
    and no arrival to infer them from)."""

    start_hour: int
    end_hour: int
    timezone: str
    source: str
    arrivals: int = 0

    def span(self) -> str:
        """``Mon–Fri 07:00–17:00 UTC``."""
        return f"Mon–Fri {self.start_hour:02d}:00–{self.end_hour:02d}:00 {self.timezone}"

    def label(self) -> str:
        """The span and where it came from, as every figure "in working hours" says it."""
        if self.source == HOURS_SET:
            return f"{self.span()}, the shop's hours as set"
        if self.source == HOURS_INFERRED:
            return (f"{self.span()}, inferred from {self.arrivals:,} arrivals: the shop's hours are unset "
                    "(IMPOSITION_CAPACITY_DAY_START_HOUR, _END_HOUR)")
        return (f"{self.span()}, the whole day: the shop's hours are unset "
                "(IMPOSITION_CAPACITY_DAY_START_HOUR, _END_HOUR) and no arrival to infer them from")

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return {**asdict(self), "label": self.label()}


def infer_hours(submitted_at: Iterable[float], *, tz: ZoneInfo, share: float) -> tuple[int, int, int] | None:
    """``(start_hour, end_hour, arrivals)``: the shortest span of whole hours (``0 <= start < end <=
    24``, the earliest of equals) holding at least ``share`` of the arrivals (epoch s) that fall on
    working days (Monday–Friday in ``tz``), and how many those are; None if there are none. A night
    shift across midnight is not inferred: set the hours."""
    counts = [0] * 24
    for at in submitted_at:
        moment = dt.datetime.fromtimestamp(float(at), tz)
        if moment.weekday() in WORKING_WEEKDAYS:
            counts[moment.hour] += 1
    total = sum(counts)
    if not total:
        return None
    need = share * total
    best = (0, 24)
    for start in range(24):
        held = 0
        for end in range(start + 1, 25):
            held += counts[end - 1]
            if held >= need:
                if end - start < best[1] - best[0]:
                    best = (start, end)
                break
    return best[0], best[1], total


def working_hours(submitted_at: Iterable[float], settings: Settings | None = None) -> WorkingHours:
    """The working hours of a report: the settings' if set, else inferred from ``submitted_at``
    (:func:`infer_hours`), else the whole day."""
    s = settings or get_settings()
    if s.capacity_day_start_hour is not None and s.capacity_day_end_hour is not None:
        return WorkingHours(s.capacity_day_start_hour, s.capacity_day_end_hour, s.capacity_timezone, HOURS_SET)
    inferred = infer_hours(submitted_at, tz=ZoneInfo(s.capacity_timezone), share=s.capacity_inferred_hours_share)
    if inferred is None:
        return WorkingHours(0, 24, s.capacity_timezone, HOURS_WHOLE_DAY)
    start, end, arrivals = inferred
    return WorkingHours(start, end, s.capacity_timezone, HOURS_INFERRED, arrivals)


@dataclass(frozen=True)
class DayUsage:
    """One working day: occupied and available slot-seconds, jobs submitted and long waits."""

    day: dt.date
    busy_slot_s: float
    capacity_slot_s: float
    jobs: int
    long_waits: int

    @property
    def utilisation(self) -> float:
        """Occupied share of the day's slot-seconds (0–1)."""
        return self.busy_slot_s / self.capacity_slot_s if self.capacity_slot_s > 0 else 0.0

    @property
    def long_wait_share(self) -> float:
        """Share of the day's measured jobs that waited long (0 with no jobs)."""
        return self.long_waits / self.jobs if self.jobs else 0.0


@dataclass(frozen=True)
class CapacityReport:
    """The report over ``[window_start, window_end)`` (epoch s); see the module docstring."""

    window_start: float
    window_end: float
    slots_total: int
    thresholds: Thresholds
    days: list[DayUsage] = field(default_factory=list)
    #: The hours the days were counted in (None: as given by whoever built the days).
    hours: WorkingHours | None = None
    #: Licensed nodes the slots total stands for (None: one): the verdict asks about one more.
    nodes: int | None = None

    @property
    def licence(self) -> str:
        """The licence the verdict is about: ``a second licence`` (one node now), else ``a licence
        for node 3`` and so on."""
        n = self.nodes or 1
        return "a second licence" if n == 1 else f"a licence for node {n + 1}"

    @property
    def jobs(self) -> int:
        """Working-day jobs with a measurable wait."""
        return sum(d.jobs for d in self.days)

    @property
    def long_waits(self) -> int:
        """Of those, jobs that waited longer than the threshold."""
        return sum(d.long_waits for d in self.days)

    @property
    def busy_days(self) -> int:
        """Working days whose utilisation exceeds the threshold."""
        return sum(1 for d in self.days if d.utilisation > self.thresholds.utilisation)

    @property
    def busy_day_share(self) -> float:
        """``busy_days`` / working days (0 with none)."""
        return self.busy_days / len(self.days) if self.days else 0.0

    @property
    def long_wait_share(self) -> float:
        """``long_waits`` / ``jobs`` (0 with none)."""
        return self.long_waits / self.jobs if self.jobs else 0.0

    @property
    def utilisation_condition(self) -> bool:
        """Busy on more than the threshold share of working days."""
        return self.busy_day_share > self.thresholds.busy_day_share

    @property
    def wait_condition(self) -> bool:
        """More than the threshold share of jobs waited long."""
        return self.long_wait_share > self.thresholds.long_wait_share

    @property
    def warranted(self) -> bool:
        """Both conditions in this window: a second licence is warranted."""
        return self.utilisation_condition and self.wait_condition

    def condition_lines(self) -> list[str]:
        """One line per condition: its value against its threshold, whether it holds and by how much."""
        th = self.thresholds
        return [
            f"busy slots: utilisation above {th.utilisation:.0%} on {self.busy_days} of {len(self.days)} working "
            f"days, {percent(self.busy_day_share)}; the rule needs more than {th.busy_day_share:.0%}: "
            f"{_held(self.busy_day_share, th.busy_day_share)}",
            f"long waits: {self.long_waits:,} of {self.jobs:,} jobs waited over {th.long_wait_s:g} s, "
            f"{percent(self.long_wait_share)}; the rule needs more than {th.long_wait_share:.0%}: "
            f"{_held(self.long_wait_share, th.long_wait_share)}",
        ]

    @property
    def verdict(self) -> str:
        """The conclusion the rule draws from the two conditions, each named with its value."""
        th = self.thresholds
        busy = f"busy slots on {percent(self.busy_day_share)} of working days (needs more than {th.busy_day_share:.0%})"
        waits = f"long waits for {percent(self.long_wait_share)} of jobs (needs more than {th.long_wait_share:.0%})"
        refused = f"VERDICT: no {self.licence.removeprefix('a ')}"
        if self.warranted:
            return f"VERDICT: {self.licence} is warranted: both conditions hold in the same window, {busy} and {waits}"
        if self.wait_condition:
            return (f"{refused}. The rule needs both conditions; only the long-wait condition holds: {waits}, but "
                    f"{busy}. Jobs waited while slots were free, so not for slots: for their tenant's cap or in a "
                    "transient burst (see each tenant's waits; a cap or borrowing is the lever, not a licence)")
        if self.utilisation_condition:
            return (f"{refused}. The rule needs both conditions; only the utilisation condition holds: {busy}, but "
                    f"{waits}. The slots are busy and keep up: waits stay short")
        return f"{refused}: neither condition holds, {busy}, {waits}"

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return {
            "window_start": self.window_start, "window_end": self.window_end, "slots_total": self.slots_total,
            "thresholds": asdict(self.thresholds),
            "days": [{"day": d.day.isoformat(), "utilisation": d.utilisation, "busy_slot_s": d.busy_slot_s,
                      "capacity_slot_s": d.capacity_slot_s, "jobs": d.jobs, "long_waits": d.long_waits,
                      "long_wait_share": d.long_wait_share} for d in self.days],
            "busy_days": self.busy_days, "busy_day_share": self.busy_day_share, "jobs": self.jobs,
            "long_waits": self.long_waits, "long_wait_share": self.long_wait_share,
            "utilisation_condition": self.utilisation_condition, "wait_condition": self.wait_condition,
            "warranted": self.warranted, "verdict": self.verdict,
            "working_hours": self.hours.as_dict() if self.hours is not None else None,
        }


def percent(share: float) -> str:
    """A share (0–1) as a percentage, small non-zero ones not shown as 0 (``<0.1 %``)."""
    return "<0.1%" if 0 < share < 0.0005 else f"{share:.1%}".replace(".0%", "%")


def _held(value: float, threshold: float) -> str:
    """``holds (31 points above)`` or ``does not hold (35 points below)``: the condition ``value >
    threshold`` and its distance in percentage points."""
    points = abs(value - threshold) * 100
    distance = f"{points:.0f}" if points >= 1 else f"{points:.1f}"
    if value > threshold:
        return f"holds ({distance} points above)"
    return "does not hold (at the threshold: it needs more)" if value == threshold else \
        f"does not hold ({distance} points below)"


@dataclass(frozen=True)
class WorkingDay:
    """A working day's bounds (epoch s) in the report's time zone."""

    day: dt.date
    start: float
    end: float


def working_days(first: dt.date, last: dt.date, *, tz: ZoneInfo, start_hour: int, end_hour: int,
                 until: float) -> list[WorkingDay]:
    """Monday–Friday from ``first`` to ``last`` (inclusive), each cut at ``until`` (days after it dropped)."""
    out = []
    day = first
    while day <= last:
        if day.weekday() in WORKING_WEEKDAYS:
            start = dt.datetime.combine(day, dt.time(start_hour), tzinfo=tz).timestamp()
            end_day = day + dt.timedelta(days=1) if end_hour == 24 else day
            end = dt.datetime.combine(end_day, dt.time(end_hour % 24), tzinfo=tz).timestamp()
            end = min(end, until)
            if end > start:
                out.append(WorkingDay(day, start, end))
        day += dt.timedelta(days=1)
    return out


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def compute_report(jobs: Iterable[JobTimes], *, days: list[WorkingDay], tz: ZoneInfo, slots_total: int,
                   now: float, thresholds: Thresholds, hours: WorkingHours | None = None,
                   nodes: int | None = None) -> CapacityReport:
    """The report for ``jobs`` over the working ``days`` (pure: no I/O).

    * **slot utilisation of a working day** (Monday–Friday in ``capacity_timezone``, in the working
      hours ``days`` were cut to: ``hours``, kept on the report) = slot-seconds occupied by jobs
      (``[started_at, finished_at)``, a running job up to ``now``) ÷ (``slots_total`` × the day's
      length; today's length only up to now). The command's slots total is ``capacity_nodes ×
      slots_per_node``. A job item keeps only its last attempt's times, so earlier attempts of
      retried jobs are not counted: the figure can only be low, never high.
    * **long waits**: the share of the window's working-day jobs whose queue wait
      (:func:`imposition.observability.history.wait_s`) exceeds ``capacity_long_wait_s``. A job still queued
      counts once it has waited that long; one that has not yet is left out (undecided).

    A job's run counts towards every day it overlaps; its wait counts on the calendar day (in
    ``tz``) it was submitted, if that is one of ``days``.

    Raises:
        ReportWindowError: ``slots_total`` < 1.
    """
    if slots_total < 1:
        raise ReportWindowError(f"slots_total={slots_total}: must be >= 1 (capacity_nodes × slots_per_node)")
    index = {d.day: i for i, d in enumerate(days)}
    ends = [d.end for d in days]  # ascending: the days are in calendar order
    busy = [0.0] * len(days)
    measured = [0] * len(days)
    long_waits = [0] * len(days)
    for job in jobs:
        if job.started_at is not None:
            run_start = float(job.started_at)
            finished_at = job.finished_at
            run_end = float(finished_at) if finished_at is not None and float(finished_at) >= run_start else now
            i = bisect.bisect_right(ends, run_start)  # the first day ending after the run starts
            while i < len(days) and days[i].start < run_end:
                busy[i] += _overlap(run_start, run_end, days[i].start, days[i].end)
                i += 1
        day = index.get(dt.datetime.fromtimestamp(float(job.submitted_at), tz).date())
        wait = wait_s(job, now)
        if day is None or wait is None:
            continue
        if wait > thresholds.long_wait_s:
            measured[day] += 1
            long_waits[day] += 1
        elif not _still_waiting(job):
            measured[day] += 1  # a job still waiting, not yet long, is undecided
    usage = [DayUsage(d.day, busy[i], slots_total * (d.end - d.start), measured[i], long_waits[i])
             for i, d in enumerate(days)]
    return CapacityReport(days[0].start if days else now, days[-1].end if days else now, slots_total,
                          thresholds, usage, hours, nodes)


def _still_waiting(job: JobTimes) -> bool:
    return JobStatus(job.status).is_pending and int(job.attempts or 0) == 0


# --- reading the window, the command ---------------------------------------------------------------


def window_dates(weeks: int, until: float, tz: ZoneInfo) -> tuple[dt.date, dt.date]:
    """The first and last calendar day of the ``weeks`` × 7 days ending with the day of ``until``.

    Raises:
        ReportWindowError: ``weeks`` < 1.
    """
    if weeks < 1:
        raise ReportWindowError(f"weeks={weeks}: must be >= 1")
    last = dt.datetime.fromtimestamp(until, tz).date()
    return last - dt.timedelta(days=7 * weeks - 1), last


@dataclass(frozen=True)
class MeasuredWindow:
    """What the measured report and its simulated replay (``--what-if``, ``simulate
    --from-history``) share: the job items read, the working hours, the working days in them, and
    the window's end (epoch s)."""

    jobs: list
    hours: WorkingHours
    days: list[WorkingDay]
    end: float


def load_jobs(start: float, end: float) -> list:
    """Job items of every tenant submitted in ``[start − 1 day, end)``: a job submitted the day
    before the window may still have run inside it."""
    return [job for tenant in tenant_ids() for job in jobs_submitted(tenant, start - _DAY_S, end)]


def measured_window(*, weeks: int | None = None, until: float | None = None,
                    settings: Settings | None = None) -> MeasuredWindow:
    """Read the window's job items once (``weeks``, default ``capacity_weeks``, ending with the day of
    ``until``, at most now) and find its working hours (:func:`working_hours`, from the arrivals
    inside the window) and working days.

    Raises:
        ReportWindowError: ``weeks`` < 1.
        pynamodb.exceptions.PynamoDBException: DynamoDB refused a read.
    """
    s = settings or get_settings()
    tz = ZoneInfo(s.capacity_timezone)
    end = time.time() if until is None else min(until, time.time())
    first, last = window_dates(s.capacity_weeks if weeks is None else weeks, end, tz)
    start = dt.datetime.combine(first, dt.time(0), tzinfo=tz).timestamp()
    jobs = load_jobs(start, end)
    hours = working_hours((float(j.submitted_at) for j in jobs if float(j.submitted_at) >= start), s)
    days = working_days(first, last, tz=tz, start_hour=hours.start_hour, end_hour=hours.end_hour, until=end)
    return MeasuredWindow(jobs, hours, days, end)


def report_of(window: MeasuredWindow, *, nodes: int | None = None, settings: Settings | None = None) -> CapacityReport:
    """The report of a :class:`MeasuredWindow` for ``nodes`` licensed nodes (default ``capacity_nodes``).

    Raises:
        ReportWindowError: ``nodes`` below 1.
    """
    s = settings or get_settings()
    n = s.capacity_nodes if nodes is None else nodes
    if n < 1:
        raise ReportWindowError(f"nodes={n}: must be >= 1")
    return compute_report(window.jobs, days=window.days, tz=ZoneInfo(s.capacity_timezone),
                          slots_total=n * s.slots_per_node, now=window.end, thresholds=Thresholds.from_settings(s),
                          hours=window.hours, nodes=n)


def build_report(*, weeks: int | None = None, until: float | None = None, nodes: int | None = None,
                 settings: Settings | None = None) -> CapacityReport:
    """Read the job items and compute the report (defaults from the settings; ``until`` now).

    Raises:
        ReportWindowError: ``weeks`` or ``nodes`` below 1.
        pynamodb.exceptions.PynamoDBException: DynamoDB refused a read.
    """
    s = settings or get_settings()
    if nodes is not None and nodes < 1:  # before reading four weeks of jobs
        raise ReportWindowError(f"nodes={nodes}: must be >= 1")
    return report_of(measured_window(weeks=weeks, until=until, settings=s), nodes=nodes, settings=s)


def render(report: CapacityReport) -> str:
    """The text form: one line per working day, the two conditions, the verdict."""
    th = report.thresholds
    hours = report.hours.label() if report.hours is not None else "working hours as given"
    lines = [f"capacity report: {len(report.days)} working days, {report.slots_total} slots",
             f"  working hours: {hours}",
             f"  {'day':10} {'util':>6} {'jobs':>6} {'long waits':>10}"]
    for d in report.days:
        mark = "*" if d.utilisation > th.utilisation else " "
        lines.append(f"  {d.day.isoformat():10} {d.utilisation:>6.1%}{mark}{d.jobs:>5} "
                     f"{d.long_waits:>5} ({d.long_wait_share:.0%})")
    lines.append(f"  (* = utilisation above {th.utilisation:.0%})")
    lines += ["", *report.condition_lines(), "", report.verdict]
    return "\n".join(lines)


def write_png(report: CapacityReport, path: Path) -> Path:
    """Plot daily utilisation (bars, with the utilisation line) and the daily share of long waits
    (bars, with the share line) to ``path`` (PNG); returns ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 (heavy import)
    from matplotlib.figure import Figure  # noqa: PLC0415 - heavy import, only for the PNG

    th = report.thresholds
    labels = [d.day.strftime("%a %d %b") for d in report.days]
    x = list(range(len(report.days)))
    fig = Figure(figsize=(max(8.0, 0.45 * len(x) + 2), 7), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    util = [100 * d.utilisation for d in report.days]
    top.bar(x, util, color=["tab:red" if u > 100 * th.utilisation else "tab:blue" for u in util])
    top.axhline(100 * th.utilisation, color="black", linestyle="--", label=f"{th.utilisation:.0%} utilisation")
    top.set_ylim(0, max([105.0, *(u + 5 for u in util)]))
    top.set_ylabel("slot utilisation (%)")
    top.set_title(f"busy days: {report.busy_days} of {len(report.days)} "
                  f"({'holds' if report.utilisation_condition else 'does not hold'})")
    top.legend(loc="upper right")
    share = [100 * d.long_wait_share for d in report.days]
    bottom.bar(x, share, color=["tab:red" if v > 100 * th.long_wait_share else "tab:green" for v in share])
    bottom.axhline(100 * th.long_wait_share, color="black", linestyle="--",
                   label=f"{th.long_wait_share:.0%} of jobs")
    bottom.set_ylim(0, 105)
    bottom.set_ylabel(f"jobs waiting > {th.long_wait_s:g} s (%)")
    bottom.set_title(f"long waits: {report.long_waits} of {report.jobs} jobs, {report.long_wait_share:.0%} "
                     f"({'holds' if report.wait_condition else 'does not hold'})")
    bottom.legend(loc="upper right")
    bottom.set_xticks(x, labels, rotation=60, ha="right", fontsize=8)
    fig.suptitle(report.verdict.removeprefix("VERDICT: "), fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def parse_until(value: dt.datetime | None, tz: ZoneInfo) -> float | None:
    """``--until`` (a day) as the epoch second its day ends in ``tz``; None stays None."""
    if value is None:
        return None
    day_end = dt.datetime.combine(value.date() + dt.timedelta(days=1), dt.time(0), tzinfo=tz)
    return day_end.timestamp()


@click.command("capacity-report")
@click.option("--weeks", type=int, default=None, help="Window in weeks (default: capacity_weeks, 4).")
@click.option("--png", "png_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the daily chart to this PNG file.")
@click.option("--until", type=click.DateTime(formats=["%Y-%m-%d"]), default=None,
              help="Last day of the window, YYYY-MM-DD (default: today, up to now).")
@click.option("--nodes", type=int, default=None, help="Licensed nodes (default: capacity_nodes).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the text.")
def capacity_report_command(weeks: int | None, png_path: Path | None, until: dt.datetime | None,
                            nodes: int | None, as_json: bool) -> None:
    """Slot utilisation per working day, long waits, and whether a second licence is warranted."""
    tz = ZoneInfo(get_settings().capacity_timezone)
    try:
        report = build_report(weeks=weeks, until=parse_until(until, tz), nodes=nodes)
    except ReportWindowError as exc:
        raise click.BadParameter(str(exc)) from exc
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else render(report))
    if png_path is not None:
        click.echo(f"chart written to {write_png(report, png_path)}", err=as_json)
