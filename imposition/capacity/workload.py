"""Workloads for the simulator: a spec file (TOML) or the jobs table's history.

A spec file (every number checked; an error names its field)::

    start = "2026-11-02T00:00:00Z"   # optional: the first day (a Monday by default, UTC)
    seed = 1                         # optional: random draws are repeatable

    [[tenants]]
    name = "acme"
    cap = 4                          # optional tier: the cap (default: the service's default cap)
    burst_cap = 8                    # optional: borrowing under --policy borrow
    failure_rate = 0.02              # optional: share of attempts that fail (retried)
    arrivals = { pattern = "poisson", rate_per_h = 120, from_h = 8, for_h = 10, days = 20 }
    #          { pattern = "burst", count = 100, at_s = 0 }
    #          { pattern = "replay", at_s = [0, 1.5, 3] }
    duration = { distribution = "lognormal", median_s = 30, sigma = 0.5 }
    #          { distribution = "fixed", s = 30 } | { distribution = "exponential", mean_s = 30 }
    #          | { distribution = "uniform", min_s = 10, max_s = 60 }

Poisson arrivals run ``for_h`` hours from ``from_h`` o'clock on each of ``days`` working days
(Monday–Friday) from ``start``; burst and replay times are seconds after ``start``. The engine's
durations are drawn from ``duration``; each job holds its lease for that plus
``sim_job_overhead_s``. From history, each job's lease time is its measured ``finished_at −
started_at`` and its arrival its ``submitted_at`` (jobs read as the capacity report reads them).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from imposition.capacity.core import Tier
from imposition.capacity.errors import WorkloadError
from imposition.capacity.simulator import SimJob

if TYPE_CHECKING:
    from imposition.observability.capacity import MeasuredWindow

DEFAULT_START = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)  # a Monday


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Poisson(_Spec):
    pattern: Literal["poisson"]
    rate_per_h: float = Field(gt=0)
    from_h: float = Field(default=0, ge=0, lt=24)
    for_h: float = Field(default=24, gt=0, le=24)
    days: int = Field(default=1, ge=1, le=366)


class Burst(_Spec):
    pattern: Literal["burst"]
    count: int = Field(ge=1, le=10_000_000)
    at_s: float = Field(default=0, ge=0)


class Replay(_Spec):
    pattern: Literal["replay"]
    at_s: list[Annotated[float, Field(ge=0)]] = Field(min_length=1)


class Fixed(_Spec):
    distribution: Literal["fixed"]
    s: float = Field(gt=0)


class Exponential(_Spec):
    distribution: Literal["exponential"]
    mean_s: float = Field(gt=0)


class LogNormal(_Spec):
    distribution: Literal["lognormal"]
    median_s: float = Field(gt=0)
    sigma: float = Field(default=0.5, ge=0, le=5)


class Uniform(_Spec):
    distribution: Literal["uniform"]
    min_s: float = Field(gt=0)
    max_s: float = Field(gt=0)


class TenantSpec(_Spec):
    name: str = Field(min_length=1, max_length=64)
    cap: int | None = Field(default=None, ge=0)
    burst_cap: int | None = Field(default=None, ge=1)
    failure_rate: float = Field(default=0.0, ge=0, lt=1)
    arrivals: Annotated[Union[Poisson, Burst, Replay], Field(discriminator="pattern")]
    duration: Annotated[Union[Fixed, Exponential, LogNormal, Uniform], Field(discriminator="distribution")]


class WorkloadSpec(_Spec):
    start: dt.datetime = DEFAULT_START
    seed: int = 1
    tenants: list[TenantSpec] = Field(min_length=1)

    @field_validator("start")
    @classmethod
    def _aware(cls, value: dt.datetime) -> dt.datetime:
        return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)


@dataclass
class Workload:
    """Jobs to simulate (fresh per run: :meth:`jobs`) and the tenants' tiers."""

    rows: list[tuple[str, float, float, int]]  # tenant, submitted_at (epoch s), lease s, failed attempts
    tiers: dict[str, Tier]
    source: str

    def jobs(self) -> list[SimJob]:
        """New :class:`SimJob` objects for one run."""
        return [SimJob(t, at, hold, fails) for t, at, hold, fails in self.rows]


