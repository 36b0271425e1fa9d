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

from service import aws
from tasks import signals

log = logging.getLogger(__name__)


def _expedite_to_dead_letter_queue(message, reason: str) -> None:
    """Make a rejected poison message visible again at once, so SQS's redrive moves it soon."""
    info = message.delivery_info or {}
    queue_url = info.get("sqs_queue")
    sqs_message = info.get("sqs_message") or {}
    queue = info.get("routing_key") or (queue_url or "").rsplit("/", 1)[-1]
    signals.poison_message.send(sender=None, queue=queue, reason=reason, message_id=sqs_message.get("MessageId"))
    log.error("poison message %s on queue %s (%s): left for the dead-letter queue after %s receive(s)",
              sqs_message.get("MessageId"), queue, reason,
              (sqs_message.get("Attributes") or {}).get("ApproximateReceiveCount", "?"))
    if not queue_url or not message.delivery_tag:
        return
    try:
        aws.sqs().change_message_visibility(QueueUrl=queue_url, ReceiptHandle=message.delivery_tag,
                                            VisibilityTimeout=0)
    except (BotoCoreError, ClientError) as exc:
        log.warning("could not release poison message %s: %s", sqs_message.get("MessageId"), exc)


class ServiceConsumer(Consumer):
    """Celery's consumer with dead-letter handling of poison messages (see module docstring)."""

    def on_decode_error(self, message, exc):
        """Reject (not ack, as Celery does) a message whose body cannot be decoded."""
        log.error("cannot decode message: %s (content type %r)", exc, message.content_type)
        message.reject_log_error(log, self.connection_errors)
        _expedite_to_dead_letter_queue(message, "undecodable")

    def on_unknown_message(self, body, message):
        """A message without a task header (not a Celery message)."""
        super().on_unknown_message(body, message)
        _expedite_to_dead_letter_queue(message, "unknown_format")

    def on_unknown_task(self, body, message, exc):
        """A message naming a task this worker does not know."""
        super().on_unknown_task(body, message, exc)
        _expedite_to_dead_letter_queue(message, "unknown_task")

    def on_invalid_task(self, body, message, exc):
        """A task message with malformed fields."""
        super().on_invalid_task(body, message, exc)
        _expedite_to_dead_letter_queue(message, "invalid_task")
