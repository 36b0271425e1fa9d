"""Worker-side Celery customisations for SQS (``worker_consumer`` in :mod:`tasks.config`).

:class:`ServiceConsumer` makes poison messages end in the dead-letter queue instead of vanishing.
Celery acks a message it cannot decode (it would be lost) and rejects one it cannot route; on SQS
a rejected message of a queue with a redrive policy stays in the queue (kombu leaves it there) and
comes back only after the visibility timeout, so it would take ``maxReceiveCount`` × visibility
timeout to reach the DLQ. Here every poison message is rejected, its visibility set to 0 so SQS
offers it again at once, and after ``maxReceiveCount`` receives SQS moves it to the DLQ. Each
receive is logged and sent as the :data:`leases.signals.poison_message` signal (a metric counts it).

A task message whose body is not Celery protocol 2's ``[args, kwargs, embed]`` (``null``, an
object, a two-element list, args that are not a list, kwargs that are not an object) is refused as
``invalid_task`` before Celery builds its request: Celery unpacks the body outside its own
invalid-task handling, and the TypeError/ValueError it raised stopped the whole worker node
("Unrecoverable error"), again on every redelivery. A message that still makes Celery's request
building raise TypeError/ValueError/KeyError (a malformed header) is refused the same way, its
traceback logged.

:func:`run_reported_strategy` is the message strategy of :class:`tasks.base.FairTask`: Celery's
own, with the consumer's events seen through :class:`imposition.observability.events.RunReportedDispatcher`.
"""

from __future__ import annotations

import logging
import multiprocessing
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from celery.exceptions import InvalidTaskError
from celery.signals import worker_init, worker_shutting_down
from celery.worker.consumer import Consumer
from kombu.exceptions import ContentDisallowed, DecodeError
from vine import promise

from imposition.observability.events import EventsSideChannel, RunReportedDispatcher
from imposition.common import aws
from leases import signals

log = logging.getLogger(__name__)


#: Set by the worker's main process when its warm shutdown begins; the pool's children inherit
#: the shared byte (created at ``worker_init``, before they fork) and read it with :func:`shutting_down`.
_shutdown_flag: Any = None


@worker_init.connect
def _share_shutdown_flag(**_: object) -> None:
    global _shutdown_flag
    _shutdown_flag = multiprocessing.get_context("fork").Value("b", 0, lock=False)


@worker_shutting_down.connect
def _raise_shutdown_flag(**_: object) -> None:
    if _shutdown_flag is not None:
        _shutdown_flag.value = 1


def shutting_down() -> bool:
    """True in a worker process (main or pool child) once the worker's warm shutdown has begun
    (Celery's ``worker_shutting_down``, in the main process): a child's current job still runs to
    its end, but it should start nothing more (the hand-off in place). False outside a worker."""
    return bool(_shutdown_flag is not None and _shutdown_flag.value)


def expedite_to_dead_letter_queue(delivery_info: dict | None, receipt_handle: str | None, reason: str) -> None:
    """Record a poison message (log line + :data:`leases.signals.poison_message`) and make it
    visible again at once, so that SQS's redrive moves it to the DLQ after ``maxReceiveCount``
    receives instead of ``maxReceiveCount`` visibility timeouts. The caller rejects the message.

    Args:
        delivery_info: kombu's delivery info of the message (``sqs_queue``, ``sqs_message``, …).
        receipt_handle: its SQS receipt handle (kombu's delivery tag).
        reason: ``undecodable``, ``unknown_format``, ``unknown_task``, ``invalid_task``,
            ``invalid_fields`` or ``no_such_job``.
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


def task_body_problem(message) -> str | None:
    """What is wrong with the body of a task message, or None if it is well formed.

    Checks the message as Celery will read it: a protocol 2 message (a ``task`` header) carries
    ``[args, kwargs, embed]`` with args a list, kwargs an object and embed an object or null; a
    body that is an object holding ``args`` is Celery's hybrid form of protocol 1 (``args`` a
    list, ``kwargs`` an object if present). Messages without a ``task`` header are Celery's own
    to judge (protocol 1, not a task message).

    Raises:
        kombu.exceptions.DecodeError, kombu.exceptions.ContentDisallowed: the body cannot be
            decoded (Celery's decode-error and invalid-task handling apply).
    """
    headers = message.headers
    if not isinstance(headers, dict) or "task" not in headers:
        return None
    body = message.payload
    if isinstance(body, dict) and "args" in body:
        args, kwargs, embed = body["args"], body.get("kwargs", {}), None
    elif isinstance(body, (list, tuple)) and len(body) == 3:
        args, kwargs, embed = body
    else:
        return f"body {type(body).__name__} is not [args, kwargs, embed] (Celery protocol 2)"
    if not isinstance(args, (list, tuple)):
        return f"args is {type(args).__name__}, not a list"
    if not isinstance(kwargs, dict):
        return f"kwargs is {type(kwargs).__name__}, not an object"
    if embed is not None and not isinstance(embed, dict):
        return f"embed is {type(embed).__name__}, not an object"
    return None


class ServiceConsumer(EventsSideChannel, Consumer):
    """Celery's consumer with dead-letter handling of poison messages (see module docstring).

    :class:`imposition.observability.events.EventsSideChannel` sends its monitoring events to the Redis side
    channel (``Settings.events_url``) instead of SQS, for Flower.
    """

    def create_task_handler(self, promise=promise):
        """Celery's task-message handler, behind a check of the body's shape (module docstring).

        A malformed body goes to :meth:`on_invalid_task` (``invalid_task``) without reaching Celery;
        a TypeError/ValueError/KeyError from Celery's own request building is logged with its
        traceback and handled the same way, so one message can never stop the node.
        """
        handle = super().create_task_handler(promise)

        def on_task_received(message):
            try:
                problem = task_body_problem(message)
            except (DecodeError, ContentDisallowed):
                problem = None  # Celery's own decode-error and invalid-task handling take it
            if problem is not None:
                return self.on_invalid_task(None, message, InvalidTaskError(problem))
            try:
                return handle(message)
            except (TypeError, ValueError, KeyError) as exc:
                log.exception("task message %s could not be read by Celery; refusing it",
                              (message.headers or {}).get("id") if isinstance(message.headers, dict) else None)
                return self.on_invalid_task(None, message, InvalidTaskError(f"{type(exc).__name__}: {exc}"))

        return on_task_received

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


class _ConsumerWithEventer:
    """``consumer`` as a task's strategy sees it, with ``event_dispatcher`` replaced."""

    def __init__(self, consumer, event_dispatcher) -> None:
        self._consumer = consumer
        self.event_dispatcher = event_dispatcher

    def __getattr__(self, name: str):
        return getattr(self._consumer, name)


def run_reported_strategy(task, app, consumer, **options):
    """Celery's default message strategy (``celery.worker.strategy.default``) for ``task``, with
    its requests' events less ``task-received``/``task-started`` (:class:`RunReportedDispatcher`):
    the job sends those when it gets its lease."""
    from celery.worker.strategy import default  # noqa: PLC0415

    return default(task, app, _ConsumerWithEventer(consumer, RunReportedDispatcher(consumer)), **options)
