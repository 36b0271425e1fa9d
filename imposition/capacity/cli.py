"""``imposition simulate`` and ``imposition capacity-report --what-if``.

Bad input (a malformed workload file, an empty history, a node count below 1, a negative rate)
is one line naming the field, exit status 2 (:class:`InputError`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from imposition.capacity.core import Tier
from imposition.capacity.errors import WorkloadError
from imposition.capacity.results import Summary, render, summarise, tier_words, write_png
from imposition.capacity.simulator import POLICIES, ModelParams, simulate
from imposition.capacity.workload import Workload, from_history, load_spec
from imposition.common.settings import get_settings

if TYPE_CHECKING:
    from imposition.observability.capacity import MeasuredWindow


class InputError(click.ClickException):
    """A usage error of the simulator's input: ``Error: <message>``, exit status 2."""

    exit_code = 2


def parse_nodes(text: str, *, field: str = "--nodes") -> list[int]:
    """``"1,2,3"`` → ``[1, 2, 3]`` (sorted, unique).

    Raises:
        InputError: not integers, or one below 1.
    """
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise InputError(f"{field}={text!r}: must be node counts separated by commas, e.g. 1,2,3") from exc
    if not values:
        raise InputError(f"{field}={text!r}: must name at least one node count")
    for n in values:
        if n < 1:
            raise InputError(f"{field}={text!r}: node count {n} must be >= 1")
    return sorted(set(values))


def default_tier(policy: str, cap: int | None = None, burst_cap: int | None = None) -> dict:
    """The tier of tenants without one of their own, and where each number comes from:
    ``{"cap", "cap_source", "burst_cap", "burst_cap_source"}``. ``cap`` is honoured under every
    policy; only ``borrow`` lends above it, up to ``burst_cap`` (default ``sim_borrow_burst_cap``,
    never below the cap); ``burst_cap`` is None under the other policies.

    Raises:
        WorkloadError: a negative cap, a burst cap below the cap, or a burst cap without ``borrow``.
    """
    s = get_settings()
    if cap is not None and cap < 0:
        raise WorkloadError(f"--cap={cap}: must be >= 0")
    tier = {"cap": s.default_cap if cap is None else cap, "cap_source": "default_cap" if cap is None else "--cap",
            "burst_cap": None, "burst_cap_source": None}
    if policy != "borrow":
        if burst_cap is not None:
            raise WorkloadError(f"--burst-cap={burst_cap}: only with --policy borrow (policy {policy} never borrows)")
        return tier
    if burst_cap is not None:
        if burst_cap < tier["cap"]:
            raise WorkloadError(f"--burst-cap={burst_cap}: must be >= the cap ({tier['cap']}, {tier['cap_source']})")
        return {**tier, "burst_cap": burst_cap, "burst_cap_source": "--burst-cap"}
    if s.sim_borrow_burst_cap < tier["cap"]:
        return {**tier, "burst_cap": tier["cap"], "burst_cap_source": "the cap (sim_borrow_burst_cap is below it)"}
    return {**tier, "burst_cap": s.sim_borrow_burst_cap, "burst_cap_source": "sim_borrow_burst_cap"}


def run_nodes(workload: Workload, nodes: list[int], *, policy: str, cap: int | None = None,
              burst_cap: int | None = None, order: str | None = None,
              window: MeasuredWindow | None = None) -> tuple[list[Summary], dict[int, dict[str, list[float]]]]:
    """Simulate ``workload`` once per node count; the summaries and each run's waits per tenant.

    Tenants without a tier of their own get :func:`default_tier`'s (``cap``; under ``borrow`` also
    its burst cap). ``window``: the measured window whose working days and hours to judge over (the
    capacity report's), else the run's own span and the hours set or inferred from its arrivals.

    Raises:
        WorkloadError: as :func:`default_tier` and :func:`imposition.capacity.simulator.simulate`.
    """
    s = get_settings()
    tier = default_tier(policy, cap, burst_cap)
    params = ModelParams.from_settings(s, default_cap=tier["cap"], delivery_order=order)
    tiers = dict(workload.tiers)
    if policy == "borrow":
        tiers = {t: Tier(tier_.cap, tier_.burst_cap if tier_.burst_cap is not None else tier["burst_cap"])
                 for t, tier_ in {**{r[0]: Tier() for r in workload.rows}, **tiers}.items()}
    summaries, samples = [], {}
    for n in nodes:
        run = simulate(workload.jobs(), nodes=n, policy_name=policy, params=params, tiers=tiers,
                       keep_intervals=False)
        summaries.append(summarise(run, s, days=window.days if window else None, hours=window.hours if window else None,
                                   tier=tier))
        waits: dict[str, list[float]] = {}
        for job in run.jobs:
            if job.wait_s is not None:
                waits.setdefault(job.tenant, []).append(job.wait_s)
        samples[n] = waits
    return summaries, samples


