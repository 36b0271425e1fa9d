"""``imposition provision``: create (or converge) every AWS resource the service uses. Idempotent.

* SQS standard queues ``imposition`` and ``maintenance``, each with its own dead-letter queue
  (``<name>-dlq``) and a redrive policy (``maxReceiveCount``, default 5). The visibility timeout is
  :attr:`imposition.common.clocks.Clocks.visibility_timeout_s`: Celery uses these queues as predefined queues
  and never creates queues of its own, so this attribute is the one that counts.
* DynamoDB tables ``tenants``, ``leases`` (with its expiry index), ``jobs`` (with its by-tenant
  index) and ``tokens`` (the durable idempotency-token claims), on-demand capacity; DynamoDB TTL
  enabled on ``expires_at`` of ``tokens`` and of ``jobs`` (a final job's retention), also on a
  table that exists already.
* The KMS key of the tenants' webhook secrets, when ``webhook_secret_kms_key_id`` is an alias that
  names none yet (:mod:`imposition.webhooks.secrets`).
* The S3 bucket for inputs and plate files, with its lifecycle rules (job objects expire after
  ``job_retention_days``: :mod:`imposition.common.retention`).

Running it twice changes nothing; running it after a clock changed updates the queue attributes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from leases.models import ALL_MODELS, JOB_TTL_ATTRIBUTE, TOKEN_CLAIM_TTL_ATTRIBUTE, JobItem, TokenClaimItem
from imposition.common import aws
from imposition.common.clocks import Clocks, get_clocks
from imposition.common.retention import bucket_lifecycle_rules
from imposition.common.settings import Settings, get_settings

log = logging.getLogger(__name__)

#: Dead-letter queues keep messages for the SQS maximum, 14 days (AWS SQS quotas), for inspection.
DLQ_RETENTION_S = 14 * 24 * 3600


@dataclass
class ProvisionReport:
    """What :func:`provision` found or made: names mapped to ``"created"`` or ``"exists"``."""

    queues: dict[str, str] = field(default_factory=dict)
    tables: dict[str, str] = field(default_factory=dict)
    bucket: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)


def work_queue_attributes(dlq_arn: str, settings: Settings, clocks: Clocks) -> dict[str, str]:
    """SQS attributes of a work queue: visibility timeout (derived) and redrive to ``dlq_arn``."""
    return {
        "VisibilityTimeout": str(clocks.visibility_timeout_s),
        "RedrivePolicy": json.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(settings.max_receive_count)}
        ),
    }


def _ensure_queue(name: str, attributes: dict[str, str]) -> tuple[str, str]:
    """Create queue ``name`` or converge its attributes; return (url, "created" | "exists")."""
    sqs = aws.sqs()
    try:
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in (
            "AWS.SimpleQueueService.NonExistentQueue",
            "QueueDoesNotExist",
        ):
            raise
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        return url, "created"
    sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    return url, "exists"


def provision_queues(settings: Settings, clocks: Clocks) -> dict[str, str]:
    """Create every work queue and its DLQ; return queue name → "created" | "exists"."""
    out: dict[str, str] = {}
    sqs = aws.sqs()
    for queue in settings.work_queues:
        dlq = settings.dead_letter_queue(queue)
        dlq_url, out[dlq] = _ensure_queue(dlq, {"MessageRetentionPeriod": str(DLQ_RETENTION_S)})
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        _, out[queue] = _ensure_queue(queue, work_queue_attributes(dlq_arn, settings, clocks))
    return out


def provision_tables() -> dict[str, str]:
    """Create the DynamoDB tables that do not exist; return table name → "created" | "exists"."""
    out: dict[str, str] = {}
    for model in ALL_MODELS:
        name = model.Meta.table_name
        if model.exists():
            out[name] = "exists"
        else:
            model.create_table(wait=True, billing_mode="PAY_PER_REQUEST")
            out[name] = "created"
    ensure_ttl(TokenClaimItem.Meta.table_name, TOKEN_CLAIM_TTL_ATTRIBUTE)
    ensure_ttl(JobItem.Meta.table_name, JOB_TTL_ATTRIBUTE)
    return out


def ensure_ttl(table: str, attribute: str) -> str:
    """Enable DynamoDB TTL on ``table`` by ``attribute`` (epoch seconds) unless it is on already;
    returns ``"enabled"`` (this call turned it on) or ``"exists"``.

    Raises:
        botocore.exceptions.ClientError: AWS refused (permissions; TTL on another attribute already:
            ``ValidationException``, changed only by hand).
    """
    dynamodb = aws.client("dynamodb")
    current = dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    if current.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") and current.get("AttributeName") == attribute:
        return "exists"
    dynamodb.update_time_to_live(TableName=table,
                                 TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute})
    log.info("DynamoDB TTL enabled on %s.%s", table, attribute)
    return "enabled"


def provision_bucket(settings: Settings) -> dict[str, str]:
    """Create the S3 bucket if missing and set its lifecycle rules
    (:func:`imposition.common.retention.bucket_lifecycle_rules`: job objects expire after
    ``job_retention_days``); return bucket name → "created" | "exists"."""
    s3 = aws.s3()
    try:
        s3.head_bucket(Bucket=settings.bucket)
        state = "exists"
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("404", "NoSuchBucket", "NotFound"):
            raise
        kwargs: dict = {"Bucket": settings.bucket}
        if settings.aws_region != "us-east-1":  # us-east-1 takes no LocationConstraint (S3 API reference)
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": settings.aws_region}
        s3.create_bucket(**kwargs)
        state = "created"
    s3.put_bucket_lifecycle_configuration(Bucket=settings.bucket,
                                          LifecycleConfiguration={"Rules": bucket_lifecycle_rules(settings)})
    return {settings.bucket: state}


def provision(settings: Settings | None = None) -> ProvisionReport:
    """Create or converge queues, tables and bucket. Safe to run any number of times.

    Raises:
        botocore.exceptions.ClientError: AWS refused a call (permissions, limits).
        imposition.common.clocks.ClockError: the configured clocks break a rule of docs/design.md §4.
    """
    s = settings or get_settings()
    clocks = get_clocks()
    from imposition.webhooks.secrets import ensure_key  # noqa: PLC0415 (KMS only when provisioning)

    return ProvisionReport(
        queues=provision_queues(s, clocks), tables=provision_tables(), bucket=provision_bucket(s),
        keys={s.webhook_secret_kms_key_id: ensure_key(s)},
    )
