"""Prometheus alerting rules and a Grafana dashboard over the metrics of :mod:`imposition.observability.metrics`.

Both are built here from the settings, so every threshold has one home (``Settings.alert_*`` and
``Settings.capacity_*``), and written to the files the repository ships (``python -m
imposition.observability.alerts`` rewrites them; a test fails when they differ from what the defaults give)::

    imposition/observability/prometheus/alerts.yml       rule groups (Prometheus rule-file YAML)
    imposition/observability/grafana/imposition.json     a dashboard (Grafana JSON model, Prometheus data source)

The alerts, by ``severity`` (``page``: someone acts now; ``ticket``: the next working day); when each
fires (for ``alert_for_s`` unless said) is written where :func:`rule_groups` defines it::

    page    ImpositionTenantStarving, ImpositionLeaseRecoveredSustained,
            ImpositionSlotsIdleWhileJobsWait, ImpositionEngineUnavailable, ImpositionClockSkew
    ticket  ImpositionDeadLetterQueueNotEmpty, ImpositionSecondLicenceWarranted

Free slots are ``sum(slots_total) - sum(slots_busy)`` over every imposition node (other nodes export
0). The licence alert needs Prometheus to keep ``capacity_weeks`` of data (``--storage.tsdb.retention.time``;
Prometheus keeps 15 days by default) and counts whole UTC days; ``imposition capacity-report`` is the
authority with working hours and a time zone.
"""

from __future__ import annotations

import json
from pathlib import Path

from imposition.common.clocks import Clocks
from imposition.common.settings import Settings, get_settings

HERE = Path(__file__).resolve().parent
RULES_PATH = HERE / "prometheus" / "alerts.yml"
DASHBOARD_PATH = HERE / "grafana" / "imposition.json"

#: Recording rules the alerts and the dashboard read.
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
            f"(rate(queue_wait_seconds_bucket[{_duration(s.alert_rate_window_s)}])))")


