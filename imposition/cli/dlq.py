"""Dead-letter queues for operators: ``imposition dlq list [QUEUE]``, ``dlq redrive``, ``dlq purge``.

Each work queue ``Q`` (``Settings.work_queues``) has its dead-letter queue ``Q`` +
``Settings.dead_letter_suffix``, where SQS moves a message after ``Settings.max_receive_count``
receives (a poison message is expedited there, :mod:`tasks.worker`).

Reading a DLQ receives its messages with a visibility timeout of ``Settings.dlq_receive_visibility_s``
(at most ``Settings.dlq_scan_max_messages``), so each is seen once; ``list`` then makes every one
visible again at once (``ChangeMessageVisibility`` 0).

Redrive, per message: send a copy to the source queue with the same body and ``MessageGroupId``,
and only once that send succeeded delete it from the DLQ. A crash between the two leaves the
message in both queues (the DLQ copy visible again after the visibility timeout), never in none; a
second job message is harmless (a worker finds the job running or final and drops it). Received
messages are hidden from every other reader, a concurrent redrive included, so no message is sent
twice by two redrives. SQS's own ``StartMessageMoveTask`` is not used: the local endpoint (moto)
does not implement it, and ``--job`` needs to choose messages.

Why a message was dead-lettered, where known: ``poison`` (a body no task can run: not decodable, not
a task of ours) or ``max receives`` (a well-formed message received ``max_receive_count`` times: a
worker crashed or timed out on it each time).
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass

import click

from imposition.cli.main import JOB_ID


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered message.

    Attributes:
        queue: its source queue; message_id; receipt_handle (valid while the read that got it lasts).
        job_id, tenant_id: from the task's kwargs (None when the body does not say).
        task: the Celery task name, if the message is a task message.
        receive_count: SQS's ``ApproximateReceiveCount`` (receives in the source queue and here).
        group_id: its ``MessageGroupId`` (None if it has none).
        reason: ``poison: <what>`` or ``max receives`` (see module docstring).
        body: the raw SQS body, sent back unchanged by a redrive.
    """

    queue: str
    message_id: str
    receipt_handle: str
    job_id: str | None
    tenant_id: str | None
    task: str | None
    receive_count: int
    group_id: str | None
    reason: str
    body: str


def _task_fields(body: str) -> tuple[str | None, dict, str | None]:
    """(task name, kwargs, problem) of a kombu-on-SQS task message body (base64 of the kombu
    envelope, whose ``body`` is the base64 of ``[args, kwargs, embed]``); problem None if readable."""
    try:
        envelope = json.loads(base64.b64decode(body, validate=False))
        headers = envelope.get("headers") or {}
        inner = envelope["body"]
        if (envelope.get("properties") or {}).get("body_encoding") == "base64":
            inner = base64.b64decode(inner)
        payload = json.loads(inner)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None, {}, "undecodable body"
    task = headers.get("task") if isinstance(headers, dict) else None
    if isinstance(payload, list) and len(payload) == 3 and isinstance(payload[1], dict):
        kwargs = payload[1]
    elif isinstance(payload, dict) and isinstance(payload.get("kwargs"), dict):
        kwargs = payload["kwargs"]
    else:
        return task, {}, "body is not [args, kwargs, embed]"
    if task is None:
        return None, kwargs, "no task header"
    return task, kwargs, None


def _dead_letter(queue: str, message: dict) -> DeadLetter:
    from imposition.common.settings import get_settings

    attributes = message.get("Attributes", {})
    task, kwargs, problem = _task_fields(message["Body"])
    if problem is None and not str(task).startswith("imposition."):
        problem = f"unknown task {task!r}"
    count = int(attributes.get("ApproximateReceiveCount", 0))
    reason = f"poison: {problem}" if problem is not None else f"max receives ({get_settings().max_receive_count})"

    def text(name: str) -> str | None:
        value = kwargs.get(name)
        return value if isinstance(value, str) else None

    return DeadLetter(queue, message["MessageId"], message["ReceiptHandle"], text("job_id"), text("tenant_id"),
                      task, count, attributes.get("MessageGroupId"), reason, message["Body"])


def source_queues(queue: str | None = None) -> tuple[str, ...]:
    """The work queues whose DLQs to read: ``queue`` alone, or every work queue.

    Raises:
        click.BadParameter: ``queue`` is not a work queue (exit status 2).
    """
    from imposition.common.settings import get_settings

    queues = get_settings().work_queues
    if queue is None:
        return queues
    if queue not in queues:
        raise click.BadParameter(f"{queue!r} is not a work queue (one of {', '.join(queues)})", param_hint="QUEUE")
    return (queue,)


def receive_all(queue: str) -> list[DeadLetter]:
    """Receive every message of ``queue``'s DLQ (each hidden for ``Settings.dlq_receive_visibility_s``),
    at most ``Settings.dlq_scan_max_messages``, until a receive comes back empty."""
    from imposition.common import aws
    from imposition.common.settings import get_settings

    s = get_settings()
    url = aws.queue_url(s.dead_letter_queue(queue))
    got: dict[str, DeadLetter] = {}
    while len(got) < s.dlq_scan_max_messages:
        answer = aws.sqs().receive_message(
            QueueUrl=url, MaxNumberOfMessages=min(10, s.dlq_scan_max_messages - len(got)),
            VisibilityTimeout=s.dlq_receive_visibility_s, WaitTimeSeconds=0,
            AttributeNames=["All"], MessageSystemAttributeNames=["All"])
        messages = answer.get("Messages", [])
        if not messages:
            break
        for message in messages:
            got.setdefault(message["MessageId"], _dead_letter(queue, message))
    return list(got.values())


