"""Prometheus alerting rules and a Grafana dashboard over the metrics of :mod:`imposition.observability.metrics`.

Both are built here from the settings, so every threshold has one home (``Settings.alert_*`` and
``Settings.capacity_*``), and written to the files the repository ships (``python -m
imposition.observability.alerts`` rewrites them; a test fails when they differ from what the defaults give)::

    imposition/observability/prometheus/alerts.yml       rule groups (Prometheus rule-file YAML)
    imposition/observability/grafana/imposition.json     a dashboard (Grafana JSON model, Prometheus data source)

The alerts, by ``severity`` (``page``: someone acts now; ``ticket``: the next working day); when each
fires (for ``alert_for_s`` unless said) is written where :func:`rule_groups` defines it, and each
carries a ``runbook_url`` annotation, :func:`runbook_url`: ``Settings.runbook_base_url`` +
``/operations.md#<alert name in lower case>``, its subsection under "Alerts" in docs/operations.md,
an absolute link a page can follow (a test checks every one exists)::

    page    ImpositionTenantStarving, ImpositionLeaseRecoveredSustained,
            ImpositionSlotsIdleWhileJobsWait, ImpositionWorkersDown, ImpositionEngineUnavailable,
            ImpositionClockSkew, ImpositionSweepsStopped
    ticket  ImpositionDeadLetterQueueNotEmpty, ImpositionWorkerNodeDown,
            ImpositionSecondLicenceWarranted

Slots count 0 when no imposition node exports any (``or on() vector(0)``), so that no worker up
still pages; workers down reads ``up`` of :data:`SCRAPE_JOB`/:data:`IMPOSER_ROLE` through
``absent()``. The licence alert reads ``alert_capacity_window_days`` (14), within Prometheus'
default 15-day retention; ``imposition capacity-report`` is the authority over ``capacity_weeks``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from imposition.common.clocks import Clocks
from imposition.common.settings import Settings, get_settings

HERE = Path(__file__).resolve().parent
RULES_PATH = HERE / "prometheus" / "alerts.yml"
DASHBOARD_PATH = HERE / "grafana" / "imposition.json"

#: Recording rules the alerts and the dashboard read.
SLOTS = "imposition:slots"
SLOTS_FREE = "imposition:slots_free"
UTILISATION = "imposition:slot_utilisation:ratio"


def _duration(seconds: float) -> str:
    """A Prometheus duration (``90s``, ``15m``, ``28d``) for ``seconds``."""
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _le(bound_s: float) -> str:
    """The ``le`` label value prometheus-client writes for a bucket bound (``180.0``)."""
    from prometheus_client.utils import floatToGoString  # noqa: PLC0415 (only when building rules)

    return floatToGoString(bound_s)


def starving_wait_expr(s: Settings) -> str:
    """p95 queue wait of each tenant over the rate window (seconds), by ``tenant``."""
    return (f"histogram_quantile(0.95, sum by (tenant, le) "
            f"(rate(imposition_queue_wait_seconds_bucket[{_duration(s.alert_rate_window_s)}])))")


#: The scrape job of the worker nodes' endpoints and the ``role`` label of the imposition nodes
#: (:func:`prometheus_config`; a deployment's own scrape configuration must give the same).
SCRAPE_JOB = "imposition"
IMPOSER_ROLE = "imposer"


def runbook_anchor(alert: str) -> str:
    """The anchor of ``alert``'s runbook: its subsection ``### <alert>`` under "Alerts" in
    docs/operations.md (GitHub's heading anchor: the name in lower case)."""
    return alert.lower()


def runbook_url(s: Settings, alert: str) -> str:
    """The address of ``alert``'s runbook: ``Settings.runbook_base_url`` + ``/operations.md#<anchor>``
    (also the CloudWatch alarms' runbooks, :mod:`imposition.cli.template`)."""
    return f"{s.runbook_base_url}/operations.md#{runbook_anchor(alert)}"


def _annotated(rule: dict, s: Settings) -> dict:
    """``rule`` with its ``runbook_url`` annotation (:func:`runbook_url`)."""
    rule["annotations"]["runbook_url"] = runbook_url(s, rule["alert"])
    return rule


#: The sweeper's heartbeat: when it last completed a sweep (:mod:`imposition.observability.metrics`).
LAST_SWEEP = "imposition_sweeper_last_sweep_timestamp_seconds"


def sweeps_stopped_rule(s: Settings) -> dict:
    """ImpositionSweepsStopped: no sweep completed for ``Clocks.sweep_overdue_after_s`` (twice
    ``sweep_interval_s``), or none at all since the maintenance worker's metrics began (absent), held
    as long again: beat stopped sending sweeps, or the maintenance worker stopped running them."""
    overdue_s = Clocks.from_settings(s).sweep_overdue_after_s
    return {"alert": "ImpositionSweepsStopped",
            "expr": f"time() - max({LAST_SWEEP}) > {overdue_s:g} or on() absent({LAST_SWEEP})",
            "for": _duration(overdue_s), "labels": {"severity": "page"},
            "annotations": {
                "summary": f"The sweeper has completed no sweep for over {overdue_s:g} s",
                "description": "Without sweeps, a crashed worker's leases hold their slots, lost hand-offs and "
                               "lost messages are never brought back. Check celery beat (its /healthz, its log: "
                               "does it send imposition.sweep?) and the maintenance worker (does it run it, or "
                               "does every sweep fail?)."}}


def rule_groups(s: Settings | None = None) -> dict:
    """The rule file's content (``{"groups": [...]}``) for settings ``s`` (default: the process's).

    Raises:
        ValueError: (from the settings) a capacity window the assumed Prometheus retention does not hold.
    """
    s = s or get_settings()
    window = _duration(s.alert_capacity_window_days * 86400)
    for_ = _duration(s.alert_for_s)
    long_wait = _le(s.capacity_long_wait_s)
    weekday = "day_of_week(vector(time() - 86400))"  # the day a 1-day window ending at midnight covers
    busy_day = (f"(avg_over_time({UTILISATION}[1d]) > bool {s.capacity_utilisation_threshold}"
                f" and on() ({weekday} >= 1 <= 5))")
    imposers_up = f'up{{job="{SCRAPE_JOB}", role="{IMPOSER_ROLE}"}}'
    fairness = {
        "name": "imposition-fairness",
        "rules": [
            # No imposition node exports its slots (none is up): 0 slots, not an empty vector, so
            # that the rules below still compare.
            {"record": SLOTS, "expr": "sum(imposition_node_slots) or on() vector(0)"},
            {"record": SLOTS_FREE, "expr": f"{SLOTS} - (sum(imposition_slots_busy) or on() vector(0))"},
            {"record": UTILISATION, "expr": f"sum(imposition_slots_busy) / ({SLOTS} > 0)"},
            # A tenant's p95 imposition_queue_wait_seconds over alert_rate_window_s exceeds
            # alert_starving_wait_p95_s while the cluster has free slots.
            {"alert": "ImpositionTenantStarving",
             "expr": f"{starving_wait_expr(s)} > {s.alert_starving_wait_p95_s:g} and on() {SLOTS_FREE} > 0",
             "for": for_, "labels": {"severity": "page"},
             "annotations": {
                 "summary": "Tenant {{ $labels.tenant }} is starving: its p95 queue wait is high while slots are free",
                 "description": f"p95 of imposition_queue_wait_seconds over {_duration(s.alert_rate_window_s)} "
                                f"above {s.alert_starving_wait_p95_s:g} s with idle slots. Check `imposition status` "
                                "(cap, waiting, oldest waiting job) and `imposition audit`."}},
            # More than alert_lease_recovered_per_hour leases of one tenant reclaimed within the last
            # hour (workers die under it).
            {"alert": "ImpositionLeaseRecoveredSustained",
             "expr": (f"sum by (tenant) (increase(imposition_leases_recovered_total[1h])) > "
                      f"{s.alert_lease_recovered_per_hour}"),
             "for": for_, "labels": {"severity": "page"},
             "annotations": {
                 "summary": "Leases of tenant {{ $labels.tenant }} keep expiring (reclaimed by the sweeper)",
                 "description": "Workers die or stall while running this tenant's jobs (out of memory, a crash "
                                "loop). See the workers' logs and `imposition jobs list --tenant`."}},
            # A *-dlq queue has visible messages, for alert_dlq_for_s.
            {"alert": "ImpositionDeadLetterQueueNotEmpty",
             "expr": (f'max by (queue) (imposition_sqs_messages{{queue=~".*{s.dead_letter_suffix}", '
                      f'state="visible"}}) > 0'),
             "for": _duration(s.alert_dlq_for_s), "labels": {"severity": "ticket"},
             "annotations": {
                 "summary": "Dead-letter queue {{ $labels.queue }} is not empty",
                 "description": "Look with `imposition dlq list`, put back with `imposition dlq redrive`."}},
            # A worker node's clock is more than Clocks.clock_skew_warn_s (a quarter of the lease
            # TTL) off the sweeper's, either way (leases/skew.py; NaN, a node gone, never fires).
            {"alert": "ImpositionClockSkew",
             "expr": f"abs(max by (worker) (imposition_node_clock_skew_seconds)) > {Clocks.from_settings(s).clock_skew_warn_s:g}",
             "for": _duration(2 * s.sweep_interval_s), "labels": {"severity": "page"},
             "annotations": {
                 "summary": "The clock of worker node {{ $labels.worker }} is off the sweeper's by more than "
                            f"{Clocks.from_settings(s).clock_skew_warn_s:g} s",
                 "description": "Leases are written by the holder's clock and judged by the sweeper's: a node "
                                "behind makes its leases look expired (the sweeper holds them by the node's "
                                "clock meanwhile), one ahead makes them outlive a crash. Fix time sync on that "
                                "node and the sweeper's (`chronyc tracking`, `timedatectl`): "
                                "docs/operations.md#impositionclockskew."}},
            # The imposition queue has visible messages while slots are free, or while there are no
            # slots at all (no imposition node up): nobody receives them.
            {"alert": "ImpositionSlotsIdleWhileJobsWait",
             "expr": (f'max(imposition_sqs_messages{{queue="{s.imposition_queue}", state="visible"}}) > 0'
                      f" and on() ({SLOTS_FREE} > 0 or on() {SLOTS} == 0)"),
             "for": for_, "labels": {"severity": "page"},
             "annotations": {
                 "summary": "Job messages wait in the imposition queue while slots are free (or no slot is up)",
                 "description": "Nobody receives the imposition queue: are the imposition workers up "
                                "(`imposition status`, the workers' logs, their /healthz)?"}},
            # No imposition node's endpoint scraped up (every one down, or none configured), for
            # alert_workers_down_for_s: up == 0 on each, or no up series at all (absent()).
            {"alert": "ImpositionWorkersDown",
             "expr": f"absent({imposers_up} == 1)",
             "for": _duration(s.alert_workers_down_for_s), "labels": {"severity": "page"},
             "annotations": {
                 "summary": "No imposition worker is up: no job can start",
                 "description": f"No target of scrape job {SCRAPE_JOB} with role {IMPOSER_ROLE} answered its "
                                "scrape (or there is none). Check the worker units or containers and their logs."}},
            sweeps_stopped_rule(s),
            # One worker node's endpoint (any role) not scraped up for alert_workers_down_for_s.
            {"alert": "ImpositionWorkerNodeDown",
             "expr": f'up{{job="{SCRAPE_JOB}"}} == 0',
             "for": _duration(s.alert_workers_down_for_s), "labels": {"severity": "ticket"},
             "annotations": {
                 "summary": "Worker node {{ $labels.node }} ({{ $labels.role }}) does not answer its scrape",
                 "description": "The process is down, its /healthz fails, or the network drops the scrape; "
                                "the other nodes carry its work."}},
        ],
    }
    engine = {
        "name": "imposition-engine",
        "rules": [
            # A node's engine check (tasks.engine_gate: the pdfToolbox canary with its licence) failed
            # and stays failed for alert_for_s: the node takes no jobs.
            {"alert": "ImpositionEngineUnavailable",
             "expr": "min by (instance, engine) (imposition_engine_ready) < 1",
             "for": for_, "labels": {"severity": "page"},
             "annotations": {
                 "summary": "Node {{ $labels.instance }} takes no jobs: its {{ $labels.engine }} engine or "
                            "licence fails its check",
                 "description": "The node's log says why (tasks.engine_gate: licence, installation, processes "
                                "or engine); imposition_engine_check_failures_total counts by reason. Runbook: "
                                "docs/operations.md#impositionengineunavailable."}},
        ],
    }
    capacity = {
        "name": "imposition-capacity",
        "interval": "1h",
        "rules": [
            # docs/design.md §8 over alert_capacity_window_days (within the default retention):
            # daily slot utilisation above capacity_utilisation_threshold on more than
            # capacity_busy_day_share_threshold of the working days (Monday–Friday, UTC) and more
            # than capacity_long_wait_share_threshold of jobs waited over capacity_long_wait_s.
            {"alert": "ImpositionSecondLicenceWarranted",
             "expr": (f"avg_over_time({busy_day}[{window}:1d]) > {s.capacity_busy_day_share_threshold}"
                      f" and on() (1 - sum(increase(imposition_queue_wait_seconds_bucket{{le=\"{long_wait}\"}}"
                      f"[{window}])) / sum(increase(imposition_queue_wait_seconds_count[{window}])))"
                      f" > {s.capacity_long_wait_share_threshold}"),
             "labels": {"severity": "ticket"},
             "annotations": {
                 "summary": "A second licence is warranted (docs/design.md §8 conditions both hold)",
                 "description": f"Over {s.alert_capacity_window_days} days: slot utilisation above "
                                f"{s.capacity_utilisation_threshold:g} on more than "
                                f"{s.capacity_busy_day_share_threshold:g} of working days and more than "
                                f"{s.capacity_long_wait_share_threshold:g} of jobs waited over "
                                f"{s.capacity_long_wait_s:g} s. Confirm with `imposition capacity-report` "
                                f"({s.capacity_weeks} weeks, working hours)."}},
        ],
    }
    groups: list[dict[str, Any]] = [fairness, engine, capacity]
    for group in groups:
        group["rules"] = [_annotated(r, s) if "alert" in r else r for r in group["rules"]]
    return {"groups": groups}


def alert_names(s: Settings | None = None) -> list[str]:
    """Every alert of :func:`rule_groups`, in file order."""
    return [r["alert"] for g in rule_groups(s)["groups"] for r in g["rules"] if "alert" in r]


def render_rules(s: Settings | None = None) -> str:
    """The rule file as YAML text."""
    import yaml  # noqa: PLC0415 (only when writing the file)

    header = "# Generated by `python -m imposition.observability.alerts` from imposition/common/settings.py; do not edit by hand.\n"
    return header + yaml.safe_dump(rule_groups(s), sort_keys=False, width=120, allow_unicode=True)


def _panel(panel_id: int, title: str, targets: list[tuple[str, str]], *, x: int, y: int, unit: str = "short") -> dict:
    return {
        "id": panel_id, "type": "timeseries", "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                     "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                    for i, (expr, legend) in enumerate(targets)],
    }


