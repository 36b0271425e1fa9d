"""The clock rules of docs/design.md §4 on their own: production defaults, and clocks that break a rule."""

from __future__ import annotations

import pytest

from imposition.common.clocks import ClockError, Clocks
from imposition.common.settings import Settings


def test_production_defaults_keep_the_rules():
    defaults = {name: field.default for name, field in Settings.model_fields.items()}
    assert (defaults["lease_ttl_s"], defaults["heartbeat_interval_s"], defaults["sweep_interval_s"],
            defaults["defer_delay_s"]) == (600, 60, 60, 30)
    clocks = Clocks(defaults["lease_ttl_s"], defaults["heartbeat_interval_s"], defaults["sweep_interval_s"],
                    defaults["defer_delay_s"], defaults["visibility_margin_s"], defaults["sqs_wait_time_s"]).check()
    assert clocks.visibility_timeout_s == 720
    assert clocks.lease_lost_after_s == 300
    assert clocks.lost_message_after_s == 70
    assert clocks.infra_report_grace_s == 300


@pytest.mark.parametrize(
    "clocks, limit",
    [
        (Clocks(600, 201, 60, 30, 60, 10), "lease_ttl_s/3"),
        (Clocks(600, 60, 60, 901, 60, 10), "0..900"),
        (Clocks(43_000, 60, 200, 30, 60, 10), "43200"),
    ],
)
def test_clocks_that_break_a_rule_are_refused(clocks, limit):
    with pytest.raises(ClockError, match=limit.replace(".", r"\.")):
        clocks.check()
