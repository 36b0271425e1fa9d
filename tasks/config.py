"""Celery configuration (``app.config_from_object("tasks.config")``), derived from
:mod:`imposition.common.settings` and :mod:`imposition.common.clocks`.

Nothing here is a number of its own: every value comes from the settings object or the clocks, so
the visibility timeout Celery knows is the one ``imposition provision`` gave the queues.

The broker is SQS through :mod:`tasks.sqs_transport` (kombu's SQS transport, made to ride out an
erroring or unreachable endpoint; selected by its URL scheme), with *predefined* queues (kombu then
never calls ``CreateQueue`` with attributes of its own); their URLs are looked up when a worker starts, in its main process before the pool forks
(:func:`bind_queue_urls` on ``worker_init``, so no child looks them up again), or else when a
broker channel opens (:class:`tasks.sqs_transport.Channel`: a command's first publish); never at
import. Run ``imposition provision`` first.
Remote control and gossip need broadcast (fanout) queues that SQS cannot give a predefined setup,
so they are off; monitoring events travel through the Redis side channel instead (see
``tasks.worker``).
"""

from typing import Any

from kombu import Exchange, Queue

from imposition.common import aws
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings
from imposition.common.tenancy import MAINTENANCE_GROUP
from tasks import sqs_transport

_settings = get_settings()
_clocks = get_clocks()

broker_url = sqs_transport.register()  # "imposition-sqs://"; not broker_transport: see tasks.sqs_transport
broker_connection_retry_on_startup = True
broker_transport_options = {
    "region": _settings.aws_region,
    # no URLs here: tasks.sqs_transport.Channel looks them up when a channel opens
    "predefined_queues": {name: {} for name in _settings.work_queues},
    # kombu applies this only to queues it creates; ours are provisioned with the same value.
    "visibility_timeout": _clocks.visibility_timeout_s,
    "wait_time_seconds": _settings.sqs_wait_time_s,
    "polling_interval": _settings.sqs_polling_interval_s,
    "prefetch_recheck_s": _settings.sqs_prefetch_recheck_s,
    "receive_backoff_initial_s": _settings.sqs_receive_backoff_initial_s,
    "receive_backoff_max_s": _settings.sqs_receive_backoff_max_s,
    "shutdown_receive_margin_s": _settings.sqs_shutdown_receive_margin_s,
}

task_queues = tuple(
    Queue(name, Exchange(name, type="direct"), routing_key=name) for name in _settings.work_queues
)
task_default_queue = _settings.imposition_queue
task_create_missing_queues = False
task_routes = {
    "imposition.sweep": {"queue": _settings.maintenance_queue},
    "imposition.deliver_webhook": {"queue": _settings.notifications_queue},
    "imposition.sample_queues": {"queue": _settings.maintenance_queue},
    "imposition.drain_webhook_outbox": {"queue": _settings.maintenance_queue},
}

task_serializer = "json"
accept_content = ["json"]
task_ignore_result = True
result_backend = None

# docs/design.md §1: acks_late, one message at a time per slot.
task_acks_late = True
task_reject_on_worker_lost = True  # a killed child's message is requeued; see tasks.base.FairTask.reject_on_worker_lost
worker_prefetch_multiplier = 1
worker_concurrency = _settings.slots_per_node
worker_proc_alive_timeout = _settings.worker_process_start_timeout_s
worker_enable_remote_control = False
worker_consumer = "tasks.worker:ServiceConsumer"
# Monitoring events for Flower go to the Redis side channel (imposition.observability.events), never to SQS:
# the worker's through ServiceConsumer, publishers' task-sent through an after_task_publish receiver
# (so Celery's own task-sent, which would use the SQS producer, stays off).
worker_send_task_events = bool(_settings.events_url)
task_send_sent_event = False

beat_schedule = {
    "sweep-expired-leases": {
        "task": "imposition.sweep",
        "schedule": _settings.sweep_interval_s,
        "options": {"queue": _settings.maintenance_queue, "MessageGroupId": MAINTENANCE_GROUP},
    },
    "drain-webhook-outbox": {  # imposition.webhooks.tasks.drain_outbox: the outbox's safety net (issue 15)
        "task": "imposition.drain_webhook_outbox",
        "schedule": _settings.webhook_outbox_drain_interval_s,
        "options": {"queue": _settings.maintenance_queue, "MessageGroupId": MAINTENANCE_GROUP},
    },
    "sample-queues": {  # imposition.observability.sampler: SQS depths and CloudWatch ages as gauges
        "task": "imposition.sample_queues",
        "schedule": _settings.sample_interval_s,
        "options": {"queue": _settings.maintenance_queue, "MessageGroupId": MAINTENANCE_GROUP},
    },
}


def bind_queue_urls(conf: Any) -> None:
    """Write each work queue's URL into ``conf.broker_transport_options["predefined_queues"]`` (one
    ``GetQueueUrl`` per queue), so every process forked afterwards inherits them.

    Raises:
        botocore.exceptions.ClientError: a queue was never provisioned (``NonExistentQueue``).
    """
    options = dict(conf.broker_transport_options)
    options["predefined_queues"] = {name: {**queue, "url": queue.get("url") or aws.queue_url(name)}
                                    for name, queue in options.get("predefined_queues", {}).items()}
    conf.broker_transport_options = options
