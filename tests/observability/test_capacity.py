"""The capacity report's verdict on job histories made to sit just below and just above each threshold.

Each history covers two weeks (ten working days, 08:00–18:00 UTC, two slots), ten jobs a day. A day
is made busy or not by how long its jobs run; a job's wait is either short (10 s) or the given long
wait. Histories are job items (unsaved) run through :func:`compute_report`; the last test goes through
the command on job items stored in DynamoDB.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from leases.models import JobItem
from imposition.observability.capacity import Thresholds, compute_report, working_days, write_png
from imposition.cli.main import main

UTC = ZoneInfo("UTC")
THRESHOLDS = Thresholds(utilisation=0.8, busy_day_share=0.5, long_wait_s=180, long_wait_share=0.2)
SLOTS = 2
JOBS_PER_DAY = 10
UNTIL = dt.datetime(2025, 3, 29, tzinfo=UTC).timestamp()  # end of Friday 28 March 2025
DAYS = working_days(dt.date(2025, 3, 17), dt.date(2025, 3, 28), tz=UTC, start_hour=8, end_hour=18, until=UNTIL)


def job(tenant: str, submitted_at: float, wait_s: float, run_s: float, status: str = "succeeded") -> JobItem:
    started = submitted_at + wait_s
    return JobItem(uuid.uuid4().hex, tenant_id=tenant, token="t", max_attempts=3, layout={}, input_key="k",
                   status=status, attempts=1, submitted_at=submitted_at, first_received_at=started,
                   started_at=started, finished_at=started + run_s)


def history(*, busy_days: int, busy_utilisation: float, long_waits: int, long_wait_s: float = 181,
            quiet_utilisation: float = 0.5) -> list[JobItem]:
    """Ten working days: the first ``busy_days`` at ``busy_utilisation``, the rest quiet; the first
    ``long_waits`` jobs of the window wait ``long_wait_s``, all others 10 s."""
    jobs = []
    n = 0
    for i, day in enumerate(DAYS):
        utilisation = busy_utilisation if i < busy_days else quiet_utilisation
        run_s = utilisation * SLOTS * (day.end - day.start) / JOBS_PER_DAY
        for k in range(JOBS_PER_DAY):
            wait = long_wait_s if n < long_waits else 10
            jobs.append(job("acme", day.start + 60 * k, wait, run_s))
            n += 1
    return jobs


def report(jobs: list[JobItem]):
    return compute_report(jobs, days=DAYS, tz=UTC, slots_total=SLOTS, now=UNTIL, thresholds=THRESHOLDS)


def test_the_history_is_what_it_claims():
    r = report(history(busy_days=6, busy_utilisation=0.81, long_waits=21))
    assert len(r.days) == 10 and r.jobs == 100
    assert [round(d.utilisation, 4) for d in r.days] == [0.81] * 6 + [0.5] * 4
    assert (r.busy_days, r.long_waits) == (6, 21)


@pytest.mark.parametrize(
    "case, kwargs, util_holds, wait_holds",
    [
        ("both just above", dict(busy_days=6, busy_utilisation=0.81, long_waits=21), True, True),
        ("utilisation just below 80 %", dict(busy_days=6, busy_utilisation=0.79, long_waits=21), False, True),
        ("busy on exactly half the days", dict(busy_days=5, busy_utilisation=0.81, long_waits=21), False, True),
        ("long waits exactly 20 %", dict(busy_days=6, busy_utilisation=0.81, long_waits=20), True, False),
        ("waits of exactly 180 s are not long", dict(busy_days=6, busy_utilisation=0.81, long_waits=100,
                                                     long_wait_s=180), True, False),
        ("neither", dict(busy_days=2, busy_utilisation=0.95, long_waits=5), False, False),
    ],
)
def test_verdict_at_each_threshold(case, kwargs, util_holds, wait_holds):
    r = report(history(**kwargs))
    assert (r.utilisation_condition, r.wait_condition) == (util_holds, wait_holds)
    assert r.warranted == (util_holds and wait_holds)
    if util_holds and wait_holds:
        assert "is warranted: both conditions hold" in r.verdict
    elif util_holds or wait_holds:
        assert "no second licence. The rule needs both conditions" in r.verdict
        assert ("only the utilisation condition holds" if util_holds else "only the long-wait condition holds") in r.verdict
    else:
        assert "neither condition holds" in r.verdict
    # each signal with its value against its threshold, in the verdict and in its own line
    busy_pct, wait_pct = f"{r.busy_day_share:.0%}", f"{r.long_wait_share:.0%}"
    assert f"busy slots on {busy_pct} of working days (needs more than 50%)" in r.verdict, r.verdict
    assert f"long waits for {wait_pct} of jobs (needs more than 20%)" in r.verdict, r.verdict
    busy_line, wait_line = r.condition_lines()
    assert f"on {r.busy_days} of 10 working days, {busy_pct}; the rule needs more than 50%: " \
           f"{'holds' if util_holds else 'does not hold'}" in busy_line
    assert f"{r.long_waits} of 100 jobs waited over 180 s, {wait_pct}; the rule needs more than 20%: " \
           f"{'holds' if wait_holds else 'does not hold'}" in wait_line


def test_each_condition_says_by_how_much_it_held_or_failed():
    r = report(history(busy_days=2, busy_utilisation=0.95, long_waits=51))
    busy_line, wait_line = r.condition_lines()
    assert busy_line.endswith("does not hold (30 points below)"), busy_line  # 20 % of days against 50 %
    assert wait_line.endswith("holds (31 points above)"), wait_line  # 51 % of jobs against 20 %
    assert "Jobs waited while slots were free, so not for slots" in r.verdict


def test_working_hours_are_inferred_from_the_arrivals_when_unset():
    from imposition.observability.capacity import infer_hours, working_hours

    monday_9 = dt.datetime(2025, 3, 17, 9, tzinfo=UTC).timestamp()
    day_shift = [monday_9 + day * 86_400 + k * 300 for day in range(5) for k in range(96)]  # 09:00–17:00
    night_strays = [monday_9 - 8 * 3600, monday_9 + 13 * 3600]  # 01:00 and 22:00, 2 of 482
    saturday = [monday_9 + 5 * 86_400 + k for k in range(1000)]  # not a working day: not counted
    assert infer_hours(day_shift + night_strays + saturday, tz=UTC, share=0.95) == (9, 17, 482)
    assert infer_hours(day_shift + night_strays, tz=UTC, share=1.0) == (1, 23, 482)
    assert infer_hours(saturday, tz=UTC, share=0.95) is None
    hours = working_hours(day_shift)
    assert (hours.start_hour, hours.end_hour, hours.source) == (9, 17, "inferred")
    assert hours.label() == ("Mon–Fri 09:00–17:00 UTC, inferred from 480 arrivals: the shop's hours are unset "
                             "(IMPOSITION_CAPACITY_DAY_START_HOUR, _END_HOUR)")
    assert working_hours([]).source == "whole_day" and "no arrival to infer them from" in working_hours([]).label()


def test_runs_crossing_midnight_and_weekends_count_only_inside_working_hours():
    friday = DAYS[-1]
    # from Friday 17:00 to Monday 09:00: only Friday's last hour is inside the window's working hours
    r = report([job("acme", friday.end - 3600, 0, 64 * 3600)])
    assert r.days[-1].busy_slot_s == pytest.approx(3600)
    assert sum(d.busy_slot_s for d in r.days) == pytest.approx(3600)


def test_a_job_still_waiting_counts_only_once_its_wait_is_long():
    day = DAYS[-1]
    waiting_long = JobItem("a", tenant_id="acme", token="t", max_attempts=3, layout={}, input_key="k",
                           status="queued", attempts=0, submitted_at=UNTIL - 181)
    waiting_short = JobItem("b", tenant_id="acme", token="t", max_attempts=3, layout={}, input_key="k",
                            status="queued", attempts=0, submitted_at=UNTIL - 10)
    assert day.start < UNTIL - 181
    r = report([waiting_long, waiting_short])
    assert (r.jobs, r.long_waits) == (1, 1)


def _colour_pixels(path, half: str) -> dict[str, int]:
    """Pixels of the matplotlib colours the chart uses, in the top or bottom half of the PNG."""
    from PIL import Image

    colours = {"red": (0xD6, 0x27, 0x28), "blue": (0x1F, 0x77, 0xB4), "green": (0x2C, 0xA0, 0x2C)}
    with Image.open(path) as image:
        rgb = image.convert("RGB")
        w, h = rgb.size
        box = (0, 0, w, h // 2) if half == "top" else (0, h // 2, w, h)
        histogram = rgb.crop(box).getcolors(maxcolors=w * h)  # [(count, (r, g, b)), …]
    counts = dict.fromkeys(colours, 0)
    for n, (r, g, b) in histogram:
        for name, (cr, cg, cb) in colours.items():
            if abs(r - cr) + abs(g - cg) + abs(b - cb) < 12:
                counts[name] += n
    return counts


def test_png_shows_both_series(tmp_path):
    """Top: utilisation bars, red over the 80 % line, blue under; bottom: long-wait share bars, red
    over the 20 % line, green under."""
    hot = write_png(report(history(busy_days=6, busy_utilisation=0.81, long_waits=21)), tmp_path / "hot.png")
    assert hot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    top, bottom = _colour_pixels(hot, "top"), _colour_pixels(hot, "bottom")
    assert top["red"] > 500 and top["blue"] > 500, top  # 6 busy days over the line, the rest under
    assert bottom["red"] + bottom["green"] > 500, bottom  # the daily share of long waits is drawn
    quiet = write_png(report(history(busy_days=0, busy_utilisation=0.81, long_waits=0)), tmp_path / "quiet.png")
    assert _colour_pixels(quiet, "top")["red"] < 50  # no day over the line: no red bar


@pytest.fixture
def shop_hours(monkeypatch):
    """``shop_hours(start, end)`` sets the shop's working hours (None, None: unset) for this test."""
    from imposition.common.settings import get_settings

    def set_hours(start: int | None, end: int | None) -> None:
        for name, value in (("IMPOSITION_CAPACITY_DAY_START_HOUR", start), ("IMPOSITION_CAPACITY_DAY_END_HOUR", end)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, str(value))
        get_settings.cache_clear()

    yield set_hours
    monkeypatch.undo()
    get_settings.cache_clear()


