"""devstack.stack: the processes ``make run`` and the tests start never outlive their starter."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import psutil

from devstack.stack import ManagedProcess, stop_all, wait_for

#: A child that logs each SIGTERM and keeps running (a worker stuck in its warm shutdown).
STUBBORN = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: print("got SIGTERM", flush=True))
    print("ready", flush=True)
    while True:
        time.sleep(0.1)
""")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_child_ends_when_its_starter_is_killed(tmp_path):
    """SIGKILL of the process that started a ManagedProcess (as of a `make run` killed outright):
    the child gets SIGTERM from the kernel (PR_SET_PDEATHSIG) instead of running on as an orphan."""
    starter_code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from devstack.stack import ManagedProcess
        child = ManagedProcess([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(300)"],
                               Path({str(tmp_path / 'child.log')!r}), ready_marker="ready", ready_timeout_s=60)
        print(child.pid, flush=True)
        time.sleep(300)
    """)
    starter = subprocess.Popen([sys.executable, "-c", starter_code], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(starter.stdout.readline())
        assert psutil.Process(child_pid).is_running() and not _gone(child_pid)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        wait_for(lambda: _gone(child_pid), 10, what="the orphaned child to end")
    finally:
        starter.kill()
        starter.wait()
        if not _gone(child_pid):
            psutil.Process(child_pid).kill()


def test_stop_all_asks_every_process_before_killing_any(tmp_path):
    """Every process gets its SIGTERM at once (one shared timeout, not one each), and those that
    ignore it are killed with their process group when the timeout runs out."""
    procs = [ManagedProcess([sys.executable, "-c", STUBBORN], tmp_path / f"p{i}.log", ready_marker="ready")
             for i in range(3)]
    pids = [p.pid for p in procs]
    stop_all(procs, timeout_s=1.0)
    assert all(_gone(pid) for pid in pids)
    assert all(p.proc.returncode == -signal.SIGKILL for p in procs)  # they did ignore SIGTERM
    assert all("got SIGTERM" in p.log() for p in procs)  # yet each was asked first