def _release(queue: str, letters: list[DeadLetter]) -> None:
    """Make received messages visible again at once (visibility 0), ten per request."""
    from imposition.common import aws
    from imposition.common.settings import get_settings

    url = aws.queue_url(get_settings().dead_letter_queue(queue))
    for start in range(0, len(letters), 10):
        batch = letters[start:start + 10]
        aws.sqs().change_message_visibility_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": letter.receipt_handle, "VisibilityTimeout": 0}
            for i, letter in enumerate(batch)])


def list_dead_letters(queue: str | None = None) -> list[DeadLetter]:
    """Every message of the DLQs of ``queue`` (or of every work queue), left in place and visible."""
    letters: list[DeadLetter] = []
    for source in source_queues(queue):
        received = receive_all(source)
        _release(source, received)
        letters += received
    return letters


def redrive(*, job_id: str | None = None, queue: str | None = None) -> list[DeadLetter]:
    """Put dead-lettered messages back on their source queue (all, or those of ``job_id``):
    send (same body, same ``MessageGroupId``), then delete from the DLQ. Messages not chosen are
    made visible again. Returns the messages moved.

    Raises:
        botocore.exceptions.ClientError: a send or delete failed; messages moved before it stay
            moved, the failed one stays in the DLQ (visible again after its visibility timeout).
    """
    from imposition.common import aws
    from imposition.common.settings import get_settings

    s = get_settings()
    moved: list[DeadLetter] = []
    for source in source_queues(queue):
        received = receive_all(source)
        chosen = [letter for letter in received if job_id is None or letter.job_id == job_id]
        _release(source, [letter for letter in received if letter not in chosen])
        target, dead = aws.queue_url(source), aws.queue_url(s.dead_letter_queue(source))
        for letter in chosen:
            extra = {"MessageGroupId": letter.group_id} if letter.group_id else {}
            aws.sqs().send_message(QueueUrl=target, MessageBody=letter.body, **extra)
            aws.sqs().delete_message(QueueUrl=dead, ReceiptHandle=letter.receipt_handle)
            moved.append(letter)
    return moved


def _show(letters: list[DeadLetter], as_json: bool) -> None:
    from imposition.cli.jobs import table

    if as_json:
        click.echo(json.dumps([{k: v for k, v in asdict(letter).items() if k not in ("receipt_handle", "body")}
                               for letter in letters], indent=2, sort_keys=True))
        return
    header = ["queue", "message", "job", "tenant", "receives", "reason"]
    rows = [[letter.queue, letter.message_id, letter.job_id or "-", letter.tenant_id or "-",
             str(letter.receive_count), letter.reason] for letter in letters]
    click.echo(table(header, rows) if rows else "no dead-lettered messages")


@click.group("dlq")
def dlq_group() -> None:
    """Inspect, redrive and purge the dead-letter queues."""


@dlq_group.command("list")
@click.argument("queue", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON array instead of the table.")
def dlq_list(queue: str | None, as_json: bool) -> None:
    """Messages in the DLQ of QUEUE (default: every work queue): queue, message id, job, tenant,
    receive count and the reason where known. The messages stay where they are."""
    _show(list_dead_letters(queue), as_json)


@dlq_group.command("redrive")
@click.argument("queue", required=False)
@click.option("--job", "job_id", type=JOB_ID, default=None, help="Only the messages of this job.")
@click.option("--all", "everything", is_flag=True, help="Every message.")
def dlq_redrive(queue: str | None, job_id: str | None, everything: bool) -> None:
    """Put messages back on their source queue (send, then delete: none lost, none doubled).

    Give exactly one of --job and --all (exit status 2 otherwise). Prints how many were moved.
    Exit status 1: --job named a job with no dead-lettered message."""
    if (job_id is None) == (not everything):
        raise click.UsageError("give exactly one of --job ID and --all")
    moved = redrive(job_id=job_id, queue=queue)
    if job_id is not None and not moved:
        raise click.ClickException(f"no dead-lettered message of job {job_id} (`imposition dlq list` shows them)")
    click.echo(f"redrove {len(moved)} message(s)")


@dlq_group.command("purge")
@click.argument("queue", required=False)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def dlq_purge(queue: str | None, yes: bool) -> None:
    """Delete every message of the DLQ of QUEUE (default: every work queue), after confirmation.

    Answering no exits with status 1 and deletes nothing; so does a second purge of one queue
    within 60 s (SQS allows one per 60 s). SQS may take up to 60 s to finish a purge."""
    from botocore.exceptions import ClientError

    from imposition.common import aws
    from imposition.common.settings import get_settings

    s = get_settings()
    names = [s.dead_letter_queue(source) for source in source_queues(queue)]
    if not yes:
        click.confirm(f"delete every message of {', '.join(names)}?", abort=True)
    for name in names:
        try:
            aws.sqs().purge_queue(QueueUrl=aws.queue_url(name))
        except ClientError as exc:
            if "PurgeQueueInProgress" not in exc.response.get("Error", {}).get("Code", ""):
                raise
            raise click.ClickException(f"{name}: a purge is already under way (SQS allows one per queue "
                                       "every 60 s); try again in a minute") from exc
        click.echo(f"purged {name}")
