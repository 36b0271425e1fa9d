"""Celery's configuration module for the imposition service: constants only.

The app reads it with ``app.config_from_object(os.environ.get("CELERY_CONFIG_MODULE", "celeryconfig"))``,
so an operator overrides it the usual ways: a ``celeryconfig.py`` of their own earlier on the path,
``celery --config mymodule``, or ``CELERY_CONFIG_MODULE``. Start from ``from celeryconfig import *``.

Values derived from the service's settings (queue names and routes, the visibility timeout, the
concurrency, the beat schedule) are not here: :func:`tasks.config.derived` computes them from
``IMPOSITION_*`` and gives them as defaults, which this module and its overrides take precedence over.
"""

#: Our SQS transport, by URL scheme (:mod:`tasks.sqs_transport`).
broker_url = "imposition-sqs://"
broker_connection_retry_on_startup = True

#: The jobs table is the result store: ``AsyncResult.get()`` reads the job item (:mod:`tasks.results`).
#: Workers write the job item themselves, so Celery stores nothing.
result_backend = "tasks.results:JobTableBackend"
task_ignore_result = True

task_serializer = "json"
accept_content = ["json"]
task_create_missing_queues = False

# docs/design.md §1: acks late, one message at a time per slot; a killed child's message is requeued.
task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1

# SQS has no fanout queues for remote control or gossip. Monitoring events go to the Redis side
# channel (imposition.observability.events); Celery's own task-sent would go to SQS.
worker_enable_remote_control = False
task_send_sent_event = False
worker_consumer = "tasks.worker:ServiceConsumer"
