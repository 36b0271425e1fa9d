"""``imposition provision``: apply the queues, tables and bucket of the service's CloudFormation
template (:mod:`imposition.cli.template`) with plain API calls. Idempotent.

The template is the one source of truth: on AWS a platform team deploys it as a stack
(``imposition deploy``, docs/deploy.md), which also makes the webhook key and the roles. This path
serves the local stack (``make run``, the tests), whose DynamoDB lives on an endpoint of its own
(devstack.localaws) that one CloudFormation stack cannot reach, and a developer's account. It
needs create rights, and it converges what it finds to the template:

* SQS queues (each work queue and its ``<name>-dlq``): created, or their attributes set to the
  template's (visibility from :attr:`imposition.common.clocks.Clocks.visibility_timeout_s`, redrive);
* DynamoDB tables: created with the template's keys, indexes, billing, encryption and deletion
  protection; an index the template has and the table lacks is added (one at a time: DynamoDB
  builds one per ``UpdateTable``); TTL and point-in-time recovery switched on as the template says;
* the S3 bucket: created, then its encryption, public-access block and lifecycle rules set
  (:func:`imposition.common.retention.bucket_lifecycle_rules`, the template's rules in the S3 API's shape);
* the KMS key of the tenants' webhook secrets, when ``webhook_secret_kms_key_id`` is an alias that
  names none yet (:func:`imposition.webhooks.secrets.ensure_key`).

The roles are the stack's alone (``imposition deploy``): the local stack enforces no IAM.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from imposition.cli.template import render
from imposition.common import aws
from imposition.common.retention import bucket_lifecycle_rules
from imposition.common.settings import Settings, get_settings

log = logging.getLogger(__name__)


class TtlConflict(RuntimeError):
    """A table has DynamoDB TTL on another attribute than the template's; DynamoDB changes it only
    after TTL is disabled, which may take up to an hour: the message names table and attributes."""


@dataclass
class ProvisionReport:
    """What :func:`provision` found or made: names mapped to ``"created"``, ``"exists"`` or, for a
    table, ``"exists, index <name> added"``."""

    queues: dict[str, str] = field(default_factory=dict)
    tables: dict[str, str] = field(default_factory=dict)
    bucket: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {logical: resource for logical, resource in template["Resources"].items() if resource["Type"] == kind}


def _ensure_queue(name: str, attributes: dict[str, str]) -> tuple[str, str]:
    """Create queue ``name`` or converge its attributes; return (url, "created" | "exists")."""
    sqs = aws.sqs()
    try:
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
            raise
        return sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"], "created"
    sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    return url, "exists"


def provision_queues(template: dict[str, Any]) -> dict[str, str]:
    """Create or converge every queue of ``template`` (dead-letter queues first, so a redrive can
    name their ARN); return queue name → "created" | "exists"."""
    queues = _of_type(template, "AWS::SQS::Queue")
    arns: dict[str, str] = {}
    out: dict[str, str] = {}
    # a queue whose redrive names another is made after it
    for logical in sorted(queues, key=lambda q: "RedrivePolicy" in queues[q]["Properties"]):
        properties = dict(queues[logical]["Properties"])
        name = properties.pop("QueueName")
        properties.pop("Tags", None)
        attributes = {key: str(value).lower() if isinstance(value, bool) else str(value)
                      for key, value in properties.items() if key != "RedrivePolicy"}
        if "RedrivePolicy" in properties:
            redrive = dict(properties["RedrivePolicy"])
            redrive["deadLetterTargetArn"] = arns[redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]]
            attributes["RedrivePolicy"] = json.dumps(redrive)
        url, out[name] = _ensure_queue(name, attributes)
        arns[logical] = aws.sqs().get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"]
    return out


def _create_table(properties: dict[str, Any]) -> None:
    dynamodb = aws.client("dynamodb")
    kwargs: dict[str, Any] = {key: properties[key] for key in ("TableName", "BillingMode", "AttributeDefinitions", "KeySchema",
                                                "GlobalSecondaryIndexes", "DeletionProtectionEnabled", "Tags")
              if key in properties}
    dynamodb.create_table(**kwargs)
    dynamodb.get_waiter("table_exists").wait(TableName=properties["TableName"], WaiterConfig={"Delay": 1})


def _add_missing_index(properties: dict[str, Any], existing: dict[str, Any]) -> str | None:
    """Add the first index of ``properties`` that the described table ``existing`` lacks; returns its
    name, or None if it has them all. DynamoDB builds one new index per UpdateTable call; the next
    ``provision`` adds the next."""
    have = {index["IndexName"] for index in existing.get("GlobalSecondaryIndexes", [])}
    for index in properties.get("GlobalSecondaryIndexes", []):
        if index["IndexName"] in have:
            continue
        names = {key["AttributeName"] for key in index["KeySchema"]}
        aws.client("dynamodb").update_table(
            TableName=properties["TableName"],
            AttributeDefinitions=[d for d in properties["AttributeDefinitions"] if d["AttributeName"] in names],
            GlobalSecondaryIndexUpdates=[{"Create": index}],
        )
        log.info("index %s added to %s", index["IndexName"], properties["TableName"])
        return index["IndexName"]
    return None


def ensure_ttl(table: str, attribute: str) -> str:
    """Enable DynamoDB TTL on ``table`` by ``attribute`` (epoch seconds) unless it is on already;
    returns ``"enabled"`` (this call turned it on) or ``"exists"``.

    Raises:
        TtlConflict: TTL is on (or being switched) on another attribute.
        botocore.exceptions.ClientError: AWS refused (permissions).
    """
    dynamodb = aws.client("dynamodb")
    current = dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    status = current.get("TimeToLiveStatus")
    if status in ("ENABLED", "ENABLING") and current.get("AttributeName") == attribute:
        return "exists"
    if status in ("ENABLED", "ENABLING", "DISABLING"):
        raise TtlConflict(
            f"table {table}: DynamoDB TTL is {status.lower()} on attribute {current.get('AttributeName')!r}, the "
            f"template wants {attribute!r}; disable it (aws dynamodb update-time-to-live), wait until it is "
            "DISABLED (up to an hour), then provision again")
    dynamodb.update_time_to_live(TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute})
    log.info("DynamoDB TTL enabled on %s.%s", table, attribute)
    return "enabled"


def provision_tables(template: dict[str, Any]) -> dict[str, str]:
    """Create or converge the tables of ``template``; return table name → "created" | "exists" |
    "exists, index <name> added".

    Raises:
        TtlConflict: a table has TTL on another attribute (see :func:`ensure_ttl`).
    """
    dynamodb = aws.client("dynamodb")
    out: dict[str, str] = {}
    for resource in _of_type(template, "AWS::DynamoDB::Table").values():
        properties = resource["Properties"]
        name = properties["TableName"]
        try:
            existing = dynamodb.describe_table(TableName=name)["Table"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
            _create_table(properties)
            out[name] = "created"
        else:
            added = _add_missing_index(properties, existing)
            out[name] = f"exists, index {added} added" if added else "exists"
        if "TimeToLiveSpecification" in properties:
            ensure_ttl(name, properties["TimeToLiveSpecification"]["AttributeName"])
        if properties.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled"):
            dynamodb.update_continuous_backups(
                TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
    return out


def provision_bucket(template: dict[str, Any], settings: Settings) -> dict[str, str]:
    """Create the bucket of ``template`` if missing and set its encryption, public-access block and
    lifecycle rules; return bucket name → "created" | "exists"."""
    s3 = aws.s3()
    out: dict[str, str] = {}
    for resource in _of_type(template, "AWS::S3::Bucket").values():
        properties = resource["Properties"]
        name = properties["BucketName"]
        try:
            s3.head_bucket(Bucket=name)
            out[name] = "exists"
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("404", "NoSuchBucket", "NotFound"):
                raise
            kwargs: dict[str, Any] = {"Bucket": name}
            if settings.aws_region != "us-east-1":  # us-east-1 takes no LocationConstraint (S3 API reference)
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": settings.aws_region}
            s3.create_bucket(**kwargs)
            out[name] = "created"
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"]}
                      for rule in properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]]})
        s3.put_public_access_block(Bucket=name,
                                   PublicAccessBlockConfiguration=properties["PublicAccessBlockConfiguration"])
        s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": bucket_lifecycle_rules(settings)})
    return out


def provision(settings: Settings | None = None) -> ProvisionReport:
    """Apply the template's queues, tables and bucket, and make the webhook key. Safe to run any number
    of times.

    Raises:
        botocore.exceptions.ClientError: AWS refused a call (permissions, limits).
        imposition.common.clocks.ClockError: the configured clocks break a rule of docs/design.md §4.
        TtlConflict: a table has TTL on another attribute.
    """
    s = settings or get_settings()
    template = render(s)
    from imposition.webhooks.secrets import ensure_key  # noqa: PLC0415 (KMS only when provisioning)

    return ProvisionReport(queues=provision_queues(template), tables=provision_tables(template),
                           bucket=provision_bucket(template, s), keys={s.webhook_secret_kms_key_id: ensure_key(s)})
