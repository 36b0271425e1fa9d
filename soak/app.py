"""Celery app of the soak's workers: the real ``tasks`` app, writing the lease-event log.

``celery -A soak.app worker ...``; the log goes to ``$SOAK_EVENT_LOG_DIR`` (one file per process,
:mod:`tasks.lease_log`). With ``$SOAK_HOLD_MAX_S`` > 0 every run also holds its lease a random
0–``SOAK_HOLD_MAX_S`` seconds before the engine starts (at ``lease_acquired``), so leases overlap
and the tenants' caps bind as they would with longer jobs.
"""

from __future__ import annotations

import os
import random
import time

from leases import signals
from tasks import app, lease_log  # noqa: F401 (``celery -A`` finds ``app`` here)

lease_log.install(os.environ["SOAK_EVENT_LOG_DIR"])
_HOLD_MAX_S = float(os.environ.get("SOAK_HOLD_MAX_S", "0"))


@signals.lease_acquired.connect(weak=False)
def _hold(**_: object) -> None:
    if _HOLD_MAX_S > 0:
        time.sleep(random.uniform(0, _HOLD_MAX_S))
