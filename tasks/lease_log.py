"""Write the lease-event log (:mod:`leases.eventlog`) from the domain signals of :mod:`leases.signals`.

``install(directory)`` connects one receiver per signal; call it at import time of a Celery app
module (the soak's and the fault-injection tests' apps do), before any worker process forks, so
every prefork child and the maintenance worker log to ``directory``. Receivers are connected in
call order: install this before any receiver that may kill the process at the same signal, so the
event is on disk first.
"""

from __future__ import annotations

import os
import time

from leases.eventlog import EventLog
from leases import signals

_installed: dict[str, EventLog] = {}


def install(directory: str | os.PathLike) -> EventLog:
    """Log ``acquired``/``releasing``/``released``/``lost``/``reclaimed`` events to ``directory``;
    idempotent."""
    key = os.fspath(directory)
    if key in _installed:
        return _installed[key]
    log = _installed[key] = EventLog(directory)

    def fields(lease) -> dict:
        return {"tenant": lease.tenant_id, "job": lease.job_id, "token": lease.token}

    def on_acquired(sender=None, lease=None, **_: object) -> None:
        log.write("acquired", time.time(), **fields(lease))

    def on_releasing(sender=None, lease=None, outcome=None, **_: object) -> None:
        log.write("releasing", time.time(), outcome=outcome, **fields(lease))

    def on_released(sender=None, lease=None, outcome=None, passed=None, **_: object) -> None:
        slot = ({"passed_token": passed.token, "passed_job": passed.job_id, "passed_tenant": passed.tenant_id}
                if passed is not None else {})
        log.write("released", time.time(), outcome=outcome, **slot, **fields(lease))

    def on_lost(sender=None, lease=None, detail="", **_: object) -> None:
        log.write("lost", time.time(), detail=str(detail), **fields(lease))

    def on_recovered(sender=None, lease=None, requeued=None, swept_at=None, **_: object) -> None:
        # Without the sweep's time, the expiry: the reclaim came after it, so the lease was there.
        until = swept_at if swept_at is not None else float(lease.expires_at)
        log.write("reclaimed", time.time(), swept_at=until, requeued=bool(requeued), **fields(lease))

    signals.lease_acquired.connect(on_acquired, weak=False)
    signals.lease_releasing.connect(on_releasing, weak=False)
    signals.lease_released.connect(on_released, weak=False)
    signals.lease_lost.connect(on_lost, weak=False)
    signals.lease_recovered.connect(on_recovered, weak=False)
    return log
