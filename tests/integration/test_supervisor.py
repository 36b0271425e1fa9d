"""The stack notices (issue 15, item 7): :class:`devstack.stack.Supervisor` over real processes.

A real celery worker sets its poll stamp while it polls; stopped (SIGSTOP: alive, not consuming,
what an event loop that stopped polling looks like from outside) it is named and restarted, and
polls again. A process that keeps exiting fails the run with its last log lines.
"""

from __future__ import annotations

import signal
import sys
import time
import uuid

from imposition.common.settings import Settings
from devstack.stack import ManagedProcess, Supervisor, poll_stale_after_s
from tests.support.processes import start_worker, wait_for

STALE_AFTER_S = 4.0


def test_a_worker_that_stops_polling_is_named_and_restarted_and_polls_again(tmp_path):
    stamp = tmp_path / "worker.polled"
    worker = start_worker(tmp_path, concurrency=1, name=f"supervised-{uuid.uuid4().hex[:6]}",
                          env={"IMPOSITION_POLL_STAMP_PATH": str(stamp)})
    said: list[str] = []
    supervisor = Supervisor(said.append, stale_after_s=STALE_AFTER_S, interval_s=0.5)
    supervisor.add("worker-imposition", worker, poll_stamp=stamp, max_restarts=1)
    supervisor.start()
    try:
        wait_for(stamp.exists, 20, what="the worker's first poll")
        first = stamp.stat().st_mtime
        wait_for(lambda: stamp.stat().st_mtime > first, 20, what="the poll stamp to move on")
        time.sleep(STALE_AFTER_S + 1)
        assert said == [], said  # polling: an idle worker is not a stalled one
        worker.signal(signal.SIGSTOP)
        wait_for(lambda: any("is running again" in line for line in said), 60, what="the restart")
        restarted = supervisor.watched[0].process
        assert restarted is not worker and restarted.proc.poll() is None
        assert "worker-imposition has not polled its queue for" in said[0], said
        assert supervisor.failure is None
        wait_for(stamp.exists, 20, what="the restarted worker's first poll")
        assert (tmp_path / f"{worker.log_path.name}.1").exists()  # the stalled process's log is kept
    finally:
        supervisor.stop()
        for item in supervisor.watched:
            item.process.stop()
        worker.stop()


def test_a_process_that_keeps_dying_fails_the_run_with_its_last_log_lines(tmp_path):
    cmd = [sys.executable, "-c", "print('cannot reach the endpoint: boom', flush=True); raise SystemExit(3)"]
    proc = ManagedProcess(cmd, tmp_path / "dying.log")
    said: list[str] = []
    supervisor = Supervisor(said.append, stale_after_s=STALE_AFTER_S, interval_s=0.3)
    supervisor.add("beat", proc, max_restarts=2)
    supervisor.start()
    try:
        wait_for(lambda: supervisor.failure is not None, 30, what="the supervisor to give up")
    finally:
        supervisor.stop()
        supervisor.watched[0].process.stop()
    message = str(supervisor.failure)
    assert message.startswith("beat exited with status 3, after 2 restart(s)"), message
    assert "cannot reach the endpoint: boom" in message
    assert sum("restarting it" in line for line in said) == 2


def test_the_stale_bound_covers_a_long_poll_and_the_longest_receive_backoff():
    s = Settings(sqs_wait_time_s=20, sqs_receive_backoff_max_s=10)
    assert poll_stale_after_s(s) == 60 > s.sqs_wait_time_s + s.sqs_receive_backoff_max_s
