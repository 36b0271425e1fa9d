"""The service's AWS resources as one CloudFormation template, rendered from the settings.

``imposition render-template`` prints it (JSON); ``imposition deploy`` creates or updates a stack
from it; ``imposition provision`` (the local stack's path) applies the same template's queues,
tables and bucket with plain API calls. Nothing here types a number of the design again: queue
visibility comes from :class:`imposition.common.clocks.Clocks`, the redrive count, names and
retention from :class:`imposition.common.settings.Settings`, keys and indexes from the PynamoDB
models of :mod:`leases.models`. Why CloudFormation rendered here rather than a CDK app:
docs/deploy.md, section 1.

The template declares, in this order (logical ids in brackets)::

    queues        each work queue [<Name>Queue] and its dead-letter queue [<Name>DeadLetterQueue]:
                  visibility = Clocks.visibility_timeout_s, redrive after Settings.max_receive_count
    tables        [TenantsTable, LeasesTable, JobsTable, ClusterTable, TokensTable]: keys and GSIs
                  of the models, on-demand, point-in-time recovery, deletion protection, TTL where
                  the model names one (TTL_ATTRIBUTES), DeletionPolicy Retain
    bucket        [PlatesBucket]: SSE-S3 encryption, public access blocked, TLS only, lifecycle
                  rules of imposition.common.retention (job objects, incomplete uploads)
    webhook key   [WebhookSecretsKey, alias Settings.webhook_secret_kms_key_id]: KMS key for
                  tenants' webhook signing secrets (encrypt: the operator; decrypt: the notifier)
    roles         one per process kind (:func:`roles`): imposer, maintenance, notifier, beat, flower,
                  operator, caller; each with only the actions its process performs

Each role trusts EC2, ECS tasks and this account (docs/deploy.md, section 4).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any

from pynamodb.attributes import Attribute
from pynamodb.indexes import GlobalSecondaryIndex
from pynamodb.models import Model

from imposition.common.clocks import Clocks
from imposition.common.retention import JOB_OBJECTS_PREFIX, cloudformation_lifecycle_rules
from imposition.common.secrets import FLOWER_LOGIN_CONTEXT
from imposition.common.settings import Settings
from leases.models import ALL_MODELS, TTL_ATTRIBUTES, ClusterItem, JobItem, LeaseItem, TenantItem, TokenClaimItem

#: Dead-letter queues keep messages for the SQS maximum, 14 days (AWS SQS quotas), for inspection.
DLQ_RETENTION_S = 14 * 24 * 3600
#: The S3 prefix every object of the service lives under (imposition.common.tenancy.tenant_prefix).
OBJECT_PREFIX = JOB_OBJECTS_PREFIX

#: Each model's table: its logical id, and the setting that names it.
_TABLES: dict[type[Model], tuple[str, str]] = {
    TenantItem: ("TenantsTable", "tenants_table"), LeaseItem: ("LeasesTable", "leases_table"),
    JobItem: ("JobsTable", "jobs_table"), ClusterItem: ("ClusterTable", "cluster_table"),
    TokenClaimItem: ("TokensTable", "tokens_table"),
}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("_", "-").split("-"))


def queue_id(queue: str) -> str:
    """Logical id of work queue ``queue`` (``imposition`` → ``ImpositionQueue``)."""
    return f"{_camel(queue)}Queue"


def dead_letter_queue_id(queue: str) -> str:
    """Logical id of the dead-letter queue of work queue ``queue``."""
    return f"{_camel(queue)}DeadLetterQueue"


def table_id(model: type[Model]) -> str:
    """Logical id of the table of ``model`` (``TenantItem`` → ``TenantsTable``)."""
    return _TABLES[model][0]


def _key_schema(attributes: dict[str, Attribute]) -> list[dict[str, str]]:
    keys = [a for a in attributes.values() if a.is_hash_key] + [a for a in attributes.values() if a.is_range_key]
    return [{"AttributeName": a.attr_name, "KeyType": "HASH" if a.is_hash_key else "RANGE"} for a in keys]


def table_properties(model: type[Model], settings: Settings) -> dict[str, Any]:
    """CloudFormation ``Properties`` of the table of ``model``: keys and GSIs read from the model
    (so the template cannot drift from the code that queries them), on-demand, PITR, deletion
    protection, TTL when :data:`leases.models.TTL_ATTRIBUTES` names one."""
    attributes = model.get_attributes()
    definitions = {a.attr_name: a.attr_type for a in attributes.values() if a.is_hash_key or a.is_range_key}
    indexes = []
    for _, index in inspect.getmembers(model, lambda member: isinstance(member, GlobalSecondaryIndex)):
        index_attributes = index.Meta.attributes
        definitions.update({a.attr_name: a.attr_type for a in index_attributes.values()
                            if a.is_hash_key or a.is_range_key})
        projection: dict[str, Any] = {"ProjectionType": index.Meta.projection.projection_type}
        if getattr(index.Meta.projection, "non_key_attributes", None):
            projection["NonKeyAttributes"] = list(index.Meta.projection.non_key_attributes)
        indexes.append({"IndexName": index.Meta.index_name, "KeySchema": _key_schema(index_attributes),
                        "Projection": projection})
    properties: dict[str, Any] = {
        "TableName": getattr(settings, _TABLES[model][1]),
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": name, "AttributeType": kind}
                                 for name, kind in sorted(definitions.items())],
        "KeySchema": _key_schema(attributes),
        "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        "DeletionProtectionEnabled": True,
        # no SSESpecification: DynamoDB encrypts every table at rest with its own key; SSEEnabled would
        # switch to the AWS-managed KMS key, with KMS requests behind the table's
        "Tags": _tags(settings),
    }
    if indexes:
        properties["GlobalSecondaryIndexes"] = sorted(indexes, key=lambda i: i["IndexName"])
    if model in TTL_ATTRIBUTES:
        properties["TimeToLiveSpecification"] = {"AttributeName": TTL_ATTRIBUTES[model], "Enabled": True}
    return properties


def _tags(settings: Settings) -> list[dict[str, str]]:
    return [{"Key": "service", "Value": settings.stack_name}]


def _arn(logical_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def _table_arns(*models: type[Model]) -> list[Any]:
    """The ARNs of the tables of ``models`` and of their indexes (``<table arn>/index/*``)."""
    out: list[Any] = []
    for model in models:
        out.append(_arn(table_id(model)))
        out.append({"Fn::Sub": "${%s.Arn}/index/*" % table_id(model)})
    return out


def _objects(*prefixes: str) -> list[Any]:
    return [{"Fn::Sub": "${PlatesBucket.Arn}/" + prefix + "*"} for prefix in prefixes]


@dataclass(frozen=True)
class Role:
    """One process kind's role: logical id ``<name>Role``, and its policy statements."""

    name: str
    description: str
    statements: tuple[dict[str, Any], ...]


#: DynamoDB item actions of a process that reads and writes items (transactions included:
#: TransactWriteItems is authorised per item as PutItem/UpdateItem/DeleteItem/ConditionCheckItem,
#: TransactGetItems as GetItem; DescribeTable is PynamoDB's first call on a model).
DYNAMODB_READ = ("dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")
DYNAMODB_WRITE = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem",
                  "dynamodb:BatchWriteItem")
#: What a consumer of a queue does with it (kombu's SQS transport and the heartbeat's visibility).
SQS_CONSUME = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl",
               "sqs:GetQueueAttributes")
SQS_SEND = ("sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes")


def _allow(actions: tuple[str, ...], resources: list[Any] | str) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": sorted(set(actions)), "Resource": resources}


def roles(settings: Settings) -> tuple[Role, ...]:
    """The least-privilege role of each process kind (docs/deploy.md, section 4)."""
    queue = {name: _arn(queue_id(name)) for name in settings.work_queues}
    imposition, maintenance, notifications = (settings.imposition_queue, settings.maintenance_queue,
                                              settings.notifications_queue)
    lease_tables = (TenantItem, LeaseItem, JobItem, ClusterItem)
    all_queues = [queue[name] for name in settings.work_queues]
    dead_letter_queues = [_arn(dead_letter_queue_id(name)) for name in settings.work_queues]
    # every process of the Celery app looks up each work queue's URL at start (tasks.config.bind_queue_urls)
    urls = _allow(("sqs:GetQueueUrl",), all_queues)
    # S3 answers a missing object with 404 only to a principal that may list the bucket, else 403 (S3
    # API reference, GetObject/HeadObject "Permissions"): storage tells a missing input by its 404
    listing = _allow(("s3:ListBucket",), [_arn("PlatesBucket")])
    return (
        Role("Imposer", "imposition workers: run jobs under leases, read inputs, write plates, JDFs and previews", (
            urls,
            _allow(DYNAMODB_READ + DYNAMODB_WRITE, _table_arns(*lease_tables)),
            _allow(SQS_CONSUME + SQS_SEND, [queue[imposition]]),
            _allow(SQS_SEND, [queue[notifications]]),
            _allow(("s3:GetObject", "s3:PutObject", "s3:DeleteObject"), _objects(OBJECT_PREFIX)),
            listing,
        )),
        Role("Maintenance", "the maintenance worker: sweeper, webhook outbox drain, queue sampler", (
            urls,
            _allow(DYNAMODB_READ + DYNAMODB_WRITE, _table_arns(*lease_tables)),
            _allow(("dynamodb:Scan",), _table_arns(TenantItem)),  # the queue sampler's per-tenant gauges
            _allow(SQS_CONSUME + SQS_SEND, [queue[maintenance]]),
            _allow(SQS_SEND, [queue[imposition], queue[notifications]]),
            _allow(("sqs:GetQueueAttributes", "sqs:GetQueueUrl"), all_queues + dead_letter_queues),
            # CloudWatch's GetMetricData has no resource-level permission (AWS service authorization reference)
            _allow(("cloudwatch:GetMetricData",), "*"),
        )),
        Role("Notifier", "the notifications worker: webhook deliveries", (
            urls,
            _allow(DYNAMODB_READ, _table_arns(TenantItem)),
            _allow(DYNAMODB_READ + ("dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"), _table_arns(JobItem)),
            _allow(SQS_CONSUME + SQS_SEND, [queue[notifications]]),
            _allow(("kms:Decrypt",), [_arn("WebhookSecretsKey")]),
        )),
        Role("Beat", "celery beat: publishes the periodic maintenance tasks", (
            urls,
            _allow(SQS_SEND, [queue[maintenance]]),
        )),
        Role("Flower", "Flower: reads the monitoring events (Redis) and the work queues' depth", (
            urls,
            _allow(("sqs:GetQueueAttributes",), all_queues),
            # its login, sealed with the webhook key under a context of its own (imposition.observability.flower)
            {**_allow(("kms:Decrypt",), [_arn("WebhookSecretsKey")]), "Condition": {"StringEquals": {
                f"kms:EncryptionContext:{key}": value for key, value in FLOWER_LOGIN_CONTEXT.items()}}},
        )),
        Role("Operator", "the imposition command line of an operator: tenants, jobs, dead-letter queues, "
             "audit, status", (
            urls,
            _allow(DYNAMODB_READ + DYNAMODB_WRITE + ("dynamodb:Scan",),
                   _table_arns(TenantItem, LeaseItem, JobItem, ClusterItem, TokenClaimItem)),
            _allow(SQS_SEND, all_queues),
            _allow(SQS_CONSUME + ("sqs:PurgeQueue",), dead_letter_queues),
            _allow(("sqs:GetQueueAttributes", "sqs:GetQueueUrl"), all_queues),
            _allow(("s3:GetObject", "s3:PutObject", "s3:DeleteObject"), _objects(OBJECT_PREFIX)),
            listing,
            _allow(("kms:Encrypt",), [_arn("WebhookSecretsKey")]),
            _allow(("cloudwatch:GetMetricData",), "*"),
        )),
        Role("Caller", "the submitting application: submits jobs, reads their state and plates", (
            urls,
            _allow(DYNAMODB_READ + ("dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"), _table_arns(TenantItem)),
            # a claim written with its job; both deleted again if the publish fails (admission.claims)
            _allow(DYNAMODB_READ + ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
                                    "dynamodb:ConditionCheckItem"), _table_arns(JobItem, TokenClaimItem)),
            # a job parked at the door is woken at once if a borrowing tenant has room (waiting.wake)
            _allow(DYNAMODB_READ, _table_arns(ClusterItem)),
            _allow(SQS_SEND, [queue[imposition]]),
            _allow(("s3:PutObject", "s3:GetObject", "s3:DeleteObject"), _objects(OBJECT_PREFIX)),
            listing,
        )),
    )


def _trust_policy() -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": ["ec2.amazonaws.com", "ecs-tasks.amazonaws.com"]},
             "Action": "sts:AssumeRole"},
            {"Effect": "Allow", "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}},
             "Action": "sts:AssumeRole"},
        ],
    }


def role_name(settings: Settings, role: str) -> str:
    """IAM name of the role of process kind ``role`` (``imposer`` → ``<stack>-imposer``)."""
    return f"{settings.stack_name}-{role.lower()}"


def _bucket(settings: Settings) -> dict[str, Any]:
    return {
        "Type": "AWS::S3::Bucket",
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": {
            "BucketName": settings.bucket,
            "BucketEncryption": {"ServerSideEncryptionConfiguration": [
                {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]},
            "PublicAccessBlockConfiguration": {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                               "IgnorePublicAcls": True, "RestrictPublicBuckets": True},
            "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
            "LifecycleConfiguration": {"Rules": cloudformation_lifecycle_rules(settings)},
            "Tags": _tags(settings),
        },
    }


def _bucket_policy() -> dict[str, Any]:
    """Refuse every request to the bucket that is not over TLS (AWS S3 security best practices)."""
    return {
        "Type": "AWS::S3::BucketPolicy",
        "Properties": {
            "Bucket": {"Ref": "PlatesBucket"},
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [{
                "Sid": "TlsOnly", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
                "Resource": [_arn("PlatesBucket"), {"Fn::Sub": "${PlatesBucket.Arn}/*"}],
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            }]},
        },
    }


def _webhook_key(settings: Settings) -> dict[str, Any]:
    return {
        "Type": "AWS::KMS::Key",
        "DeletionPolicy": "Retain",
        "UpdateReplacePolicy": "Retain",
        "Properties": {
            "Description": f"{settings.stack_name}: encrypts tenants' webhook signing secrets",
            "EnableKeyRotation": True,
            "KeyPolicy": {"Version": "2012-10-17", "Statement": [{
                # the account's IAM policies decide who may use the key (the roles below)
                "Sid": "AccountIamPolicies", "Effect": "Allow",
                "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}},
                "Action": "kms:*", "Resource": "*",
            }]},
            # no Tags: moto's AWS::KMS::Key reads them as TagKey/TagValue (KMS API's shape), not Key/Value
        },
    }


def webhook_key_alias(settings: Settings) -> str:
    """The alias the stack gives its webhook key: ``Settings.webhook_secret_kms_key_id``, which the
    processes encrypt and decrypt with (imposition.webhooks.secrets).

    Raises:
        ValueError: the setting names a key id or ARN, not an alias: the stack would make a key no
            process uses (the message names the field and the value).
    """
    key = settings.webhook_secret_kms_key_id
    if not key.startswith("alias/"):
        raise ValueError(f"webhook_secret_kms_key_id={key!r}: the template makes the key under an alias "
                         "(alias/...); name one, or leave the default")
    return key


def render(settings: Settings) -> dict[str, Any]:
    """The CloudFormation template (a JSON-ready dict) of every AWS resource of the service.

    Raises:
        imposition.common.clocks.ClockError: the settings' clocks break a rule of docs/design.md §4.
        ValueError: ``webhook_secret_kms_key_id`` is not an alias (:func:`webhook_key_alias`).
    """
    clocks = Clocks.from_settings(settings)
    resources: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    for name in settings.work_queues:
        dlq, work = dead_letter_queue_id(name), queue_id(name)
        resources[dlq] = {"Type": "AWS::SQS::Queue", "Properties": {
            "QueueName": settings.dead_letter_queue(name), "MessageRetentionPeriod": DLQ_RETENTION_S,
            "SqsManagedSseEnabled": True, "Tags": _tags(settings)}}
        resources[work] = {"Type": "AWS::SQS::Queue", "Properties": {
            "QueueName": name,
            "VisibilityTimeout": clocks.visibility_timeout_s,
            "RedrivePolicy": {"deadLetterTargetArn": _arn(dlq), "maxReceiveCount": settings.max_receive_count},
            "SqsManagedSseEnabled": True,
            "Tags": _tags(settings)}}
        outputs[work + "Url"] = {"Value": {"Ref": work}}
    for model in ALL_MODELS:
        resources[table_id(model)] = {"Type": "AWS::DynamoDB::Table", "DeletionPolicy": "Retain",
                                      "UpdateReplacePolicy": "Retain", "Properties": table_properties(model, settings)}
    resources["PlatesBucket"] = _bucket(settings)
    resources["PlatesBucketPolicy"] = _bucket_policy()
    resources["WebhookSecretsKey"] = _webhook_key(settings)
    resources["WebhookSecretsKeyAlias"] = {"Type": "AWS::KMS::Alias", "Properties": {
        "AliasName": webhook_key_alias(settings), "TargetKeyId": {"Ref": "WebhookSecretsKey"}}}
    outputs["WebhookSecretsKeyArn"] = {"Value": _arn("WebhookSecretsKey")}
    for role in roles(settings):
        logical = f"{role.name}Role"
        resources[logical] = {"Type": "AWS::IAM::Role", "Properties": {
            "RoleName": role_name(settings, role.name),
            "Description": role.description,
            "AssumeRolePolicyDocument": _trust_policy(),
            "Policies": [{"PolicyName": role.name.lower(),
                          "PolicyDocument": {"Version": "2012-10-17", "Statement": list(role.statements)}}],
            "Tags": _tags(settings)}}
        outputs[logical + "Arn"] = {"Value": _arn(logical)}
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": (f"{settings.stack_name}: queues, tables, bucket, webhook key and roles of the imposition "
                        f"service (rendered by `imposition render-template`; visibility {clocks.visibility_timeout_s} s "
                        f"from lease_ttl_s={settings.lease_ttl_s:g})"),
        "Resources": resources,
        "Outputs": outputs,
    }


def render_json(settings: Settings) -> str:
    """:func:`render` as indented JSON text (what ``imposition render-template`` prints)."""
    return json.dumps(render(settings), indent=2, sort_keys=False) + "\n"