def _field(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _draw_duration(d, rng: random.Random) -> float:
    if isinstance(d, Fixed):
        return d.s
    if isinstance(d, Exponential):
        return rng.expovariate(1.0 / d.mean_s)
    if isinstance(d, LogNormal):
        return rng.lognormvariate(math.log(d.median_s), d.sigma)
    return rng.uniform(d.min_s, d.max_s)


def _arrivals(a, start: dt.datetime, rng: random.Random) -> list[float]:
    t0 = start.timestamp()
    if isinstance(a, Burst):
        return [t0 + a.at_s] * a.count
    if isinstance(a, Replay):
        return [t0 + s for s in a.at_s]
    out: list[float] = []
    day, used = start.date(), 0
    while used < a.days:
        if day.weekday() < 5:
            begin = dt.datetime.combine(day, dt.time(0), tzinfo=start.tzinfo).timestamp() + a.from_h * 3600
            t, end = begin, begin + a.for_h * 3600
            while True:
                t += rng.expovariate(a.rate_per_h / 3600)
                if t >= end:
                    break
                out.append(t)
            used += 1
        day += dt.timedelta(days=1)
    return out


def from_spec(spec: WorkloadSpec, *, job_overhead_s: float, source: str = "spec") -> Workload:
    """Draw the jobs of a parsed spec (repeatable: ``spec.seed``)."""
    rng = random.Random(spec.seed)
    rows, tiers = [], {}
    for t in spec.tenants:
        if isinstance(t.duration, Uniform) and t.duration.min_s > t.duration.max_s:
            raise WorkloadError(f"{source}: tenants.{t.name}.duration.min_s={t.duration.min_s:g}: must be <= "
                                f"max_s={t.duration.max_s:g}")
        tiers[t.name] = Tier(cap=t.cap, burst_cap=t.burst_cap)
        for at in _arrivals(t.arrivals, spec.start, rng):
            fails = 0
            while t.failure_rate and rng.random() < t.failure_rate:
                fails += 1
            rows.append((t.name, at, _draw_duration(t.duration, rng) + job_overhead_s, fails))
    if not rows:
        raise WorkloadError(f"{source}: the arrivals produce no job")
    return Workload(rows, tiers, source)


def load_spec(path: Path, *, job_overhead_s: float) -> Workload:
    """Read and check a TOML spec file.

    Raises:
        WorkloadError: unreadable, not TOML, or a field breaks its rule (the message names it).
    """
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the workload file: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{path}: not a valid TOML workload file: {exc}") from exc
    try:
        spec = WorkloadSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        raise WorkloadError(f"{path}: {_field(err['loc'])}: {err['msg']}{shown}") from exc
    names = [t.name for t in spec.tenants]
    if len(set(names)) != len(names):
        raise WorkloadError(f"{path}: tenants.name: each tenant once (repeated: "
                            f"{sorted({n for n in names if names.count(n) > 1})})")
    return from_spec(spec, job_overhead_s=job_overhead_s, source=str(path))


def from_jobs(jobs, tiers: dict[str, Tier], *, source: str) -> Workload:
    """A workload from job items (or anything with :class:`imposition.observability.history.JobTimes`'s
    fields): arrivals at ``submitted_at``, lease time ``finished_at − started_at`` (a job with
    none, still waiting or running, gets its tenant's median, else everyone's), and ``attempts − 1``
    failed attempts for a job that ran more than once.

    Raises:
        WorkloadError: no jobs, or no job with a measured lease time.
    """
    jobs = list(jobs)
    if not jobs:
        raise WorkloadError(f"{source}: no job in the window (nothing to simulate)")
    holds: dict[str, list[float]] = {}
    for j in jobs:
        if j.started_at is not None and j.finished_at is not None and float(j.finished_at) >= float(j.started_at):
            holds.setdefault(j.tenant_id, []).append(float(j.finished_at) - float(j.started_at))
    every = [h for hs in holds.values() for h in hs]
    if not every:
        raise WorkloadError(f"{source}: no job in the window has finished (no duration to replay)")
    medians = {t: statistics.median(hs) for t, hs in holds.items()}
    overall = statistics.median(every)
    rows = []
    for j in jobs:
        measured = (float(j.finished_at) - float(j.started_at)
                    if j.started_at is not None and j.finished_at is not None
                    and float(j.finished_at) >= float(j.started_at) else None)
        hold = measured if measured is not None else medians.get(j.tenant_id, overall)
        rows.append((j.tenant_id, float(j.submitted_at), hold, max(0, int(j.attempts or 0) - 1)))
    return Workload(rows, tiers, source)


def from_history(window: MeasuredWindow, *, weeks: int) -> Workload:
    """The jobs of a measured window (:func:`imposition.observability.capacity.measured_window`: the
    capacity report's window and reads, every tenant) with the tenants' tiers from the tenants table.

    Raises:
        WorkloadError: no job in the window.
        pynamodb.exceptions.PynamoDBException: DynamoDB refused a read.
    """
    from leases.models import TenantItem  # noqa: PLC0415 (the simulator itself needs no AWS)

    tiers = {t.tenant_id: Tier(cap=None if t.cap is None else int(t.cap),
                               burst_cap=None if t.burst_cap is None else int(t.burst_cap))
             for t in TenantItem.scan(attributes_to_get=["tenant_id", "cap", "burst_cap"])}
    return from_jobs(window.jobs, tiers, source=f"history ({weeks} weeks)")
