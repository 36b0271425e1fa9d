"""The SQS rules every publisher follows, once: the ``DelaySeconds`` range, the backoff between
copies, and the retry policy of one publish (kombu's ``retry_policy``).

    delay_seconds(value, name) ─► int 0..900      (ValueError naming ``name`` otherwise)
    backoff_s(base_s, step, cap_s) = min(cap_s, base_s × 2^(step − 1), 900)
    publish_retry_policy()  ─► {"max_retries", "interval_start", "interval_step", "interval_max"}
"""

from __future__ import annotations

from imposition.common.settings import SQS_MAX_DELAY_S, Settings, get_settings


def delay_seconds(value: float, name: str = "delay_s") -> int:
    """``value`` seconds as an SQS ``DelaySeconds``: rounded to whole seconds, 0–900.

    Raises:
        ValueError: outside 0..900 s (the SQS limit, :data:`imposition.common.settings.SQS_MAX_DELAY_S`),
            naming ``name`` and the value.
    """
    delay_s = int(round(value))
    if not 0 <= delay_s <= SQS_MAX_DELAY_S:
        raise ValueError(f"{name}={value} is outside 0..{SQS_MAX_DELAY_S} s (SQS DelaySeconds limit)")
    return delay_s


def backoff_s(base_s: float, step: int, cap_s: float = SQS_MAX_DELAY_S) -> int:
    """Whole seconds before copy ``step + 1``: ``base_s`` doubled per step after the first
    (``base_s × 2^(step − 1)``), at most ``cap_s`` and never above the SQS delay limit (900 s)."""
    return int(min(cap_s, base_s * 2 ** max(0, step - 1), SQS_MAX_DELAY_S))


def publish_retry_policy(settings: Settings | None = None) -> dict[str, float]:
    """kombu's ``retry_policy`` for one publish (connection errors), from the ``publish_retry_*`` settings."""
    s = settings or get_settings()
    return {"max_retries": s.publish_retry_max_retries, "interval_start": s.publish_retry_interval_start_s,
            "interval_step": s.publish_retry_interval_step_s, "interval_max": s.publish_retry_interval_max_s}
