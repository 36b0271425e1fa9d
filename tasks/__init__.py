"""Celery side of the service: the app, ``FairTask``, the imposition task, the sweeper, submission.

``celery -A tasks worker -Q imposition -c 8`` finds :data:`app` here; importing this package
registers every task.
"""

from tasks.celery_app import app
from tasks.imposition_task import impose
from tasks.sweeper import sweep

__all__ = ["app", "impose", "sweep"]
