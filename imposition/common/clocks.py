"""The clocks of leases, heartbeats, sweeping and deferral, derived in one place (docs/design.md §4).

=====================  =========  ===============================================================
name                   default    rule
=====================  =========  ===============================================================
lease_ttl_s            600 s      a lease not renewed for this long is dead
heartbeat_interval_s   60 s       renews lease and message visibility; <= lease_ttl_s / 3
sweep_interval_s       60 s       beat period of the sweeper; 2 x it: sweep_overdue_after_s (alerted on)
visibility_timeout_s   derived    lease_ttl_s + sweep_interval_s + visibility_margin_s, <= 43,200 s
lease_lost_after_s     derived    lease_ttl_s / 2: a worker with no successful beat for this long
                                  declares its own lease lost and stops
lost_message_after_s   derived    sqs_wait_time_s + heartbeat_interval_s: a queued job overdue by
                                  this long with no visible message is re-published by the sweeper
clock_skew_warn_s      derived    lease_ttl_s / 4: a node's clock skew warned and alerted on beyond it
infra_report_grace_s   derived    lease_lost_after_s (lease_ttl_s / 2): how long past a lease's expiry
                                  the sweeper waits for its holder to report ``infra_lost`` before
                                  it fails a job out of attempts
defer_delay_s          30 s       SQS DelaySeconds of a cap-hit copy; <= 900 s
poll_stale_after_s     derived    2 x (sqs_wait_time_s + sqs_receive_backoff_max_s)
renewal_stale_after_s  derived    lease_lost_after_s + heartbeat_interval_s
receive_close_s        derived    sqs_wait_time_s + sqs_shutdown_receive_margin_s
stop_timeout_s         derived    longest_attempt_s (engine + preview limits + stop_margin_s) + receive_close_s
=====================  =========  ===============================================================

Queues and kombu use :attr:`Clocks.visibility_timeout_s`. Why: docs/design.md §4, docs/deploy-processes.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from imposition.common.settings import SQS_MAX_VISIBILITY_TIMEOUT_S, Settings, get_settings
from imposition.common.sqs import delay_seconds


class ClockError(ValueError):
    """The configured clocks break a rule of docs/design.md §4; the message names the value and the limit."""


@dataclass(frozen=True)
class Clocks:
    """All lease-related durations, in seconds."""

    lease_ttl_s: float
    heartbeat_interval_s: float
    sweep_interval_s: float
    defer_delay_s: int
    visibility_margin_s: float
    sqs_wait_time_s: float
    sqs_receive_backoff_max_s: float
    sqs_shutdown_receive_margin_s: float
    engine_time_limit_s: float
    preview_time_limit_s: float
    stop_margin_s: float

    @property
    def visibility_timeout_s(self) -> int:
        """SQS visibility timeout of the work queues: >= lease TTL + sweep interval + margin."""
        return math.ceil(self.lease_ttl_s + self.sweep_interval_s + self.visibility_margin_s)

    @property
    def lease_lost_after_s(self) -> float:
        """With no successful heartbeat for this long, a worker treats its lease as lost."""
        return self.lease_ttl_s / 2

    @property
    def lost_message_after_s(self) -> float:
        """A queued job overdue (``due_at``) by this long, while its queue shows no visible message,
        has no message that could still bring it soon: one long poll plus one heartbeat interval."""
        return self.sqs_wait_time_s + self.heartbeat_interval_s

    @property
    def clock_skew_warn_s(self) -> float:
        """A node's clock this far from the sweeper's (either way) is warned about and alerted on: a
        quarter of the lease TTL, well before a lease could look expired while its holder renews
        it (:mod:`leases.skew`)."""
        return self.lease_ttl_s / 4

    @property
    def sweep_overdue_after_s(self) -> float:
        """No sweep completed for this long means the sweeper has stopped: at least one sweep beat
        sent (every ``sweep_interval_s``) has not run to its end. ImpositionSweepsStopped fires when
        it has held as long again, so a single slow sweep never pages."""
        return 2 * self.sweep_interval_s

    @property
    def infra_report_grace_s(self) -> float:
        """Seconds past a lease's expiry the sweeper waits before failing a job out of attempts: half
        a TTL, as long as the holder's own watchdog allows itself. A holder cut off from DynamoDB
        retries its ``infra_lost`` report at least once per heartbeat interval, but a call it sent
        during the outage may return only at the SDK's read timeout (times its retries), later than
        the sweeper's fresh calls; one heartbeat interval was too short for that (the stall test)."""
        return self.lease_lost_after_s

    @property
    def poll_stale_after_s(self) -> float:
        """Seconds without a run of its poll loop after which a worker has stopped consuming: twice
        the longest healthy gap between two runs (a long poll, or the longest receive backoff while
        SQS fails)."""
        return 2 * (self.sqs_wait_time_s + self.sqs_receive_backoff_max_s)

    @property
    def renewal_stale_after_s(self) -> float:
        """Seconds since a running job's last confirmed renewal past which its process is frozen: the
        heartbeat's watchdog ends the run at :attr:`lease_lost_after_s`, and checks at least once
        per heartbeat interval."""
        return self.lease_lost_after_s + self.heartbeat_interval_s

    @property
    def receive_close_s(self) -> float:
        """Longest a stopping worker waits for its open long polls (tasks.sqs_transport)."""
        return self.sqs_wait_time_s + self.sqs_shutdown_receive_margin_s

    @property
    def longest_attempt_s(self) -> float:
        """Longest one attempt runs under its lease: the engine's limit, the previews' limit, and the
        margin for the upload, the commit and the pool's exit."""
        return self.engine_time_limit_s + self.preview_time_limit_s + self.stop_margin_s

    @property
    def stop_timeout_s(self) -> int:
        """Seconds a planned stop (SIGTERM: Celery's warm shutdown) of an imposition worker may take:
        it reads its open receives, then lets each running job finish (the module table)."""
        return math.ceil(self.longest_attempt_s + self.receive_close_s)

    def check(self) -> "Clocks":
        """Return self if every rule holds.

        Raises:
            ClockError: heartbeat > TTL / 3, defer delay > 900 s (SQS ``DelaySeconds`` limit), or a
                visibility timeout > 43,200 s (SQS limit).
        """
        if self.heartbeat_interval_s > self.lease_ttl_s / 3:
            raise ClockError(
                f"heartbeat_interval_s={self.heartbeat_interval_s} exceeds lease_ttl_s/3="
                f"{self.lease_ttl_s / 3:g} (a lease survives two missed heartbeats)"
            )
        try:
            delay_seconds(self.defer_delay_s, "defer_delay_s")
        except ValueError as exc:
            raise ClockError(str(exc)) from None
        if self.visibility_timeout_s > SQS_MAX_VISIBILITY_TIMEOUT_S:
            raise ClockError(
                f"visibility timeout {self.visibility_timeout_s} s (lease_ttl_s + sweep_interval_s + "
                f"visibility_margin_s) exceeds the SQS limit of {SQS_MAX_VISIBILITY_TIMEOUT_S} s"
            )
        return self

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> "Clocks":
        """The clocks of ``settings`` (default: the process settings), checked."""
        s = settings or get_settings()
        return cls(
            lease_ttl_s=s.lease_ttl_s,
            heartbeat_interval_s=s.heartbeat_interval_s,
            sweep_interval_s=s.sweep_interval_s,
            defer_delay_s=s.defer_delay_s,
            visibility_margin_s=s.visibility_margin_s,
            sqs_wait_time_s=s.sqs_wait_time_s,
            sqs_receive_backoff_max_s=s.sqs_receive_backoff_max_s,
            sqs_shutdown_receive_margin_s=s.sqs_shutdown_receive_margin_s,
            engine_time_limit_s=s.engine_time_limit_s,
            preview_time_limit_s=s.preview_time_limit_s,
            stop_margin_s=s.stop_margin_s,
        ).check()


def get_clocks() -> Clocks:
    """The process's clocks (from :func:`imposition.common.settings.get_settings`)."""
    return Clocks.from_settings()
