"""Helpers of the operator-command tests (imported by test modules only)."""

from __future__ import annotations

import json

from click.testing import CliRunner


def cli(*args: str, input: str | None = None, expect: int = 0):
    """Run ``imposition ARGS`` in this process (click's runner, the real stack); assert its exit status."""
    from imposition.cli.main import main

    result = CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)
    assert result.exit_code == expect, (result.exit_code, result.output)
    return result


def cli_json(*args: str):
    return json.loads(cli(*args).stdout)


def queue_bodies(queue: str, *, with_groups: bool = False) -> list:
    """Receive (and delete) every message of SQS queue ``queue``; their decoded kwargs (with
    ``with_groups``: ``(kwargs, MessageGroupId)`` pairs)."""
    from imposition.common import aws
    from imposition.cli.dlq import _task_fields

    url = aws.queue_url(queue)
    out = []
    while True:
        got = aws.sqs().receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                        VisibilityTimeout=60, AttributeNames=["All"]).get("Messages", [])
        if not got:
            return out
        for message in got:
            kwargs = _task_fields(message["Body"])[1]
            out.append((kwargs, message["Attributes"].get("MessageGroupId")) if with_groups else kwargs)
            aws.sqs().delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
