"""Helpers shared by the admission and webhook tests."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLE_PDF = REPO / "samples" / "a5_8p.pdf"
LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def input_key_of(tenant_id: str, name: str = "input.pdf") -> str:
    """A key under ``tenant_id``'s own prefix."""
    return f"tenants/{tenant_id}/uploads/{name}"


def queue_messages(queue: str) -> int:
    """Visible + in-flight + delayed messages of SQS queue ``queue``."""
    from imposition.common import aws

    attrs = aws.sqs().get_queue_attributes(
        QueueUrl=aws.queue_url(queue),
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                        "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    return sum(int(v) for v in attrs.values())


def jobs_of(tenant_id: str) -> list:
    """Every job item of ``tenant_id`` (by-tenant index)."""
    from leases.models import JobItem

    return list(JobItem.by_tenant.query(tenant_id))


def race_duplicates(submit_one, *, threads: int = 20, per_thread: int = 50) -> tuple[list[str], list[str]]:
    """Call ``submit_one(thread, i)`` ``per_thread`` times from each of ``threads`` threads released at once.

    ``submit_one`` returns the id it created or raises ``admission.DuplicateSubmission``. Returns
    (ids created, ids carried by the refusals).
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from imposition.admission import DuplicateSubmission

    gate = threading.Barrier(threads)

    def run(thread: int) -> list[tuple[str, str]]:
        gate.wait()
        out = []
        for i in range(per_thread):
            try:
                out.append(("created", submit_one(thread, i)))
            except DuplicateSubmission as dup:
                out.append(("refused", dup.job_id))
        return out

    with ThreadPoolExecutor(threads) as pool:
        results = [r for chunk in pool.map(run, range(threads)) for r in chunk]
    return [j for kind, j in results if kind == "created"], [j for kind, j in results if kind == "refused"]
