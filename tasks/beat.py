"""Celery beat's scheduler with a liveness stamp for its ``/healthz`` (:mod:`imposition.observability.health`).

Celery sends no signal per turn of beat's loop (``beat_init`` only at the start), so the stamp is
taken in the scheduler itself: each :meth:`HealthScheduler.tick` (one turn, then beat sleeps at most
``beat_max_loop_interval``) stamps, and closing the scheduler (beat's stop, after SIGTERM or SIGINT)
makes the endpoint answer 503 ``draining``. :func:`tasks.config.derived` makes it beat's scheduler.
Celery's own beat ping (remote control) needs fanout queues, which SQS does not have.
"""

from __future__ import annotations

from celery.beat import PersistentScheduler

from imposition.observability import health


class HealthScheduler(PersistentScheduler):
    """Celery's :class:`~celery.beat.PersistentScheduler` (the schedule file of ``-s``), stamping
    each turn of beat's loop for its ``/healthz``."""

    def tick(self, *args, **kwargs):
        """One turn of beat's loop: stamp it, then send what is due; returns seconds until the next."""
        health.beat_ticked()
        return super().tick(*args, **kwargs)

    def close(self) -> None:
        """Beat stops: answer 503 ``draining`` from now on, then save the schedule."""
        health.begin_draining()
        super().close()
