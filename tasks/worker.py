"""Worker-side Celery customisations for SQS (``worker_consumer`` in :mod:`celeryconfig`).

:class:`ServiceConsumer` makes poison messages end in the dead-letter queue instead of vanishing.
Celery acks a message it cannot decode (it would be lost) and rejects one it cannot route; on SQS
a rejected message of a queue with a redrive policy stays in the queue (kombu leaves it there) and
comes back only after the visibility timeout, so it would take ``maxReceiveCount`` × visibility
timeout to reach the DLQ. Here every poison message is rejected, its visibility set to 0 so SQS
offers it again at once, and after ``maxReceiveCount`` receives SQS moves it to the DLQ. Each
receive is logged and sent as the :data:`tasks.signals.poison_message` signal (a metric counts it).
"""

from __future__ import annotations

import logging

from botocore.exceptions import BotoCoreError, ClientError
from celery.worker.consumer import Consumer

from observability.events import EventsSideChannel
from service import aws
from tasks import signals

log = logging.getLogger(__name__)


def expedite_to_dead_letter_queue(delivery_info: dict | None, receipt_handle: str | None, reason: str) -> None:
    """Record a poison message (log line + :data:`tasks.signals.poison_message`) and make it
    visible again at once, so that SQS's redrive moves it to the DLQ after ``maxReceiveCount``
    receives instead of ``maxReceiveCount`` visibility timeouts. The caller rejects the message.

    Args:
        delivery_info: kombu's delivery info of the message (``sqs_queue``, ``sqs_message``, …).
        receipt_handle: its SQS receipt handle (kombu's delivery tag).
        reason: ``undecodable``, ``unknown_format``, ``unknown_task``, ``invalid_task`` or
            ``invalid_fields``.
    """
    info = delivery_info or {}
    queue_url = info.get("sqs_queue")
    sqs_message = info.get("sqs_message") or {}
    queue = info.get("routing_key") or (queue_url or "").rsplit("/", 1)[-1]
    signals.poison_message.send(sender=None, queue=queue, reason=reason, message_id=sqs_message.get("MessageId"))
    log.error("poison message %s on queue %s (%s): left for the dead-letter queue after %s receive(s)",
              sqs_message.get("MessageId"), queue, reason,
              (sqs_message.get("Attributes") or {}).get("ApproximateReceiveCount", "?"))
    if not queue_url or not receipt_handle:
        return
    try:
        aws.sqs().change_message_visibility(QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=0)
    except (BotoCoreError, ClientError) as exc:
        log.warning("could not release poison message %s: %s", sqs_message.get("MessageId"), exc)


def _expedite(message, reason: str) -> None:
    expedite_to_dead_letter_queue(message.delivery_info, message.delivery_tag, reason)


class ServiceConsumer(EventsSideChannel, Consumer):
    """Celery's consumer with dead-letter handling of poison messages (see module docstring).

    :class:`observability.events.EventsSideChannel` sends its monitoring events to the Redis side
    channel (``Settings.events_url``) instead of SQS, for Flower.
    """

    def on_decode_error(self, message, exc):
        """Reject (not ack, as Celery does) a message whose body cannot be decoded."""
        log.error("cannot decode message: %s (content type %r)", exc, message.content_type)
        message.reject_log_error(log, self.connection_errors)
        _expedite(message, "undecodable")

    def on_unknown_message(self, body, message):
        """A message without a task header (not a Celery message)."""
        super().on_unknown_message(body, message)
        _expedite(message, "unknown_format")

    def on_unknown_task(self, body, message, exc):
        """A message naming a task this worker does not know."""
        super().on_unknown_task(body, message, exc)
        _expedite(message, "unknown_task")

    def on_invalid_task(self, body, message, exc):
        """A task message with malformed fields."""
        super().on_invalid_task(body, message, exc)
        _expedite(message, "invalid_task")
