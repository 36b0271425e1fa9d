"""The clock rules of docs/design.md §4 on their own: production defaults, and clocks that break a rule."""

from __future__ import annotations

import pytest

from imposition.common.clocks import ClockError, Clocks
from imposition.common.settings import Settings

#: Clocks' fields in order: each is the setting of the same name.
FIELDS = ("lease_ttl_s", "heartbeat_interval_s", "sweep_interval_s", "defer_delay_s", "visibility_margin_s",
          "sqs_wait_time_s", "sqs_receive_backoff_max_s", "sqs_shutdown_receive_margin_s", "engine_time_limit_s",
          "preview_time_limit_s", "stop_margin_s")
#: The fields after sqs_wait_time_s, at their defaults.
REST = tuple(Settings.model_fields[name].default for name in FIELDS[6:])


def test_production_defaults_keep_the_rules():
    defaults = {name: field.default for name, field in Settings.model_fields.items()}
    assert (defaults["lease_ttl_s"], defaults["heartbeat_interval_s"], defaults["sweep_interval_s"],
            defaults["defer_delay_s"]) == (600, 60, 60, 30)
    clocks = Clocks(*(defaults[name] for name in FIELDS)).check()
    assert clocks.visibility_timeout_s == 720
    assert clocks.lease_lost_after_s == 300
    assert clocks.lost_message_after_s == 70
    assert clocks.infra_report_grace_s == 300
    assert clocks.poll_stale_after_s == 40
    assert clocks.renewal_stale_after_s == 360
    assert clocks.stop_timeout_s == 300 + 60 + 30 + 10 + 5


def test_the_stop_timeout_covers_the_longest_attempt_and_the_close_of_the_receives():
    """A planned stop must outlast every attempt it lets finish: the engine's limit and the
    previews' (each killed past its limit), the commit margin, and the open long polls it reads."""
    defaults = {name: field.default for name, field in Settings.model_fields.items()}
    for engine_s, previews_s in ((300, 60), (1800, 60), (20, 5)):
        clocks = Clocks.from_settings(Settings(engine_time_limit_s=engine_s, preview_time_limit_s=previews_s))
        assert clocks.stop_timeout_s >= engine_s + previews_s + defaults["stop_margin_s"] + clocks.receive_close_s
        assert clocks.stop_timeout_s - (engine_s + previews_s) < defaults["stop_margin_s"] + clocks.receive_close_s + 1
        # A frozen run is reported only after its own watchdog should have ended it.
        assert clocks.renewal_stale_after_s > clocks.lease_lost_after_s


@pytest.mark.parametrize(
    "clocks, limit",
    [
        (Clocks(600, 201, 60, 30, 60, 10, *REST), "lease_ttl_s/3"),
        (Clocks(600, 60, 60, 901, 60, 10, *REST), "0..900"),
        (Clocks(43_000, 60, 200, 30, 60, 10, *REST), "43200"),
    ],
)
def test_clocks_that_break_a_rule_are_refused(clocks, limit):
    with pytest.raises(ClockError, match=limit.replace(".", r"\.")):
        clocks.check()