def rule_groups(s: Settings | None = None) -> dict:
    """The rule file's content (``{"groups": [...]}``) for settings ``s`` (default: the process's)."""
    s = s or get_settings()
    window = _duration(s.capacity_weeks * 7 * 86400)
    for_ = _duration(s.alert_for_s)
    long_wait = _le(s.capacity_long_wait_s)
    weekday = "day_of_week(vector(time() - 86400))"  # the day a 1-day window ending at midnight covers
    busy_day = (f"(avg_over_time({UTILISATION}[1d]) > bool {s.capacity_utilisation_threshold}"
                f" and on() ({weekday} >= 1 <= 5))")
    fairness = {
        "name": "imposition-fairness",
        "rules": [
            {"record": SLOTS_FREE, "expr": "sum(slots_total) - sum(slots_busy)"},
            {"record": UTILISATION, "expr": "sum(slots_busy) / sum(slots_total)"},
            # A tenant's p95 queue_wait_seconds over alert_rate_window_s exceeds alert_starving_wait_p95_s
            # while the cluster has free slots.
            {"alert": "ImpositionTenantStarving",
             "expr": f"{starving_wait_expr(s)} > {s.alert_starving_wait_p95_s:g} and on() {SLOTS_FREE} > 0",
             "for": for_, "labels": {"severity": "page"},
             "annotations": {
                 "summary": "Tenant {{ $labels.tenant }} is starving: its p95 queue wait is high while slots are free",
                 "description": f"p95 of queue_wait_seconds over {_duration(s.alert_rate_window_s)} above "
                                f"{s.alert_starving_wait_p95_s:g} s with idle slots. Check `imposition status` "
                                "(cap, waiting, oldest waiting job) and `imposition audit`."}},
            # More than alert_lease_recovered_per_hour leases of one tenant reclaimed within the last
            # hour (workers die under it).
            {"alert": "ImpositionLeaseRecoveredSustained",
             "expr": f"sum by (tenant) (increase(lease_recovered_total[1h])) > {s.alert_lease_recovered_per_hour}",
             "for": for_, "labels": {"severity": "page"},
             "annotations": {
                 "summary": "Leases of tenant {{ $labels.tenant }} keep expiring (reclaimed by the sweeper)",
                 "description": "Workers die or stall while running this tenant's jobs (out of memory, a crash "
                                "loop). See the workers' logs and `imposition jobs list --tenant`."}},
            # A *-dlq queue has visible messages, for alert_dlq_for_s.
            {"alert": "ImpositionDeadLetterQueueNotEmpty",
             "expr": f'max by (queue) (sqs_messages{{queue=~".*{s.dead_letter_suffix}", state="visible"}}) > 0',
             "for": _duration(s.alert_dlq_for_s), "labels": {"severity": "ticket"},
             "annotations": {
                 "summary": "Dead-letter queue {{ $labels.queue }} is not empty",
                 "description": "Look with `imposition dlq list`, put back with `imposition dlq redrive`."}},
            # A worker node's clock is more than Clocks.clock_skew_warn_s (a quarter of the lease
            # TTL) off the sweeper's, either way (leases/skew.py; NaN, a node gone, never fires).
            {"alert": "ImpositionClockSkew",
             "expr": f"abs(max by (worker) (node_clock_skew_seconds)) > {Clocks.from_settings(s).clock_skew_warn_s:g}",
             "for": _duration(2 * s.sweep_interval_s), "labels": {"severity": "page"},
             "annotations": {
                 "summary": "The clock of worker node {{ $labels.worker }} is off the sweeper's by more than "
                            f"{Clocks.from_settings(s).clock_skew_warn_s:g} s",
                 "description": "Leases are written by the holder's clock and judged by the sweeper's: a node "
                                "behind makes its leases look expired (the sweeper holds them by the node's "
                                "clock meanwhile), one ahead makes them outlive a crash. Fix time sync on that "
                                "node and the sweeper's (`chronyc tracking`, `timedatectl`): "
                                "docs/operations.md, \"Clock skew\".",
                 "runbook": "docs/operations.md#clock-skew"}},
            # The imposition queue has visible messages while slots are free (nobody receives them).
            {"alert": "ImpositionSlotsIdleWhileJobsWait",
             "expr": (f'max(sqs_messages{{queue="{s.imposition_queue}", state="visible"}}) > 0'
                      f" and on() {SLOTS_FREE} > 0"),
             "for": for_, "labels": {"severity": "page"},
             "annotations": {
                 "summary": "Job messages wait in the imposition queue while slots are free",
                 "description": "Nobody receives the imposition queue: are the imposition workers up "
                                "(`imposition status`, the workers' logs)?"}},
        ],
    }
    engine = {
        "name": "imposition-engine",
        "rules": [
            # A node's engine check (tasks.engine_gate: the pdfToolbox canary with its licence) failed
            # and stays failed for alert_for_s: the node takes no jobs.
            {"alert": "ImpositionEngineUnavailable",
             "expr": "min by (instance, engine) (engine_ready) < 1",
             "for": for_, "labels": {"severity": "page"},
             "annotations": {
                 "summary": "Node {{ $labels.instance }} takes no jobs: its {{ $labels.engine }} engine or "
                            "licence fails its check",
                 "description": "The node's log says why (tasks.engine_gate: licence, installation, processes "
                                "or engine); engine_check_failures_total counts by reason. Runbook: "
                                "docs/operations.md, \"Engine or licence unavailable\"."}},
        ],
    }
    capacity = {
        "name": "imposition-capacity",
        "interval": "1h",
        "rules": [
            # docs/design.md §8 over capacity_weeks: daily slot utilisation above
            # capacity_utilisation_threshold on more than capacity_busy_day_share_threshold of the
            # working days (Monday–Friday, UTC) and more than capacity_long_wait_share_threshold of
            # jobs waited over capacity_long_wait_s.
            {"alert": "ImpositionSecondLicenceWarranted",
             "expr": (f"avg_over_time({busy_day}[{window}:1d]) > {s.capacity_busy_day_share_threshold}"
                      f" and on() (1 - sum(increase(queue_wait_seconds_bucket{{le=\"{long_wait}\"}}[{window}]))"
                      f" / sum(increase(queue_wait_seconds_count[{window}]))) > {s.capacity_long_wait_share_threshold}"),
             "labels": {"severity": "ticket"},
             "annotations": {
                 "summary": "A second licence is warranted (docs/design.md §8 conditions both hold)",
                 "description": f"Over {s.capacity_weeks} weeks: slot utilisation above "
                                f"{s.capacity_utilisation_threshold:g} on more than "
                                f"{s.capacity_busy_day_share_threshold:g} of working days and more than "
                                f"{s.capacity_long_wait_share_threshold:g} of jobs waited over "
                                f"{s.capacity_long_wait_s:g} s. Confirm with `imposition capacity-report`."}},
        ],
    }
    return {"groups": [fairness, engine, capacity]}


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
        ("Slots: busy, total, free", [("sum(slots_busy)", "busy"), ("sum(slots_total)", "total"),
                                      (SLOTS_FREE, "free")], "short"),
        ("Slot utilisation", [(UTILISATION, "utilisation")], "percentunit"),
        ("Leases held by tenant", [("sum by (tenant) (leases_held)", "{{tenant}}")], "short"),
        ("Queue wait p95 by tenant", [(starving_wait_expr(s), "{{tenant}}")], "s"),
        ("Parked (waiting) jobs by tenant", [("max by (tenant) (jobs_waiting)", "{{tenant}}")], "short"),
        ("Cap deferrals per minute by tenant", [(f"sum by (tenant) (rate(cap_defer_total[{w}])) * 60", "{{tenant}}")],
         "short"),
        ("Leases recovered in the last hour by tenant",
         [("sum by (tenant) (increase(lease_recovered_total[1h]))", "{{tenant}}")], "short"),
        ("Jobs per minute by outcome", [(f"sum by (outcome) (rate(jobs_total[{w}])) * 60", "{{outcome}}")], "short"),
        ("Hand-offs per minute by reason", [(f"sum by (reason) (rate(handoffs_total[{w}])) * 60", "{{reason}}")],
         "short"),
        ("SQS messages by queue and state", [("max by (queue, state) (sqs_messages)", "{{queue}} {{state}}")],
         "short"),
        ("Dead-letter queues (visible)",
         [(f'max by (queue) (sqs_messages{{queue=~".*{s.dead_letter_suffix}", state="visible"}})', "{{queue}}")],
         "short"),
        ("Poison messages per minute", [(f"sum by (queue, reason) (rate(poison_messages_total[{w}])) * 60",
                                         "{{queue}} {{reason}}")], "short"),
        ("Clock skew of each worker node against the sweeper",
         [("max by (worker) (node_clock_skew_seconds)", "{{worker}}")], "s"),
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


def prometheus_config(targets: dict[str, str], s: Settings | None = None) -> dict:
    """A Prometheus server configuration scraping ``targets`` (node name → ``host:port`` of its
    metrics endpoint) every ``Settings.prometheus_scrape_interval_s`` and loading :data:`RULES_PATH`
    (``make run``); the rules are evaluated as often as the nodes are scraped."""
    s = s or get_settings()
    interval = _duration(s.prometheus_scrape_interval_s)
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(RULES_PATH)],
        "scrape_configs": [{"job_name": "imposition", "static_configs": [
            {"targets": [target], "labels": {"node": node}} for node, target in sorted(targets.items())]}],
    }


def write_prometheus_config(path: Path, targets: dict[str, str], s: Settings | None = None) -> Path:
    """Write :func:`prometheus_config` to ``path`` (YAML); return ``path``."""
    import yaml  # noqa: PLC0415

    path.write_text(yaml.safe_dump(prometheus_config(targets, s), sort_keys=False))
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
