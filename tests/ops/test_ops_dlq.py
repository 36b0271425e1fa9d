"""``imposition dlq list|redrive|purge`` against the real local SQS (moto server)."""

from __future__ import annotations

import uuid
from collections import Counter

from tests.ops.helpers import cli, cli_json, queue_bodies


def _dead_letter_jobs(n: int, tenant: str) -> list[str]:
    """Publish ``n`` real job messages and move each to the imposition DLQ as SQS's redrive does
    (same body, same MessageGroupId); returns their job ids."""
    from imposition.common import aws
    from imposition.common.settings import get_settings
    from tasks.messages import publish_job

    s = get_settings()
    jobs = [uuid.uuid4().hex for _ in range(n)]
    for job_id in jobs:
        publish_job(tenant, job_id)
    source, dead = aws.queue_url(s.imposition_queue), aws.queue_url(s.dead_letter_queue(s.imposition_queue))
    moved = 0
    while moved < n:
        for message in aws.sqs().receive_message(QueueUrl=source, MaxNumberOfMessages=10, VisibilityTimeout=60,
                                                 AttributeNames=["All"]).get("Messages", []):
            group = message["Attributes"].get("MessageGroupId")
            aws.sqs().send_message(QueueUrl=dead, MessageBody=message["Body"],
                                   **({"MessageGroupId": group} if group else {}))
            aws.sqs().delete_message(QueueUrl=source, ReceiptHandle=message["ReceiptHandle"])
            moved += 1
    return jobs


def test_redrive_of_50_dead_lettered_messages_returns_exactly_50_none_doubled(new_tenant):
    from imposition.common.settings import get_settings
    from tests.admission.helpers import queue_messages

    s = get_settings()
    tenant = new_tenant()
    jobs = _dead_letter_jobs(50, tenant)
    listed = cli_json("dlq", "list", "imposition", "--json")
    assert sorted(m["job_id"] for m in listed) == sorted(jobs)
    assert {(m["tenant_id"], m["reason"]) for m in listed} == {(tenant, f"max receives ({s.max_receive_count})")}
    assert queue_messages(s.dead_letter_queue(s.imposition_queue)) == 50  # list left them there
    assert cli("dlq", "redrive", "--all").stdout.strip() == "redrove 50 message(s)"
    assert queue_messages(s.dead_letter_queue(s.imposition_queue)) == 0
    from imposition.common.tenancy import message_group_id

    redriven = queue_bodies(s.imposition_queue, with_groups=True)
    assert {group for _, group in redriven} == {message_group_id(tenant)}  # MessageGroupId kept
    counts = Counter(kwargs["job_id"] for kwargs, _ in redriven)  # bodies kept: each still names its job
    assert sorted(counts) == sorted(jobs) and set(counts.values()) == {1}  # exactly 50, none doubled


def test_redrive_of_one_job_moves_only_its_message(new_tenant):
    from imposition.common.settings import get_settings

    s = get_settings()
    jobs = _dead_letter_jobs(3, new_tenant())
    assert "redrove 1 message(s)" in cli("dlq", "redrive", "--job", jobs[1]).stdout
    assert [k["job_id"] for k in queue_bodies(s.imposition_queue)] == [jobs[1]]
    assert sorted(m["job_id"] for m in cli_json("dlq", "list", "--json")) == sorted([jobs[0], jobs[2]])
    cli("dlq", "redrive", expect=2)  # neither --job nor --all
    missing = cli("dlq", "redrive", "--job", "0" * 32, expect=1)  # a job with no dead letter: not a quiet "0"
    assert "no dead-lettered message of job " + "0" * 32 in missing.output
    assert sorted(m["job_id"] for m in cli_json("dlq", "list", "--json")) == sorted([jobs[0], jobs[2]])
    cli("dlq", "list", "no-such-queue", expect=2)


def test_a_poison_message_is_listed_with_its_reason(new_tenant):
    from imposition.common import aws
    from imposition.common.settings import get_settings

    s = get_settings()
    aws.sqs().send_message(QueueUrl=aws.queue_url(s.dead_letter_queue(s.notifications_queue)), MessageBody="garbage!")
    [letter] = cli_json("dlq", "list", "notifications", "--json")
    assert letter["reason"].startswith("poison:") and letter["job_id"] is None


def test_purge_asks_first(new_tenant):
    from imposition.common.settings import get_settings
    from tests.admission.helpers import queue_messages

    s = get_settings()
    _dead_letter_jobs(2, new_tenant())
    dlq = s.dead_letter_queue(s.imposition_queue)
    cli("dlq", "purge", "imposition", input="n\n", expect=1)
    assert queue_messages(dlq) == 2
    cli("dlq", "purge", "imposition", input="y\n")
    assert queue_messages(dlq) == 0
    assert "already under way" in cli("dlq", "purge", "imposition", "--yes", expect=1).output  # SQS: 1 per 60 s
    from imposition.common import aws

    other = s.dead_letter_queue(s.notifications_queue)
    aws.sqs().send_message(QueueUrl=aws.queue_url(other), MessageBody="x")
    cli("dlq", "purge", "notifications", "--yes")
    assert queue_messages(other) == 0
