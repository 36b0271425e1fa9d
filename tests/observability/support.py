"""Small helpers shared by the observability tests."""

from __future__ import annotations

import socket
from pathlib import Path

from leases.models import JobItem
from tests.support.processes import wait_for

CASES = Path(__file__).resolve().parents[1] / "data" / "cases"
N_UP = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def final_job(job_id: str, timeout_s: float = 90) -> JobItem:
    """Wait until the job is ``succeeded`` or ``failed`` and return its item."""
    def done():
        job = JobItem.get(job_id, consistent_read=True)
        return job if job.status in ("succeeded", "failed") else None
    return wait_for(done, timeout_s, what=f"job {job_id} to finish")