def _workload(workload_path: Path | None, from_hist: bool, weeks: int | None) -> tuple[Workload, MeasuredWindow | None]:
    """The workload, and the measured window to judge it over: the capacity report's for
    ``--from-history`` (its days and working hours), None (the run's own span) for a file."""
    if (workload_path is None) == (not from_hist):
        raise InputError("give exactly one of --workload FILE and --from-history (e.g. --workload "
                         "samples/workloads/four-weeks.toml)")
    s = get_settings()
    if workload_path is not None:
        return load_spec(workload_path, job_overhead_s=s.sim_job_overhead_s), None
    from imposition.observability.capacity import ReportWindowError, measured_window  # noqa: PLC0415

    try:
        window = measured_window(weeks=weeks)
    except ReportWindowError as exc:
        raise WorkloadError(f"--weeks: {exc}") from exc
    return from_history(window, weeks=s.capacity_weeks if weeks is None else weeks), window


@click.command("simulate")
@click.option("--workload", "workload_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A workload spec file (TOML; see imposition/capacity/workload.py).")
@click.option("--from-history", "from_hist", is_flag=True, help="Replay the jobs table's arrivals and durations.")
@click.option("--weeks", type=int, default=None, help="History window in weeks (default: capacity_weeks, 4).")
@click.option("--nodes", "nodes_text", default=None,
              help="Node counts to compare, e.g. 1,2,3 (default: the licensed nodes, capacity_nodes, and one more).")
@click.option("--cap", type=int, default=None,
              help="Cap of tenants without a tier (default: default_cap); honoured under every policy.")
@click.option("--burst-cap", type=int, default=None,
              help="With --policy borrow: leases a tenant without a tier may borrow up to (default: "
                   "sim_borrow_burst_cap, at least the cap).")
@click.option("--policy", type=click.Choice(POLICIES), default=None,
              help="Waiting policy (default: waiting_policy); borrow = hand-off with burst caps.")
@click.option("--order", type=click.Choice(["arrival", "fair"]), default=None,
              help="SQS delivery order (default: sim_delivery_order).")
@click.option("--png", "png_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write p95 wait and utilisation against the node count, and the wait distributions.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the text.")
def simulate_command(workload_path, from_hist, weeks, nodes_text, cap, burst_cap, policy, order, png_path,
                     as_json) -> None:
    """Predict each tenant's waits, slot utilisation and the licence verdict for each node count
    (--nodes; by default the licensed nodes and one more: what would a second licence change?).

    Give the load: --workload FILE (a planned load, e.g. samples/workloads/four-weeks.toml) or
    --from-history (the jobs table's last weeks)."""
    s = get_settings()
    policy = policy or s.waiting_policy
    nodes = parse_nodes(nodes_text) if nodes_text is not None else [s.capacity_nodes, s.capacity_nodes + 1]
    try:
        workload, window = _workload(workload_path, from_hist, weeks)
        summaries, samples = run_nodes(workload, nodes, policy=policy, cap=cap, burst_cap=burst_cap, order=order,
                                       window=window)
    except WorkloadError as exc:
        raise InputError(str(exc)) from exc
    if as_json:
        click.echo(json.dumps({"source": workload.source, "policy": policy, **summaries[0].tier,
                               "runs": [sm.as_dict() for sm in summaries]}, indent=2))
    else:
        click.echo(render(summaries, policy=policy, source=workload.source))
    if png_path is not None:
        click.echo(f"chart written to {write_png(summaries, png_path, policy=policy, wait_samples=samples)}",
                   err=as_json)


