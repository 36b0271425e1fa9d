"""``install(app)``: connect everything that hangs on the task signals, once, explicitly.

Like dramatiq's middleware added to a broker: the app is created bare (:mod:`tasks.celery_app`) and
:func:`install` adds, in every process that imports :mod:`tasks`::

    leases.signals ──► imposition.observability.metrics   (Prometheus counters and gauges)
                  ──► imposition.webhooks.tasks          (job_finished / lease_recovered → a delivery message)
    Celery signals ──► imposition.observability.exporter  (the worker's metrics endpoint)
                  ──► imposition.observability.events    (publishers' task-sent on the events side channel)
                  ──► tasks.nodes             (the slot registry of an imposition node)
                  ──► tasks.engine_gate       (no jobs while the node's engine or licence fails its check)
    app tasks      ◄── imposition.webhooks.tasks.deliver_webhook and drain_outbox, imposition.observability.sampler.sample_queues
                       (defined on imposition.common.celery_app.app, the one app object)

Nothing here does I/O; receivers run when their signal is sent.
"""

from __future__ import annotations

from celery import Celery

from imposition.observability import events, exporter, metrics, sampler
from . import engine_gate, nodes
from imposition.webhooks import tasks as webhook_tasks


#: Tasks of lower packages, defined on :data:`imposition.common.celery_app.app` (the same object as ``app``).
SHARED_TASKS = (webhook_tasks.TASK_NAME, webhook_tasks.DRAIN_TASK_NAME, sampler.TASK_NAME)


def install(app: Celery) -> Celery:
    """Connect the receivers above to the signals; returns ``app``.

    Idempotent: a receiver connected twice is connected once.
    """
    metrics.install()
    webhook_tasks.install()
    exporter.install()
    events.install()
    nodes.install()
    engine_gate.install()
    return app
