"""The Celery application (``celery -A tasks ...``), configured from :mod:`celeryconfig`."""

from __future__ import annotations

import logging

from celery import Celery
from celery.signals import after_setup_logger, worker_process_init

from leases.models import reset_connections

app = Celery("imposition")
app.config_from_object("celeryconfig")


@worker_process_init.connect
def _fresh_clients_after_fork(**_: object) -> None:
    """A prefork child must not reuse its parent's DynamoDB connection pool."""
    reset_connections()


@after_setup_logger.connect
def _quiet_sdk_loggers(**_: object) -> None:
    """botocore logs every credential and endpoint lookup at INFO; keep worker logs readable."""
    for name in ("botocore", "boto3", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
