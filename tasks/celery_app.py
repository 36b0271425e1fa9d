"""The Celery application (``celery -A tasks ...``): ``celeryconfig``, over the defaults that
:func:`tasks.config.derived` computes from the service's settings.

Nothing here calls AWS at import: the queue URLs are looked up when a broker channel opens (a
worker's start, a command's first publish; :class:`tasks.sqs_transport.Channel`).
"""

from __future__ import annotations

import logging

from imposition.common.celery_app import app as service_app
from celery.signals import after_setup_logger, worker_init, worker_process_init

from leases.models import ALL_MODELS, reset_connections
from leases.dynamo import tx_connection
from imposition.common import aws
from imposition.common.settings import get_settings
from .config import bind_queue_urls, derived
from .results import ImpositionResult

log = logging.getLogger(__name__)

app = service_app  # created in imposition.common.celery_app, so lower packages define tasks on it


def _derived_unless_configured() -> dict[str, object]:
    """:func:`tasks.config.derived`, less what the configuration module sets: the module wins.

    Celery's ``add_defaults`` layer sits above the configuration module, so the keys it sets are
    left out here."""
    configured = app.loader.conf
    return {key: value for key, value in derived().items() if key not in configured}


app.add_defaults(_derived_unless_configured)  # a promise: evaluated when the configuration is first read
# Every AsyncResult of this app (impose.delay's, app.AsyncResult(job_id)'s) cancels on revoke().
app.AsyncResult = app.subclass_with_self(ImpositionResult)


@worker_init.connect
def _bind_queue_urls(sender: object = None, **_: object) -> None:
    """The worker's main process, before the pool forks: the queue URLs, looked up once for all children."""
    bind_queue_urls(app.conf)
    aws.preload_service_models()  # the children inherit the parsed botocore models


@worker_process_init.connect
def _fresh_clients_after_fork(**_: object) -> None:
    """A prefork child must not reuse its parent's DynamoDB connection pool; it opens its own AWS
    clients (one per PynamoDB model, all on one botocore session whose service models the parent
    parsed before the fork: :func:`imposition.common.aws.preload_service_models`) and its broker channel before its first job (the engine package is already imported by the
    parent, before the fork), so neither the first job of each slot nor its first hand-off pays
    for them (they did: 2–6 s per slot under load, seen in a per-call trace of bench-sched)."""
    reset_connections()
    aws.sqs(), aws.s3(), tx_connection()
    for model in ALL_MODELS:  # each model has its own botocore client, created on first access
        aws.on_shared_session(model._get_connection().connection).client  # noqa: B018 (the access creates it)
    with app.producer_or_acquire() as producer:  # the broker channel the hand-off publishes on
        channel = producer.connection.default_channel
        for queue in get_settings().work_queues:  # kombu opens one boto3 client per queue, on first use
            channel.sqs(queue=queue)
    log.info("slot warmed up")


@after_setup_logger.connect
def _quiet_sdk_loggers(**_: object) -> None:
    """botocore logs every credential and endpoint lookup at INFO; keep worker logs readable."""
    for name in ("botocore", "boto3", "urllib3"):
        logging.getLogger(name).setLevel(logging.WARNING)
