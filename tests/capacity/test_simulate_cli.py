"""``imposition simulate`` and ``capacity-report --what-if`` through the real command line (click's
runner): the report's shape, the PNG, and bad input as one line naming the field, exit status 2."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from click.testing import CliRunner

from imposition.cli.main import main

SPEC = """
seed = 2
[[tenants]]
name = "acme"
arrivals = { pattern = "burst", count = 60, at_s = 0 }
duration = { distribution = "fixed", s = 20 }
[[tenants]]
name = "light"
arrivals = { pattern = "replay", at_s = [5, 6, 7] }
duration = { distribution = "fixed", s = 10 }
"""


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line_usage_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "workload.toml"
    path.write_text(SPEC)
    return path


def test_simulate_prints_each_tenant_and_the_verdict_per_node_count_and_draws_the_png(spec_file, tmp_path):
    png = tmp_path / "sim.png"
    result = CliRunner().invoke(main, ["simulate", "--workload", str(spec_file), "--nodes", "1,2",
                                       "--policy", "borrow", "--png", str(png)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "1 node(s), 8 slots" in result.output and "2 node(s), 16 slots" in result.output
    assert result.output.count("VERDICT:") == 2
    assert png.read_bytes()[:4] == b"\x89PNG"
    doc = json.loads(CliRunner().invoke(main, ["simulate", "--workload", str(spec_file), "--nodes", "1",
                                               "--policy", "handoff", "--json"], catch_exceptions=False).output)
    acme = next(t for t in doc["runs"][0]["tenants"] if t["tenant"] == "acme")
    assert (acme["jobs"], acme["most_leases"]) == (60, 4)  # held to its cap on a node of 8 slots


def test_a_malformed_workload_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[tenants]\nname = 'x'\n")
    one_line_usage_error(invoke("simulate", "--workload", str(bad)), str(bad), "not a valid TOML")


def test_a_negative_rate_names_its_field(tmp_path):
    bad = tmp_path / "neg.toml"
    bad.write_text(SPEC.replace('{ pattern = "burst", count = 60, at_s = 0 }',
                                '{ pattern = "poisson", rate_per_h = -5 }'))
    one_line_usage_error(invoke("simulate", "--workload", str(bad)), "tenants[0].arrivals.poisson.rate_per_h",
                         "-5")


def test_a_missing_field_and_an_unknown_one_are_named(tmp_path):
    bad = tmp_path / "missing.toml"
    bad.write_text('[[tenants]]\nname = "x"\narrivals = { pattern = "burst", count = 1 }\n')
    one_line_usage_error(invoke("simulate", "--workload", str(bad)), "tenants[0].duration")
    bad.write_text(SPEC + 'colour = "blue"\n')
    one_line_usage_error(invoke("simulate", "--workload", str(bad)), "colour")


@pytest.mark.parametrize("nodes", ["0", "1,0", "two"])
def test_zero_or_no_nodes_is_one_line(spec_file, nodes):
    one_line_usage_error(invoke("simulate", "--workload", str(spec_file), "--nodes", nodes), "--nodes")


def test_a_missing_file_and_two_sources_are_one_line(spec_file, tmp_path):
    one_line_usage_error(invoke("simulate", "--workload", str(tmp_path / "nope.toml")), "nope.toml", "cannot read")
    one_line_usage_error(invoke("simulate", "--workload", str(spec_file), "--from-history"), "exactly one")


def test_an_empty_history_is_one_line(fresh_aws):
    one_line_usage_error(invoke("simulate", "--from-history", "--weeks", "4"), "no job in the window")
    one_line_usage_error(invoke("capacity-report", "--what-if", "nodes=2"), "no job in the window")


def test_what_if_puts_the_simulated_verdict_beside_the_measured_one(fresh_aws):
    """Two weeks of a tenant whose jobs, one node of 8 slots, queue for minutes: the measured
    report and the simulated one for 1 node (the model's check) and 2 nodes."""
    from leases.models import JobItem
    from leases.tenants import ensure_tenant

    tenants = ("acme", "globex")
    for t in tenants:
        ensure_tenant(t)
    monday = dt.datetime(2025, 3, 17, tzinfo=dt.timezone.utc).timestamp()
    for day in range(5):
        for k in range(40):
            submitted = monday + day * 86_400 + 9 * 3600 + 30 * k
            started = submitted + 200
            JobItem(uuid.uuid4().hex, tenant_id=tenants[k % 2], token="t", max_attempts=3, layout={}, input_key="k",
                    status="succeeded", attempts=1, submitted_at=submitted, first_received_at=started,
                    started_at=started, finished_at=started + 45).save()
    result = CliRunner().invoke(main, ["capacity-report", "--weeks", "1", "--until", "2025-03-21",
                                       "--what-if", "nodes=2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    measured, _, simulated = result.output.partition("what-if, simulated")
    assert "200 of 200 jobs waited over 180 s" in measured
    assert "1 node(s) (as measured: the model's check)" in simulated and "2 node(s)" in simulated
    assert simulated.count("VERDICT:") == 2
    assert "0 of 200 jobs waited over 180 s" in simulated  # 45 s jobs every 30 s never queue in the model
    doc = json.loads(CliRunner().invoke(main, ["capacity-report", "--weeks", "1", "--until", "2025-03-21",
                                               "--what-if", "nodes=2", "--json"], catch_exceptions=False).output)
    assert doc["measured"]["jobs"] == 200 and [r["nodes"] for r in doc["what_if"]["runs"]] == [1, 2]
    one_line_usage_error(invoke("capacity-report", "--what-if", "licences=2"), "licences")


def test_cap_is_honoured_under_every_policy_and_the_burst_cap_is_its_own_option_named_in_the_report(spec_file):
    """Issue 34: ``--policy borrow --cap 3`` let acme hold 7 leases, the report silent about why."""
    from imposition.capacity.simulator import POLICIES
    from imposition.common.settings import get_settings

    def run(*extra: str) -> dict:
        result = CliRunner().invoke(main, ["simulate", "--workload", str(spec_file), "--nodes", "1", "--json", *extra],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    def most_leases(doc: dict) -> int:
        return max(t["most_leases"] for t in doc["runs"][0]["tenants"])

    for policy in POLICIES:
        doc = run("--policy", policy, "--cap", "3", *(("--burst-cap", "3") if policy == "borrow" else ()))
        assert (doc["cap"], doc["cap_source"]) == (3, "--cap")
        assert most_leases(doc) == 3, policy  # acme's burst of 60 fills its cap, never more
    borrowed = run("--policy", "borrow", "--cap", "3", "--burst-cap", "5")
    assert (borrowed["burst_cap"], borrowed["burst_cap_source"], most_leases(borrowed)) == (5, "--burst-cap", 5)
    default = run("--policy", "borrow", "--cap", "3")
    assert (default["burst_cap"], default["burst_cap_source"]) == (get_settings().sim_borrow_burst_cap,
                                                                   "sim_borrow_burst_cap")
    text = invoke("simulate", "--workload", str(spec_file), "--nodes", "1", "--policy", "borrow", "--cap", "3").output
    assert f"cap 3 (--cap), burst cap {get_settings().sim_borrow_burst_cap} (sim_borrow_burst_cap)" in text
    assert "cap 3 (--cap), no borrowing" in invoke("simulate", "--workload", str(spec_file), "--policy", "handoff",
                                                   "--cap", "3").output
    one_line_usage_error(invoke("simulate", "--workload", str(spec_file), "--policy", "handoff", "--burst-cap", "5"),
                         "--burst-cap=5", "only with --policy borrow")
    one_line_usage_error(invoke("simulate", "--workload", str(spec_file), "--policy", "borrow", "--cap", "4",
                                "--burst-cap", "2"), "--burst-cap=2", "must be >= the cap")


@pytest.fixture
def shop_hours(monkeypatch):
    """``shop_hours(start, end)`` sets the shop's working hours for this test (unset by default)."""
    from imposition.common.settings import get_settings

    def set_hours(start: int, end: int) -> None:
        monkeypatch.setenv("IMPOSITION_CAPACITY_DAY_START_HOUR", str(start))
        monkeypatch.setenv("IMPOSITION_CAPACITY_DAY_END_HOUR", str(end))
        get_settings.cache_clear()

    get_settings.cache_clear()
    yield set_hours
    monkeypatch.undo()
    get_settings.cache_clear()


def test_working_hours_set_are_used_and_named(spec_file, tmp_path, shop_hours):
    """The figure "in working hours" is over the hours set and says so; a run with no working hour in
    its window says so instead of printing 0.0 %."""
    shop_hours(9, 17)
    at_ten = tmp_path / "at-ten.toml"  # the same burst at 10:00 of the spec's first day (a Monday)
    at_ten.write_text(SPEC.replace("at_s = 0 }", "at_s = 36000 }").replace("[5, 6, 7]", "[36005, 36006]"))
    night = json.loads(invoke("simulate", "--workload", str(spec_file), "--nodes", "1", "--json").output)["runs"][0]
    assert night["working_day_utilisation"] is None
    assert (night["working_hours"]["start_hour"], night["working_hours"]["end_hour"],
            night["working_hours"]["source"]) == (9, 17, "set")
    text = invoke("simulate", "--workload", str(spec_file), "--nodes", "1").output
    assert "working hours: Mon–Fri 09:00–17:00 UTC, the shop's hours as set" in text
    assert "no working hour in its window" in text
    day = json.loads(invoke("simulate", "--workload", str(at_ten), "--nodes", "1", "--json").output)["runs"][0]
    assert 0 < day["working_day_utilisation"] < day["utilisation"]  # 8 h of a day, not the run's 5 min


#: A day shift (08:00–17:00) that keeps one node's 8 slots busy while it works, idle at night:
#: 1,000 jobs an hour of 30 s is 8.3 slots' worth, a little more than the node has.
DAY_SHIFT = """
seed = 3
[[tenants]]
name = "shop-a"
arrivals = { pattern = "poisson", rate_per_h = 500, from_h = 8, for_h = 9, days = 5 }
duration = { distribution = "fixed", s = 30 }
[[tenants]]
name = "shop-b"
arrivals = { pattern = "poisson", rate_per_h = 500, from_h = 8, for_h = 9, days = 5 }
duration = { distribution = "fixed", s = 30 }
"""


def test_a_day_shift_is_judged_in_its_own_hours_inferred_from_the_arrivals_and_said(tmp_path, shop_hours):
    """Issue 42: with the whole day as working time, a shop busy all day read half busy and the
    utilisation condition could hardly hold. Unset hours are inferred from the arrivals."""
    workload = tmp_path / "day-shift.toml"
    workload.write_text(DAY_SHIFT)
    inferred = json.loads(invoke("simulate", "--workload", str(workload), "--nodes", "1", "--json").output)["runs"][0]
    assert inferred["working_hours"]["source"] == "inferred"
    assert (inferred["working_hours"]["start_hour"], inferred["working_hours"]["end_hour"]) == (8, 17)
    assert inferred["working_day_utilisation"] > 0.9 and inferred["utilisation_condition"]
    text = invoke("simulate", "--workload", str(workload), "--nodes", "1").output
    assert "working hours: Mon–Fri 08:00–17:00 UTC, inferred from" in text and "the shop's hours are unset" in text
    assert "busy slots: utilisation above 80% on 5 of 5 working days, 100%; the rule needs more than 50%: holds" in text
    shop_hours(0, 24)  # the old default: the idle night counted as working time
    whole_day = json.loads(invoke("simulate", "--workload", str(workload), "--nodes", "1", "--json").output)["runs"][0]
    assert whole_day["working_day_utilisation"] < 0.5 and not whole_day["utilisation_condition"]


def test_simulate_compares_the_licensed_nodes_with_one_more_by_default(spec_file):
    """Its help says "for each node count": by default the licensed nodes (capacity_nodes, 1) and one more."""
    result = invoke("simulate", "--workload", str(spec_file))
    assert result.exit_code == 0, result.output
    assert "1 node(s), 8 slots" in result.output and "2 node(s), 16 slots" in result.output
    assert "licensed nodes, capacity_nodes, and one more" in " ".join(invoke("simulate", "--help").output.split())
    comparison = result.output.strip().splitlines()[-1]
    assert comparison.startswith("1 → 2 node(s): long waits ") and "worst tenant p95 wait" in comparison


def test_what_if_measures_and_simulates_over_the_same_working_days(fresh_aws):
    """Issue 34: the measured part said 20 working days, the simulated one "0 of 1"."""
    from leases.models import JobItem
    from leases.tenants import ensure_tenant

    ensure_tenant("acme")
    tuesday = dt.datetime(2025, 3, 18, 10, tzinfo=dt.timezone.utc).timestamp()
    for k in range(10):
        JobItem(uuid.uuid4().hex, tenant_id="acme", token="t", max_attempts=3, layout={}, input_key="k",
                status="succeeded", attempts=1, submitted_at=tuesday + 60 * k, first_received_at=tuesday + 60 * k,
                started_at=tuesday + 60 * k, finished_at=tuesday + 60 * k + 30).save()
    args = ["capacity-report", "--weeks", "4", "--until", "2025-03-21", "--what-if", "nodes=2"]
    text = CliRunner().invoke(main, args, catch_exceptions=False).output
    assert "capacity report: 20 working days" in text
    assert "simulated on the same window (20 working days;" in text
    assert text.count("on 0 of 20 working days") == 3  # measured, 1 node and 2 nodes
    doc = json.loads(CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False).output)
    assert len(doc["measured"]["days"]) == 20 and {r["working_days"] for r in doc["what_if"]["runs"]} == {20}


def test_simulate_from_history_judges_the_capacity_reports_working_days(fresh_aws):
    import time

    from leases.models import JobItem
    from leases.tenants import ensure_tenant

    ensure_tenant("acme")
    now = time.time()
    for k in range(5):
        JobItem(uuid.uuid4().hex, tenant_id="acme", token="t", max_attempts=3, layout={}, input_key="k",
                status="succeeded", attempts=1, submitted_at=now - 600 + k, first_received_at=now - 590 + k,
                started_at=now - 590 + k, finished_at=now - 560 + k).save()
    measured = json.loads(invoke("capacity-report", "--weeks", "1", "--json").output)
    simulated = json.loads(invoke("simulate", "--from-history", "--weeks", "1", "--json").output)
    assert simulated["runs"][0]["working_days"] == len(measured["days"]) >= 4  # 5, less today if it is young
    # the same hours as the report, and the run's own span named as such (issue 42: "0.0 % in working
    # hours … 8.9 % over the whole run" compared four weeks of working days with a one-minute run)
    assert simulated["runs"][0]["working_hours"] == measured["working_hours"]
    text = invoke("simulate", "--from-history", "--weeks", "1", "--nodes", "1").output
    assert f"working hours: {measured['working_hours']['label']}" in text
    assert "% in working hours over " in text and "% from the first arrival to the last finish (" in text
