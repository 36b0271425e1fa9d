"""Celery side of the service: the app, ``FairTask``, the imposition task, the sweeper, submission.

``celery -A tasks worker -Q imposition -c 8`` finds :data:`app` here; importing this package
registers every task.
"""

from tasks.celery_app import app
from tasks.imposition_task import impose
from tasks.sweeper import sweep
import tasks.nodes  # noqa: E402,F401 (an imposition node registers its slots while it runs)
import webhooks.tasks  # noqa: E402,F401 (imposition.deliver_webhook and its job_finished receiver)
import observability.wiring  # noqa: E402,F401 (metrics receivers, exporter hooks, events, the sampler task)

__all__ = ["app", "impose", "sweep"]