def dashboard(s: Settings | None = None) -> dict:
    """The Grafana dashboard (JSON model) over the same metrics as the alerts."""
    s = s or get_settings()
    w = _duration(s.alert_rate_window_s)
    rows = [
        ("Slots: busy, total, free", [("sum(imposition_slots_busy)", "busy"), (SLOTS, "total"),
                                      (SLOTS_FREE, "free")], "short"),
        ("Slot utilisation", [(UTILISATION, "utilisation")], "percentunit"),
        ("Leases held by tenant", [("sum by (tenant) (imposition_leases_held)", "{{tenant}}")], "short"),
        ("Queue wait p95 by tenant", [(starving_wait_expr(s), "{{tenant}}")], "s"),
        ("Parked (waiting) jobs by tenant", [("max by (tenant) (imposition_jobs_waiting)", "{{tenant}}")], "short"),
        ("Cap deferrals per minute by tenant", [(f"sum by (tenant) (rate(imposition_cap_defers_total[{w}])) * 60", "{{tenant}}")],
         "short"),
        ("Leases recovered in the last hour by tenant",
         [("sum by (tenant) (increase(imposition_leases_recovered_total[1h]))", "{{tenant}}")], "short"),
        ("Jobs per minute by outcome", [(f"sum by (outcome) (rate(imposition_jobs_total[{w}])) * 60", "{{outcome}}")], "short"),
        ("Hand-offs per minute by reason", [(f"sum by (reason) (rate(imposition_handoffs_total[{w}])) * 60", "{{reason}}")],
         "short"),
        ("SQS messages by queue and state", [("max by (queue, state) (imposition_sqs_messages)", "{{queue}} {{state}}")],
         "short"),
        ("Dead-letter queues (visible)",
         [(f'max by (queue) (imposition_sqs_messages{{queue=~".*{s.dead_letter_suffix}", state="visible"}})', "{{queue}}")],
         "short"),
        ("Poison messages per minute", [(f"sum by (queue, reason) (rate(imposition_poison_messages_total[{w}])) * 60",
                                         "{{queue}} {{reason}}")], "short"),
        ("Clock skew of each worker node against the sweeper",
         [("max by (worker) (imposition_node_clock_skew_seconds)", "{{worker}}")], "s"),
        ("Seconds since the sweeper's last sweep", [(f"time() - max({LAST_SWEEP})", "since the last sweep")], "s"),
    ]
    panels = [_panel(i + 1, title, targets, x=12 * (i % 2), y=8 * (i // 2), unit=unit)
              for i, (title, targets, unit) in enumerate(rows)]
    return {
        "uid": "imposition-fairness", "title": "Imposition: fairness, slots and queues",
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "tags": ["imposition"],
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0}]},
        "annotations": {"list": []},
        "panels": panels,
    }


