"""The SQS poll loop's settings: a look for room is 0 (kombu's loop) or a timer of at least 1 ms."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from imposition.common.settings import Settings


@pytest.mark.parametrize("value", ["0.0001", "0.0009"])
def test_a_prefetch_recheck_under_a_millisecond_is_refused_naming_the_field_and_the_limit(monkeypatch, value):
    monkeypatch.setenv("IMPOSITION_SQS_PREFETCH_RECHECK_S", value)
    with pytest.raises(ValidationError, match=r"sqs_prefetch_recheck_s=.* must be 0 .* or >= 0.001"):
        Settings()


@pytest.mark.parametrize("value", ["0", "0.001", "0.02", "0.5"])
def test_a_prefetch_recheck_of_zero_or_a_millisecond_and_more_is_kept(monkeypatch, value):
    monkeypatch.setenv("IMPOSITION_SQS_PREFETCH_RECHECK_S", value)
    assert Settings().sqs_prefetch_recheck_s == float(value)


def test_the_default_prefetch_recheck_is_the_20_ms_timer():
    assert Settings.model_fields["sqs_prefetch_recheck_s"].default == 0.02
