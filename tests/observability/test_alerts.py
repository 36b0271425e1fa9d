"""The shipped alerting rules and dashboard (:mod:`imposition.observability.alerts`): ``promtool test rules`` on
series built from the settings' thresholds, each alert firing on series that cross its threshold
and quiet on series just below; the files in the repository are what the defaults give.

promtool comes from Debian's ``prometheus`` package, which ``make test`` installs; without it these
tests are skipped with that reason (never passed silently).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package 'prometheus'; `make test` installs it): "
                             "the alert rules were NOT tested")


def _settings():
    from imposition.common.settings import get_settings

    return get_settings()


def _promtool(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _run_tests(tmp_path: Path, evaluation_interval: str, tests: list[dict], rules: Path | None = None) -> None:
    """``promtool test rules`` of ``tests`` on ``rules`` (default: the shipped rule file)."""
    from imposition.observability.alerts import RULES_PATH

    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [str(rules or RULES_PATH)], "evaluation_interval": evaluation_interval,
                                    "tests": tests}, sort_keys=False))
    _promtool("test", "rules", str(path))


def _annotations(name: str, labels: dict) -> dict:
    """The annotations of alert ``name`` as Prometheus renders them for ``labels`` (they template
    only ``$labels``)."""
    from imposition.observability.alerts import rule_groups

    rule = next(r for g in rule_groups()["groups"] for r in g["rules"] if r.get("alert") == name)
    out = {}
    for key, text in rule["annotations"].items():
        for label, value in labels.items():
            text = text.replace("{{ $labels.%s }}" % label, value)
        out[key] = text
    return out


def _alert(name: str, at: str, *fired: dict) -> dict:
    """An ``alert_rule_test``: ``name`` at ``at`` fires exactly with the label sets ``fired`` (none: quiet)."""
    return {"eval_time": at, "alertname": name,
            "exp_alerts": [{"exp_labels": labels, "exp_annotations": _annotations(name, labels)} for labels in fired]}


def _series(name: str, labels: dict, values: str) -> dict:
    shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{shown}}}", "values": values}


def _slots(total: int, busy: int, minutes: int) -> list[dict]:
    return [_series("imposition_node_slots", {"instance": "imposer"}, f"{total}x{minutes}"),
            _series("imposition_slots_busy", {"instance": "imposer"}, f"{busy}x{minutes}")]


def _waits(tenant: str, lower_s: float, upper_s: float, per_min: int, minutes: int) -> list[dict]:
    """Histogram series of ``tenant``: ``per_min`` jobs a minute, every wait in (``lower_s``, ``upper_s``]."""
    from imposition.observability.alerts import _le

    bounds = [*_settings().queue_wait_buckets_s, float("inf")]
    out = []
    for bound in bounds:
        step = per_min if bound >= upper_s else 0
        out.append(_series("imposition_queue_wait_seconds_bucket", {"tenant": tenant, "le": _le(bound) if bound != float("inf")
                                                         else "+Inf"}, f"0+{step}x{minutes}"))
    assert lower_s in bounds and upper_s in bounds
    return out


def test_the_shipped_files_are_what_the_settings_give_and_promtool_accepts_them(monkeypatch):
    from imposition.common.settings import Settings
    from imposition.observability.alerts import DASHBOARD_PATH, RULES_PATH, dashboard, render_rules

    for name in [name for name in os.environ if name.startswith("IMPOSITION_")]:  # the defaults, not the
        monkeypatch.delenv(name)  # session's short clocks (the clock-skew rule is a quarter of the lease TTL)
    defaults = Settings()
    assert RULES_PATH.read_text() == render_rules(defaults), "run `python -m imposition.observability.alerts` and commit the files"
    assert json.loads(DASHBOARD_PATH.read_text()) == dashboard(defaults)
    if PROMTOOL is None:
        pytest.skip("promtool not installed: `promtool check rules` not run")
    assert "SUCCESS: 13 rules found" in _promtool("check", "rules", str(RULES_PATH)).stdout


@needs_promtool
def test_every_dashboard_query_parses_and_names_only_metrics_the_service_exports(tmp_path):
    from imposition.observability.alerts import dashboard, dashboard_exprs, rule_groups

    exprs = dashboard_exprs(dashboard())
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": expr} for i, expr in enumerate(exprs)]}]}))
    _promtool("check", "rules", str(path))
    exported = {"imposition_slots_busy", "imposition_node_slots", "imposition_leases_held",
                "imposition_queue_wait_seconds_bucket", "imposition_jobs_waiting", "imposition_cap_defers_total",
                "imposition_leases_recovered_total", "imposition_jobs_total", "imposition_handoffs_total",
                "imposition_sqs_messages", "imposition_poison_messages_total", "imposition_queue_wait_seconds_count",
                "up", "imposition_engine_ready", "imposition_node_clock_skew_seconds",
                "imposition_sweeper_last_sweep_timestamp_seconds"}
    recorded = {rule["record"] for group in rule_groups()["groups"] for rule in group["rules"] if "record" in rule}
    import re

    for expr in exprs + [r["expr"] for g in rule_groups()["groups"] for r in g["rules"]]:
        names = set(re.findall(r"\b([a-z_:]+)(?=\{|\[|\)|\s*$|\s*[-/*+>])", expr))
        names -= {"sum", "max", "rate", "increase", "by", "on", "and", "bool", "avg_over_time", "histogram_quantile",
                  "day_of_week", "vector", "time", "tenant", "le", "outcome", "reason", "queue", "state",
                  "absent", "or", "job", "role", "min", "instance", "engine", "abs", "worker"}
        assert names <= exported | recorded, (expr, names - exported - recorded)


@needs_promtool
def test_fairness_alerts_fire_past_their_thresholds_and_stay_quiet_just_below(tmp_path):
    from imposition.observability.alerts import _duration

    s = _settings()
    threshold = s.alert_starving_wait_p95_s
    bounds = list(s.queue_wait_buckets_s)
    below, above = bounds[bounds.index(threshold) - 1], bounds[bounds.index(threshold) + 1]
    minutes = (s.alert_rate_window_s + s.alert_for_s) // 60 + 10
    at = _duration(minutes * 60 - 60)
    late = _duration(s.alert_for_s + 3600 + 600)
    hours = (s.alert_for_s + 3600 + 600) // 60 + 2
    n = s.alert_lease_recovered_per_hour
    page = {"severity": "page"}
    _run_tests(tmp_path, "1m", [
        {"interval": "1m",  # p95 just past the threshold (starved) and just below it (fine), slots free
         "input_series": [*_slots(8, 4, minutes), *_waits("starved", threshold, above, 10, minutes),
                          *_waits("fine", below, threshold, 10, minutes)],
         "alert_rule_test": [_alert("ImpositionTenantStarving", at, {**page, "tenant": "starved"})]},
        {"interval": "1m",  # the same waits with every slot busy: no starving, the cap or the load
         "input_series": [*_slots(8, 8, minutes), *_waits("starved", threshold, above, 10, minutes)],
         "alert_rule_test": [_alert("ImpositionTenantStarving", at)]},
        {"interval": "1m",  # (n + 1) recoveries an hour for one tenant, n - 1 for another
         "input_series": [_series("imposition_leases_recovered_total", {"tenant": "crashy", "instance": "maint"},
                                  f"0+{(n + 1) / 60}x{hours}"),
                          _series("imposition_leases_recovered_total", {"tenant": "steady", "instance": "maint"},
                                  f"0+{(n - 1) / 60}x{hours}")],
         "alert_rule_test": [_alert("ImpositionLeaseRecoveredSustained", late, {**page, "tenant": "crashy"})]},
        {"interval": "1m",  # one DLQ holds a message, one is empty, one held it for less than the "for"
         "input_series": [
             _series("imposition_sqs_messages", {"queue": "imposition-dlq", "state": "visible"}, f"1x{minutes}"),
             _series("imposition_sqs_messages", {"queue": "notifications-dlq", "state": "visible"}, f"0x{minutes}"),
             _series("imposition_sqs_messages", {"queue": "maintenance-dlq", "state": "visible"},
                     f"0x{minutes - s.alert_dlq_for_s // 60 + 1} 1x{s.alert_dlq_for_s // 60 - 2}"),
             _series("imposition_sqs_messages", {"queue": "imposition", "state": "visible"}, f"3x{minutes}")],
         "alert_rule_test": [_alert("ImpositionDeadLetterQueueNotEmpty", at,
                                    {"severity": "ticket", "queue": "imposition-dlq"})]},
        {"interval": "1m",  # messages visible, 1 slot free: idle slots while jobs wait
         "input_series": [*_slots(8, 7, minutes),
                          _series("imposition_sqs_messages", {"queue": "imposition", "state": "visible"}, f"1x{minutes}")],
         "alert_rule_test": [_alert("ImpositionSlotsIdleWhileJobsWait", at, page)]},
        {"interval": "1m",  # messages visible but every slot busy; or slots free and no message
         "input_series": [*_slots(8, 8, minutes),
                          _series("imposition_sqs_messages", {"queue": "imposition", "state": "visible"}, f"5x{minutes}")],
         "alert_rule_test": [_alert("ImpositionSlotsIdleWhileJobsWait", at)]},
        {"interval": "1m",
         "input_series": [*_slots(8, 0, minutes),
                          _series("imposition_sqs_messages", {"queue": "imposition", "state": "visible"}, f"0x{minutes}")],
         "alert_rule_test": [_alert("ImpositionSlotsIdleWhileJobsWait", at)]},
    ])


@needs_promtool
def test_a_node_whose_engine_check_fails_pages_once_it_has_failed_for_the_for_time(tmp_path):
    from imposition.observability.alerts import _duration

    s = _settings()
    for_min = s.alert_for_s // 60
    minutes = for_min + 10
    at = _duration((minutes - 1) * 60)
    closed = {"instance": "imposer1", "engine": "pdftoolbox"}
    _run_tests(tmp_path, "1m", [
        {"interval": "1m",  # closed from the start; closed for one minute less than the "for"; always open
         "input_series": [_series("imposition_engine_ready", closed, f"0x{minutes}"),
                          _series("imposition_engine_ready", {"instance": "imposer2", "engine": "pdftoolbox"},
                                  f"1x{minutes - for_min + 1} 0x{for_min - 2}"),
                          _series("imposition_engine_ready", {"instance": "imposer3", "engine": "pdftoolbox"}, f"1x{minutes}")],
         "alert_rule_test": [_alert("ImpositionEngineUnavailable", at, {"severity": "page", **closed})]},
    ])


@needs_promtool
def test_the_second_licence_alert_needs_both_conditions_each_just_crossed(tmp_path):
    from imposition.observability.alerts import _le

    s = _settings()
    hours = (s.alert_capacity_window_days + 1) * 24 + 1
    at = f"{s.alert_capacity_window_days + 1}d"
    assert s.alert_capacity_window_days < 15  # within Prometheus' default retention
    busy = round(s.capacity_utilisation_threshold * 100) + 2  # of 100 slots, on every day
    idle = round(s.capacity_utilisation_threshold * 100) - 1
    long_share_above = s.capacity_long_wait_share_threshold + 0.02
    long_share_below = s.capacity_long_wait_share_threshold - 0.02

    def scene(busy_slots: int, long_share: float) -> list[dict]:
        short = round(100 * (1 - long_share))
        return [
            _series("imposition_node_slots", {"instance": "imposer"}, f"100x{hours}"),
            _series("imposition_slots_busy", {"instance": "imposer"}, f"{busy_slots}x{hours}"),
            _series("imposition_queue_wait_seconds_bucket", {"tenant": "acme", "le": _le(s.capacity_long_wait_s)},
                    f"0+{short}x{hours}"),
            _series("imposition_queue_wait_seconds_count", {"tenant": "acme"}, f"0+100x{hours}"),
        ]

    name = "ImpositionSecondLicenceWarranted"
    _run_tests(tmp_path, "1h", [
        {"interval": "1h", "input_series": scene(busy, long_share_above),
         "alert_rule_test": [_alert(name, at, {"severity": "ticket"})]},
        {"interval": "1h", "input_series": scene(idle, long_share_above),  # utilisation just below
         "alert_rule_test": [_alert(name, at)]},
        {"interval": "1h", "input_series": scene(busy, long_share_below),  # long waits just below
         "alert_rule_test": [_alert(name, at)]},
    ])


@pytest.mark.skipif(not Path("/usr/bin/prometheus").exists(),
                    reason="Debian's prometheus server not installed (`make test` installs it): not tested")
def test_make_runs_prometheus_scrapes_every_node_endpoint_and_loads_the_rules(tmp_path):
    """The server ``make run`` starts (its command and configuration), against two real node endpoints."""
    import urllib.request

    from imposition.observability.alerts import write_prometheus_config
    from imposition.observability.exporter import start_endpoint
    from devstack.stack import PROMETHEUS_READY, ManagedProcess, prometheus_command, wait_for
    from tests.observability.support import free_port
    from tests.observability.test_exporter import writer

    endpoints, targets = [], {}
    for node in ("imposer", "maintenance"):
        folder = tmp_path / node
        folder.mkdir()
        writer(folder, 2, stay=False).wait()  # a finished child's counts, as a node would hold them
        server, _ = start_endpoint(0, "127.0.0.1", str(folder))
        endpoints.append(server)
        targets[node] = f"127.0.0.1:{server.server_port}"
    config = write_prometheus_config(tmp_path / "prometheus.yml", targets)
    port = free_port()
    prometheus = ManagedProcess(prometheus_command(config, tmp_path / "data", port, retention="35d"),
                                tmp_path / "prometheus.log", ready_marker=PROMETHEUS_READY, ready_timeout_s=60)
    api = f"http://127.0.0.1:{port}/api/v1"

    def get(path: str) -> dict:
        with urllib.request.urlopen(api + path, timeout=5) as answer:
            return json.loads(answer.read())["data"]

    try:
        groups = {g["name"]: [r["name"] for r in g["rules"]] for g in get("/rules")["groups"]}
        assert "ImpositionTenantStarving" in groups["imposition-fairness"]
        assert groups["imposition-capacity"] == ["ImpositionSecondLicenceWarranted"]
        wait_for(lambda: [t for t in get("/targets")["activeTargets"] if t["health"] == "up"] and
                 len([t for t in get("/targets")["activeTargets"] if t["health"] == "up"]) == 2,
                 60, interval_s=1, what="both node endpoints scraped")
        scraped = wait_for(lambda: get("/query?query=jobs_total")["result"], 60, interval_s=1, what="jobs_total")
        up = wait_for(lambda: get('/query?query=up{job="imposition"}')["result"], 60, interval_s=1, what="up")
        assert {(u["metric"]["node"], u["metric"]["role"]) for u in up} == {("imposer", "imposer"),
                                                                            ("maintenance", "maintenance")}
        assert {s["metric"]["node"] for s in scraped} == {"imposer", "maintenance"}
        assert {s["value"][1] for s in scraped} == {"1"}
    finally:
        prometheus.stop()
        for server in endpoints:
            server.shutdown()


def _up(node: str, role: str, values: str) -> dict:
    return _series("up", {"job": "imposition", "node": node, "role": role}, values)


@needs_promtool
def test_no_imposition_worker_up_fires_workers_down_and_idle_slots_and_one_up_keeps_them_quiet(tmp_path):
    """The issue's case: 50 messages visible for 25 minutes and no imposition worker up. Its nodes'
    gauges are gone (stale), so only ``up`` (0) or nothing at all says so: both must page."""
    s = _settings()
    minutes = 25
    at = _duration_m(minutes - 1)
    down_for_m = s.alert_workers_down_for_s // 60
    waiting = _series("imposition_sqs_messages", {"queue": s.imposition_queue, "state": "visible"}, f"50x{minutes}")
    page = {"severity": "page"}
    _run_tests(tmp_path, "1m", [
        {"interval": "1m",  # the imposer's target is down (up 0); the maintenance node is up
         "input_series": [waiting, _up("imposer-1", "imposer", f"0x{minutes}"),
                          _up("maintenance", "maintenance", f"1x{minutes}")],
         "alert_rule_test": [_alert("ImpositionWorkersDown", at, page),
                             _alert("ImpositionSlotsIdleWhileJobsWait", at, page),
                             _alert("ImpositionWorkerNodeDown", at,
                                    {"severity": "ticket", "job": "imposition", "node": "imposer-1", "role": "imposer"})]},
        {"interval": "1m",  # no imposition target at all (absent), nothing else scraped either
         "input_series": [waiting],
         "alert_rule_test": [_alert("ImpositionWorkersDown", at, page),
                             _alert("ImpositionSlotsIdleWhileJobsWait", at, page),
                             _alert("ImpositionWorkerNodeDown", at)]},
        {"interval": "1m",  # one of two imposers up with every slot busy: the load, not an outage
         "input_series": [waiting, _up("imposer-1", "imposer", f"0x{minutes}"),
                          _up("imposer-2", "imposer", f"1x{minutes}"), *_slots(8, 8, minutes)],
         "alert_rule_test": [_alert("ImpositionWorkersDown", at),
                             _alert("ImpositionSlotsIdleWhileJobsWait", at),
                             _alert("ImpositionWorkerNodeDown", at,
                                    {"severity": "ticket", "job": "imposition", "node": "imposer-1", "role": "imposer"})]},
        {"interval": "1m",  # the imposer came back just under the "for" ago: quiet again
         "input_series": [_up("imposer-1", "imposer", f"0x{minutes - down_for_m} 1x{down_for_m}")],
         "alert_rule_test": [_alert("ImpositionWorkersDown", _duration_m(minutes)),
                             _alert("ImpositionWorkerNodeDown", _duration_m(minutes))]},
        {"interval": "1m",  # down for less than the "for": not yet
         "input_series": [_up("imposer-1", "imposer", f"1x{minutes - down_for_m + 2} 0x{down_for_m - 2}")],
         "alert_rule_test": [_alert("ImpositionWorkersDown", _duration_m(minutes)),
                             _alert("ImpositionWorkerNodeDown", _duration_m(minutes))]},
    ])


def _duration_m(minutes: int) -> str:
    return f"{minutes}m"


def test_every_alert_links_to_its_runbook_in_the_operators_guide():
    """Each alert's ``runbook_url`` names a ``### <alert>`` subsection of the "Alerts" section of
    docs/operations.md, and that subsection says what to look at and what to do."""
    import re

    from imposition.observability.alerts import alert_names, rule_groups, runbook_anchor

    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    alerts_section = guide.split("\n## Alerts\n", 1)[1].split("\n## ", 1)[0]
    sections = dict(re.findall(r"^### (\w+)\n(.*?)(?=^### |\Z)", alerts_section, re.MULTILINE | re.DOTALL))
    names = alert_names()
    assert len(names) == 10
    assert set(sections) == set(names)
    base = "https://git.example.com/press/imposition/-/blob/main/docs"
    settings = _settings().model_copy(update={"runbook_base_url": base})
    for rule in (r for g in rule_groups(settings)["groups"] for r in g["rules"] if "alert" in r):
        name = rule["alert"]
        # an absolute link the page carries, to the guide under the base the settings name
        assert rule["annotations"]["runbook_url"] == f"{base}/operations.md#{runbook_anchor(name)}"
        assert runbook_anchor(name) == name.lower()  # GitHub's anchor of the heading "### <name>"
        assert len(sections[name].split()) > 30, f"the runbook of {name} is a stub"


@needs_promtool
def test_the_sweeps_stopped_alert_pages_once_no_sweep_has_completed_for_twice_the_bound(tmp_path):
    """Beat (or the maintenance worker) stops at minute 10: no sweep completes after it. The alert fires
    once the last sweep is older than ``Clocks.sweep_overdue_after_s`` and has stayed so as long again,
    not a minute before; sweeps that keep completing, even each a little late, never page; a worker that
    never completed one (no series at all) pages too. On production clocks (sweeps every 60 s)."""
    from imposition.common.clocks import Clocks
    from imposition.common.settings import Settings
    from imposition.observability.alerts import render_rules

    s = Settings(lease_ttl_s=600, heartbeat_interval_s=60, sweep_interval_s=60, visibility_margin_s=60)
    rules = tmp_path / "alerts.yml"
    rules.write_text(render_rules(s))
    overdue_m = int(Clocks.from_settings(s).sweep_overdue_after_s) // 60
    assert overdue_m == 2
    stopped_at_m = 10
    minutes = stopped_at_m + 2 * overdue_m + 5
    # the gauge holds the epoch second of the last completed sweep: promtool's clock starts at 0
    sweeping = f"0+60x{stopped_at_m}"
    stopped = f"{sweeping} {stopped_at_m * 60}x{minutes - stopped_at_m}"
    fires_m = stopped_at_m + 2 * overdue_m + 1  # past the bound (strictly), then held for as long
    page = {"severity": "page"}

    def last_sweep(values: str) -> dict:
        return _series("imposition_sweeper_last_sweep_timestamp_seconds", {"instance": "maintenance"}, values)

    def at(minute: int, *fired: dict) -> dict:
        return {"eval_time": f"{minute}m", "alertname": "ImpositionSweepsStopped",
                "exp_alerts": [{"exp_labels": labels, "exp_annotations": _annotations_of(s, labels)}
                               for labels in fired]}

    _run_tests(tmp_path, "1m", [
        {"interval": "1m", "input_series": [last_sweep(stopped)],
         "alert_rule_test": [at(fires_m - 1), at(fires_m, page), at(minutes - 1, page)]},
        {"interval": "1m",  # sweeping on, each sweep's time a minute behind: never overdue
         "input_series": [last_sweep(f"0 0+60x{minutes - 1}")],
         "alert_rule_test": [at(minutes - 1)]},
        {"interval": "1m",  # a maintenance node that never completed a sweep: no series at all
         "input_series": [_series("up", {"job": "imposition", "node": "maintenance", "role": "maintenance"},
                                  f"1x{minutes}")],
         "alert_rule_test": [at(overdue_m - 1), at(overdue_m, page)]},
    ], rules=rules)


def _annotations_of(s, labels: dict) -> dict:
    """The annotations of ImpositionSweepsStopped under settings ``s`` (they template no label)."""
    from imposition.observability.alerts import sweeps_stopped_rule, runbook_url

    return {**sweeps_stopped_rule(s)["annotations"], "runbook_url": runbook_url(s, "ImpositionSweepsStopped")}