def dashboard_exprs(board: dict) -> list[str]:
    """Every PromQL expression of a dashboard's panels."""
    return [target["expr"] for panel in board["panels"] for target in panel["targets"]]


def prometheus_config(targets: dict[str, str], s: Settings | None = None,
                      roles: dict[str, str] | None = None) -> dict:
    """A Prometheus server configuration scraping ``targets`` (node name → ``host:port`` of its
    metrics endpoint) every ``Settings.prometheus_scrape_interval_s`` as scrape job
    :data:`SCRAPE_JOB`, each target labelled ``node`` and ``role`` (``roles[node]``, default the node
    name; the imposition nodes' role is :data:`IMPOSER_ROLE`, which ImpositionWorkersDown reads), and
    loading :data:`RULES_PATH` (``make run``); the rules are evaluated as often as the nodes are scraped."""
    s = s or get_settings()
    roles = roles or {}
    interval = _duration(s.prometheus_scrape_interval_s)
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(RULES_PATH)],
        "scrape_configs": [{"job_name": SCRAPE_JOB, "static_configs": [
            {"targets": [target], "labels": {"node": node, "role": roles.get(node, node)}}
            for node, target in sorted(targets.items())]}],
    }


def write_prometheus_config(path: Path, targets: dict[str, str], s: Settings | None = None,
                            roles: dict[str, str] | None = None) -> Path:
    """Write :func:`prometheus_config` to ``path`` (YAML); return ``path``."""
    import yaml  # noqa: PLC0415

    path.write_text(yaml.safe_dump(prometheus_config(targets, s, roles), sort_keys=False))
    return path


def write_files(s: Settings | None = None) -> list[Path]:
    """Write :data:`RULES_PATH` and :data:`DASHBOARD_PATH`; return both paths."""
    RULES_PATH.parent.mkdir(parents=True, exist_ok=True)
    DASHBOARD_PATH.parent.mkdir(parents=True, exist_ok=True)
    RULES_PATH.write_text(render_rules(s))
    DASHBOARD_PATH.write_text(json.dumps(dashboard(s), indent=2) + "\n")
    return [RULES_PATH, DASHBOARD_PATH]


if __name__ == "__main__":
    for path in write_files():
        print(f"wrote {path}")
