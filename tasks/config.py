"""The Celery settings derived from :mod:`imposition.common.settings` and :mod:`imposition.common.clocks`.

``celeryconfig`` holds Celery's constants; :func:`derived` gives the rest as the app's defaults.
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
from . import sqs_transport

def derived() -> dict[str, Any]:
    """The Celery settings computed from the service's settings and clocks (no I/O).

    Given to the app as defaults (:func:`tasks.celery_app.configure`): ``celeryconfig`` and an
    operator's overrides take precedence. Registers our transport's URL scheme with kombu.
    """
    settings, clocks = get_settings(), get_clocks()
    sqs_transport.register()
    maintenance = {"queue": settings.maintenance_queue, "MessageGroupId": MAINTENANCE_GROUP}
    return {
        "broker_transport_options": {
            "region": settings.aws_region,
            # no URLs here: tasks.sqs_transport.Channel looks them up when a channel opens
            "predefined_queues": {name: {} for name in settings.work_queues},
            # kombu applies this only to queues it creates; ours are provisioned with the same value.
            "visibility_timeout": clocks.visibility_timeout_s,
            "wait_time_seconds": settings.sqs_wait_time_s,
            "polling_interval": settings.sqs_polling_interval_s,
            "prefetch_recheck_s": settings.sqs_prefetch_recheck_s,
            "receive_backoff_initial_s": settings.sqs_receive_backoff_initial_s,
            "receive_backoff_max_s": settings.sqs_receive_backoff_max_s,
            "shutdown_receive_margin_s": settings.sqs_shutdown_receive_margin_s,
        },
        "task_queues": tuple(Queue(name, Exchange(name, type="direct"), routing_key=name)
                             for name in settings.work_queues),
        "task_default_queue": settings.imposition_queue,
        "task_routes": {
            "imposition.sweep": {"queue": settings.maintenance_queue},
            "imposition.deliver_webhook": {"queue": settings.notifications_queue},
            "imposition.sample_queues": {"queue": settings.maintenance_queue},
            "imposition.drain_webhook_outbox": {"queue": settings.maintenance_queue},
        },
        "worker_concurrency": settings.slots_per_node,
        "worker_proc_alive_timeout": settings.worker_process_start_timeout_s,
        "worker_send_task_events": bool(settings.events_url),
        # beat's scheduler loop stamps each turn for its /healthz (tasks.beat)
        "beat_scheduler": f"{__package__}.beat:HealthScheduler",
        "beat_max_loop_interval": settings.beat_max_loop_interval_s,
        "beat_schedule": {
            "sweep-expired-leases": {"task": "imposition.sweep", "schedule": settings.sweep_interval_s,
                                     "options": maintenance},
            # the webhook outbox's safety net
            "drain-webhook-outbox": {"task": "imposition.drain_webhook_outbox",
                                     "schedule": settings.webhook_outbox_drain_interval_s, "options": maintenance},
            # SQS depths and CloudWatch ages as gauges (imposition.observability.sampler)
            "sample-queues": {"task": "imposition.sample_queues", "schedule": settings.sample_interval_s,
                              "options": maintenance},
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
