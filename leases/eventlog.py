"""The lease-event log: what every lease holder and sweeper saw, and the cap check that replays it.

Each process appends JSON lines to its own file ``lease-events-<pid>.jsonl`` in one directory (no
two writers share a file, so a SIGKILL can at worst leave a torn last line, which the reader
skips). The wiring to the Celery signals is :mod:`tasks.lease_log`; this module knows no Celery.

One line per event, times in epoch seconds (``time.time()``: every process of a test or soak runs
on one host, so the clocks agree)::

    {"event": "acquired",  "t": ..., "tenant": ..., "job": ..., "token": ..., "pid": ...}
    {"event": "releasing", "t": ..., ..., "outcome": "succeeded" | "retrying" | "failed"}
    {"event": "released",  "t": ..., ..., "outcome": ...}   (the release transaction returned; a
        commit that passed its slot adds "passed_token", "passed_job", "passed_tenant" (absent:
        the releaser's): the lease it took for the next job, which certainly existed from then)
    {"event": "reclaimed", "t": ..., ..., "swept_at": ..., "requeued": true | false}
    {"event": "lost",      "t": ..., ..., "detail": ...}

Why these moments: each event pins a time at which the lease **certainly** existed in DynamoDB.
``acquired`` is written after the acquire transaction returned (a lease passed in a commit: the
``released`` event of that commit, written when it returned, is its start); ``releasing`` right
before the holder's release transaction is sent; a reclaim happens after the sweep's ``now``
(``swept_at``), when the lease was still there. So a lease certainly existed over ``[start, end]`` with ``end``
the earliest of its ``releasing.t`` and ``reclaimed.swept_at``. :func:`max_concurrent` overlays
these intervals per tenant: if more than ``cap`` of them overlap, more than ``cap`` leases really
coexisted — no false alarm is possible from timing slack (the slack only shortens intervals).
"""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: File name pattern of one process's log.
FILE_GLOB = "lease-events-*.jsonl"


class EventLog:
    """Appends lease events to ``<directory>/lease-events-<pid>.jsonl`` (re-opened after a fork)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid: int | None = None

    def write(self, event: str, t: float, **fields: object) -> None:
        """Append one event (``fields`` must be JSON-serialisable); one ``write(2)`` per line."""
        line = (json.dumps({"event": event, "t": t, "pid": os.getpid(), **fields}, sort_keys=True) + "\n").encode()
        with self._lock:
            if self._pid != os.getpid():
                self.directory.mkdir(parents=True, exist_ok=True)
                path = self.directory / f"lease-events-{os.getpid()}.jsonl"
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                self._pid = os.getpid()
            assert self._fd is not None
            os.write(self._fd, line)


def read_events(directory: str | os.PathLike) -> list[dict]:
    """Every event of every process's file in ``directory``, sorted by time; torn lines skipped."""
    events = []
    for path in sorted(Path(directory).glob(FILE_GLOB)):
        for line in path.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return sorted(events, key=lambda e: e["t"])


@dataclass(frozen=True)
class HeldInterval:
    """When one lease (``token``) certainly existed: ``[start_at, end_at]`` (end None: never ended)."""

    tenant_id: str
    job_id: str
    token: str
    start_at: float
    end_at: float | None


def held_intervals(events: Iterable[dict]) -> list[HeldInterval]:
    """The certainly-held interval of every lease with an ``acquired`` event, or passed in a
    commit's ``released`` one (module docstring)."""
    starts: dict[str, dict] = {}
    ends: dict[str, float] = {}
    for e in events:
        token = e.get("token")
        if not token:
            continue
        if e["event"] == "acquired":
            starts.setdefault(token, e)
        elif e["event"] == "released" and e.get("passed_token"):  # the commit took the next job's lease
            starts.setdefault(e["passed_token"], {"tenant": e.get("passed_tenant", e["tenant"]),
                                                  "job": e["passed_job"], "t": e["t"]})
        elif e["event"] == "releasing":
            ends[token] = min(ends.get(token, e["t"]), e["t"])
        elif e["event"] == "reclaimed":
            at = e.get("swept_at", e["t"])
            ends[token] = min(ends.get(token, at), at)
    return [HeldInterval(s["tenant"], s["job"], token, s["t"], ends.get(token)) for token, s in starts.items()]


def busy_intervals(events: Iterable[dict]) -> list[HeldInterval]:
    """Every lease's interval as its slot was busy: from ``acquired`` to the end of its release
    (``released``; else ``releasing`` or the reclaim), for utilisation. Longer than
    :func:`held_intervals` by the release transaction itself, so never use it for the cap check."""
    events = list(events)
    released = {e["token"]: e["t"] for e in events if e.get("event") == "released" and e.get("token")}
    return [HeldInterval(iv.tenant_id, iv.job_id, iv.token, iv.start_at,
                         released.get(iv.token, iv.end_at) if iv.end_at is not None else None)
            for iv in held_intervals(events)]


@dataclass(frozen=True)
class Peak:
    """The most leases one tenant certainly held at once, when, and which."""

    tenant_id: str
    leases: int
    at: float
    tokens: tuple[str, ...]


def _sweep_line(intervals: list[HeldInterval]) -> Iterator[tuple[float, int, HeldInterval]]:
    # Ends sort before starts at the same instant: touching intervals do not overlap.
    points = []
    for iv in intervals:
        if iv.end_at is not None and iv.end_at <= iv.start_at:
            continue  # reclaimed before its holder even logged the acquire: held only for an instant
        points.append((iv.start_at, 1, iv))
        points.append((iv.end_at if iv.end_at is not None else float("inf"), 0, iv))
    points.sort(key=lambda p: (p[0], p[1]))
    yield from points


def max_concurrent(events: Iterable[dict]) -> dict[str, Peak]:
    """Per tenant, the peak number of leases that certainly coexisted (see module docstring)."""
    by_tenant: dict[str, list[HeldInterval]] = defaultdict(list)
    for iv in held_intervals(events):
        by_tenant[iv.tenant_id].append(iv)
    peaks = {}
    for tenant_id, intervals in by_tenant.items():
        live: dict[str, HeldInterval] = {}
        best = Peak(tenant_id, 0, 0.0, ())
        for at, kind, iv in _sweep_line(intervals):
            if kind == 1:
                live[iv.token] = iv
                if len(live) > best.leases:
                    best = Peak(tenant_id, len(live), at, tuple(sorted(live)))
            else:
                live.pop(iv.token, None)
        peaks[tenant_id] = best
    return peaks


def cap_violations(events: Iterable[dict], caps: dict[str, int], default_cap: int) -> list[Peak]:
    """Peaks above the tenant's cap (``caps`` overrides ``default_cap``); empty means none."""
    return [peak for tenant_id, peak in max_concurrent(events).items()
            if peak.leases > caps.get(tenant_id, default_cap)]


def unterminated(events: Iterable[dict]) -> list[HeldInterval]:
    """Leases acquired but never seen released or reclaimed (still held, or a writer died)."""
    return [iv for iv in held_intervals(events) if iv.end_at is None]
