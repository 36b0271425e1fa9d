"""Celery side of the service: the app, ``FairTask``, the imposition task, the sweeper, submission.

``celery -A tasks worker -Q imposition -c 8`` finds :data:`app` here, with every task registered
and :func:`tasks.wiring.install` applied (metrics, webhooks, events, the node registry).
"""

from .celery_app import app
from .imposition_task import impose
from .sweeper import sweep
from .wiring import install

install(app)

__all__ = ["app", "impose", "sweep"]