def test_command_reads_the_job_items_and_writes_the_png(fresh_aws, tmp_path, shop_hours):
    tenants = ("acme", "globex")
    for n, item in enumerate(history(busy_days=6, busy_utilisation=0.81, long_waits=21)):
        item.tenant_id = tenants[n % 2]
        item.save()
    from leases.tenants import ensure_tenant

    for tenant in tenants:
        ensure_tenant(tenant)
    png = tmp_path / "capacity.png"
    # Settings: working day 00:00–24:00 (set) and 8 slots per node, so the same runs are a smaller share.
    shop_hours(0, 24)
    result = CliRunner().invoke(main, ["capacity-report", "--weeks", "2", "--until", "2025-03-28", "--nodes", "1",
                                       "--png", str(png)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "working hours: Mon–Fri 00:00–24:00 UTC, the shop's hours as set" in result.output
    assert "long waits: 21 of 100 jobs waited over 180 s, 21%; the rule needs more than 20%: holds" in result.output
    assert "VERDICT: no second licence. The rule needs both conditions; only the long-wait condition holds" \
        in result.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    as_json = CliRunner().invoke(main, ["capacity-report", "--weeks", "2", "--until", "2025-03-28", "--json"],
                                 catch_exceptions=False)
    doc = json.loads(as_json.output)
    assert (len(doc["days"]), doc["jobs"], doc["long_waits"], doc["warranted"]) == (10, 100, 21, False)
    # 2 slots' worth of 0.81 × 10 h on 8 slots × 24 h
    assert doc["days"][0]["utilisation"] == pytest.approx(0.81 * 2 * 10 / (8 * 24))
    shop_hours(None, None)
    unset = CliRunner().invoke(main, ["capacity-report", "--weeks", "2", "--until", "2025-03-28"],
                               catch_exceptions=False).output
    # every job arrives 08:00–08:09: the report counts that hour, and says the shop's hours are unset
    assert "working hours: Mon–Fri 08:00–09:00 UTC, inferred from 100 arrivals: the shop's hours are unset" in unset


def test_command_refuses_an_empty_window(fresh_aws):
    result = CliRunner().invoke(main, ["capacity-report", "--weeks", "0"])
    assert result.exit_code == 2 and "weeks=0" in result.output