def parse_what_if(items: tuple[str, ...]) -> dict:
    """``("nodes=2", "cap=3", "burst=6", "policy=borrow")`` → ``{"nodes": [2], "cap": 3, "burst_cap": 6,
    "policy": "borrow"}``.

    Raises:
        InputError: an unknown key or a bad value.
    """
    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--what-if {item!r}: must be KEY=VALUE (nodes=2, cap=3, burst=6, policy=borrow)")
        if key == "nodes":
            out["nodes"] = parse_nodes(value, field="--what-if nodes")
        elif key == "cap":
            if not value.isdigit():
                raise InputError(f"--what-if cap={value!r}: must be an integer >= 0")
            out["cap"] = int(value)
        elif key == "burst":
            if not value.isdigit():
                raise InputError(f"--what-if burst={value!r}: must be an integer >= 0")
            out["burst_cap"] = int(value)
        elif key == "policy":
            if value not in POLICIES:
                raise InputError(f"--what-if policy={value!r}: must be one of {', '.join(POLICIES)}")
            out["policy"] = value
        else:
            raise InputError(f"--what-if {key!r}: unknown; use nodes, cap, burst or policy")
    return out


def _capacity_report_command() -> click.Command:
    """``observability``'s ``capacity-report`` with ``--what-if``: the measured verdict, then the
    simulated one for the same window (and, as a check of the model, for the nodes measured)."""
    from imposition.observability import capacity as measured  # noqa: PLC0415

    base = measured.capacity_report_command

    def callback(what_if: tuple[str, ...], **kwargs) -> None:
        changes = parse_what_if(what_if)
        if not changes:
            return base.callback(**kwargs)
        s = get_settings()
        from zoneinfo import ZoneInfo  # noqa: PLC0415

        until = measured.parse_until(kwargs["until"], ZoneInfo(s.capacity_timezone))
        try:  # one window for both parts: the measured report's jobs, working days and hours
            if kwargs["nodes"] is not None and kwargs["nodes"] < 1:
                raise measured.ReportWindowError(f"nodes={kwargs['nodes']}: must be >= 1")
            window = measured.measured_window(weeks=kwargs["weeks"], until=until)
            report = measured.report_of(window, nodes=kwargs["nodes"])
        except measured.ReportWindowError as exc:
            raise InputError(str(exc)) from exc
        days = window.days
        now_nodes = kwargs["nodes"] or s.capacity_nodes
        policy = changes.get("policy", s.waiting_policy)
        try:
            workload = from_history(window, weeks=kwargs["weeks"] or s.capacity_weeks)
            summaries, _ = run_nodes(workload, sorted({now_nodes, *changes.get("nodes", [now_nodes])}),
                                     policy=policy, cap=changes.get("cap"), burst_cap=changes.get("burst_cap"),
                                     window=window)
        except WorkloadError as exc:
            raise InputError(str(exc)) from exc
        if kwargs["as_json"]:
            click.echo(json.dumps({"measured": report.as_dict(), "what_if": {
                "changes": changes, "policy": policy, "runs": [sm.as_dict() for sm in summaries]}}, indent=2))
        else:
            lines = [measured.render(report), "",
                     f"what-if, simulated on the same window ({len(days)} working days; {workload.source}, "
                     f"policy {policy}, {tier_words(summaries[0].tier)}):"]
            for sm in summaries:
                label = f"{sm.nodes} node(s)" + (" (as measured: the model's check)" if sm.nodes == now_nodes
                                                 and not {"cap", "burst_cap", "policy"} & set(changes) else "")
                worst = max((t.p95_s or 0.0 for t in sm.tenants), default=0.0)
                lines += [f"  {label}: {sm.utilisation_line()}, worst tenant p95 wait {worst:.1f} s",
                          *(f"    {line}" for line in sm.report.condition_lines()), f"    {sm.report.verdict}"]
            click.echo("\n".join(lines))
        if kwargs["png_path"] is not None:
            click.echo(f"chart written to {measured.write_png(report, kwargs['png_path'])}", err=kwargs["as_json"])

    option = click.Option(["--what-if", "what_if"], multiple=True, metavar="KEY=VALUE",
                          help="Add the simulated verdict for a change: nodes=2 (or 2,3), cap=3, burst=6 "
                               "(with policy=borrow), policy=borrow.")
    return click.Command(base.name, callback=callback, params=[*base.params, option], help=base.help)


capacity_report_command = _capacity_report_command()
