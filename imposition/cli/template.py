"""The service's AWS resources as one CloudFormation template, rendered from the settings.

``imposition render-template`` prints it (JSON); ``imposition deploy`` creates or updates a stack
from it; ``imposition provision`` (the local stack's path) applies its queues, tables and bucket
with plain API calls. No number of the design is typed again here: clocks come from
:class:`imposition.common.clocks.Clocks`, names, counts and retention from
:class:`imposition.common.settings.Settings`, keys and indexes from the PynamoDB models of
:mod:`leases.models` (why CloudFormation rendered here, not a CDK app: docs/deploy.md, section 1).
The template declares, in this order (logical ids in brackets)::

    queues        [<Name>Queue] and [<Name>DeadLetterQueue]: visibility = Clocks.visibility_timeout_s,
                  redrive after Settings.max_receive_count
    tables        [TenantsTable, LeasesTable, JobsTable, ClusterTable, TokensTable]: the models' keys
                  and GSIs, on-demand, PITR, deletion protection, TTL where the model names one, Retain
    bucket        [PlatesBucket]: SSE-S3, public access blocked, TLS only, imposition.common.retention's rules
    webhook key   [WebhookSecretsKey] under the alias Settings.webhook_secret_kms_key_id
    roles         one per process kind (:func:`roles`), each with only its process's actions, trusted
                  by its compute alone (:func:`trust_policy`), bounded by Settings.permissions_boundary_arn
                  when set; on EC2 each with an instance profile of its name
    alarms        CloudWatch alarms (:func:`alarms`) to the SNS topic of the AlarmTopicArn parameter

Every role and every resource that takes tags carries :func:`tags`. :func:`check_quotas` refuses a
template past CloudFormation's, IAM's or CloudWatch's quotas.
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass
from typing import Any

from pynamodb.attributes import Attribute
from pynamodb.indexes import GlobalSecondaryIndex
from pynamodb.models import Model

from imposition.common.aws_quotas import CLOUDFORMATION_RESOURCES, IAM_TRUST_POLICY, policy_characters
from imposition.common.clocks import Clocks
from imposition.common.retention import JOB_OBJECTS_PREFIX, cloudformation_lifecycle_rules
from imposition.common.secrets import FLOWER_LOGIN_CONTEXT
from imposition.common.settings import Settings
from imposition.observability.alerts import runbook_url
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
        "Tags": tags(settings),
    }
    if indexes:
        properties["GlobalSecondaryIndexes"] = sorted(indexes, key=lambda i: i["IndexName"])
    if model in TTL_ATTRIBUTES:
        properties["TimeToLiveSpecification"] = {"AttributeName": TTL_ATTRIBUTES[model], "Enabled": True}
    return properties


def tags(settings: Settings) -> list[dict[str, str]]:
    """The tags of every role and taggable resource: ``service`` = the stack name, then
    ``Settings.resource_tags`` by key."""
    return [{"Key": "service", "Value": settings.stack_name}] + [
        {"Key": key, "Value": value} for key, value in sorted(settings.resource_tags.items())]


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
            # tenants' webhook secrets only: a ciphertext sealed under a tenant's context (imposition.common.secrets)
            {**_allow(("kms:Decrypt",), [_arn("WebhookSecretsKey")]),
             "Condition": {"Null": {"kms:EncryptionContext:tenant_id": "false"}}},
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
            # a claim written with its job; both deleted again if the publish fails (leases.waiting.admit, withdraw)
            _allow(DYNAMODB_READ + ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem",
                                    "dynamodb:ConditionCheckItem"), _table_arns(JobItem, TokenClaimItem)),
            # a job parked at the door is woken at once if a borrowing tenant has room (waiting.wake)
            _allow(DYNAMODB_READ, _table_arns(ClusterItem)),
            _allow(SQS_SEND, [queue[imposition]]),
            _allow(("s3:PutObject", "s3:GetObject", "s3:DeleteObject"), _objects(OBJECT_PREFIX)),
            listing,
        )),
    )


#: The service principal of each ``Settings.compute_platform``: what assumes a process's role.
COMPUTE_PRINCIPALS = {"ec2": "ec2.amazonaws.com", "ecs": "ecs-tasks.amazonaws.com"}
#: The one role that may trust principals besides the compute (``Settings.operator_principals``).
OPERATOR = "Operator"


def trust_policy(settings: Settings, role: str) -> dict[str, Any]:
    """Who may assume the role of process kind ``role``: the compute that runs it
    (``Settings.compute_platform``: EC2 instances, or ECS tasks of this account, the condition AWS
    recommends against a confused deputy), and for the operator's role also
    ``Settings.operator_principals``. No role trusts an account's root unless it is named there."""
    compute: dict[str, Any] = {"Effect": "Allow", "Principal": {"Service": COMPUTE_PRINCIPALS[settings.compute_platform]},
                               "Action": "sts:AssumeRole"}
    if settings.compute_platform == "ecs":
        compute["Condition"] = {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    statements = [compute]
    if role == OPERATOR and settings.operator_principals:
        statements.append({"Effect": "Allow", "Principal": {"AWS": list(settings.operator_principals)},
                           "Action": "sts:AssumeRole"})
    return {"Version": "2012-10-17", "Statement": statements}


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
            "Tags": tags(settings),
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
            "Tags": tags(settings),
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


#: The template's parameter: the SNS topic its alarms notify ('' = none; ``imposition deploy`` passes
#: ``Settings.alarm_topic_arn``), and the condition that one was given.
ALARM_TOPIC_PARAMETER = "AlarmTopicArn"
_TOPIC_GIVEN = "AlarmTopicGiven"
#: The alarms' period: CloudWatch's standard resolution, at which SQS and DynamoDB publish.
ALARM_PERIOD_S = 60
#: Metrics one metric-math alarm may read, a hard limit (CloudWatch User Guide, "Limits":
#: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-limits.html).
ALARM_MAX_METRICS = 10


def _periods(duration_s: float) -> int:
    return max(1, math.ceil(duration_s / ALARM_PERIOD_S))


def _alarm(settings: Settings, name: str, runbook: str, summary: str, watch: dict[str, Any]) -> dict[str, Any]:
    """An ``AWS::CloudWatch::Alarm`` ``<stack>-<name>`` watching ``watch`` (a metric, or metric math),
    notifying the topic parameter when given, on alarm and on recovery."""
    notify = {"Fn::If": [_TOPIC_GIVEN, [{"Ref": ALARM_TOPIC_PARAMETER}], {"Ref": "AWS::NoValue"}]}
    return {"Type": "AWS::CloudWatch::Alarm", "Properties": {
        "AlarmName": f"{settings.stack_name}-{name}",
        "AlarmDescription": f"{summary} Runbook: {runbook_url(settings, runbook)}",
        "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching",
        **watch, "AlarmActions": notify, "OKActions": notify, "Tags": tags(settings)}}


def _sqs_watch(queue_logical: str, metric: str, threshold: float, for_s: float) -> dict[str, Any]:
    return {"Namespace": "AWS/SQS", "MetricName": metric, "Statistic": "Maximum", "Period": ALARM_PERIOD_S,
            "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_logical, "QueueName"]}}],
            "EvaluationPeriods": _periods(for_s), "Threshold": threshold}


def _throttle_watch(model: type[Model], settings: Settings, for_s: float) -> dict[str, Any]:
    """Throttled reads and writes of a table and each of its indexes, summed (metric math)."""
    table = {"Name": "TableName", "Value": {"Ref": table_id(model)}}
    indexes = [None] + sorted(index.Meta.index_name for _, index in inspect.getmembers(
        model, lambda member: isinstance(member, GlobalSecondaryIndex)))
    metrics = [{"Id": f"m{len(indexes) * i + j}", "ReturnData": False, "MetricStat": {"Stat": "Sum", "Period": ALARM_PERIOD_S,
               "Metric": {"Namespace": "AWS/DynamoDB", "MetricName": metric, "Dimensions": [table] + (
                   [{"Name": "GlobalSecondaryIndexName", "Value": index}] if index else [])}}}
               for i, metric in enumerate(("ReadThrottleEvents", "WriteThrottleEvents")) for j, index in enumerate(indexes)]
    periods = _periods(for_s)
    return {"Metrics": metrics + [{"Id": "throttles", "Expression": "SUM(METRICS())", "Label": "throttle events",
                                   "ReturnData": True}],
            "EvaluationPeriods": periods, "DatapointsToAlarm": periods, "Threshold": 0}


def alarms(settings: Settings) -> dict[str, Any]:
    """The CloudWatch alarms, by logical id, each to the ``AlarmTopicArn`` parameter's topic, each
    describing itself with its runbook (docs/operations.md, "CloudWatch alarms"):

    * each work queue's oldest message older than ``alarm_oldest_message_age_s``, for ``alert_for_s``;
    * the imposition queue's oldest message of a quiet tenant (SQS fair queues'
      ``ApproximateAgeOfOldestMessageInQuietGroups``) older than ``alert_starving_wait_p95_s``, for
      ``alert_for_s``: a tenant waits behind another's burst;
    * each dead-letter queue holding a message, for ``alert_dlq_for_s``;
    * each table throttled (reads or writes, its indexes' too) in every minute of ``alert_for_s``.
    """
    s = settings
    out: dict[str, Any] = {}
    for name in s.work_queues:
        out[f"{queue_id(name)}OldestMessageAlarm"] = _alarm(
            s, f"{name}-oldest-message", "oldestmessageage",
            f"Queue {name}: its oldest message is over {s.alarm_oldest_message_age_s} s old.",
            _sqs_watch(queue_id(name), "ApproximateAgeOfOldestMessage", s.alarm_oldest_message_age_s, s.alert_for_s))
        out[f"{dead_letter_queue_id(name)}Alarm"] = _alarm(
            s, f"{s.dead_letter_queue(name)}-not-empty", "deadlettermessages",
            f"Dead-letter queue {s.dead_letter_queue(name)} holds messages: imposition dlq list.",
            _sqs_watch(dead_letter_queue_id(name), "ApproximateNumberOfMessagesVisible", 0, s.alert_dlq_for_s))
    out[f"{queue_id(s.imposition_queue)}QuietGroupsAlarm"] = _alarm(
        s, f"{s.imposition_queue}-quiet-tenant-waits", "quietgroupsoldestmessageage",
        f"Queue {s.imposition_queue}: a quiet tenant's oldest message is over {s.alert_starving_wait_p95_s:g} s old.",
        _sqs_watch(queue_id(s.imposition_queue), "ApproximateAgeOfOldestMessageInQuietGroups",
                   s.alert_starving_wait_p95_s, s.alert_for_s))
    for model in ALL_MODELS:
        out[f"{table_id(model)}ThrottlesAlarm"] = _alarm(
            s, f"{getattr(s, _TABLES[model][1])}-throttled", "dynamodbthrottles",
            f"Table {getattr(s, _TABLES[model][1])} or its indexes throttled in every minute for {s.alert_for_s} s.",
            _throttle_watch(model, s, s.alert_for_s))
    return out


def _add_roles(settings: Settings, resources: dict[str, Any], outputs: dict[str, Any]) -> None:
    """Each process kind's role into ``resources`` (and, on EC2, its instance profile), their ARNs
    into ``outputs``."""
    boundary = {"PermissionsBoundary": settings.permissions_boundary_arn} if settings.permissions_boundary_arn else {}
    for role in roles(settings):
        logical = f"{role.name}Role"
        resources[logical] = {"Type": "AWS::IAM::Role", "Properties": {
            "RoleName": role_name(settings, role.name),
            "Description": role.description,
            "AssumeRolePolicyDocument": trust_policy(settings, role.name),
            "Policies": [{"PolicyName": role.name.lower(),
                          "PolicyDocument": {"Version": "2012-10-17", "Statement": list(role.statements)}}],
            **boundary,
            "Tags": tags(settings)}}
        outputs[logical + "Arn"] = {"Value": _arn(logical)}
        if settings.compute_platform == "ec2":  # an instance runs under a role through its instance profile
            resources[f"{role.name}InstanceProfile"] = {"Type": "AWS::IAM::InstanceProfile", "Properties": {
                "InstanceProfileName": role_name(settings, role.name), "Roles": [{"Ref": logical}]}}
            outputs[f"{role.name}InstanceProfileArn"] = {"Value": _arn(f"{role.name}InstanceProfile")}


def check_quotas(template: dict[str, Any]) -> None:
    """Refuse a template CloudFormation, IAM or CloudWatch would: more resources than
    CloudFormation's quota, a role whose trust policy is past IAM's (counted as rendered: an
    intrinsic function counts longer than most values it stands for), an alarm reading more metrics
    than CloudWatch allows (a table that gained indexes).

    Raises:
        ValueError: the message names the quota, its value, and the role or the count.
    """
    resources = template["Resources"]
    if len(resources) > CLOUDFORMATION_RESOURCES.value:
        raise ValueError(f"{len(resources)} resources: past CloudFormation's {CLOUDFORMATION_RESOURCES.value} "
                         f"({CLOUDFORMATION_RESOURCES.source})")
    for logical, resource in resources.items():
        read = [m for m in resource["Properties"].get("Metrics", []) if "MetricStat" in m]
        if resource["Type"] == "AWS::CloudWatch::Alarm" and len(read) > ALARM_MAX_METRICS:
            raise ValueError(f"{logical}: reads {len(read)} metrics, past CloudWatch's {ALARM_MAX_METRICS} an alarm")
        if resource["Type"] == "AWS::IAM::Role":
            size = policy_characters(resource["Properties"]["AssumeRolePolicyDocument"])
            if size > IAM_TRUST_POLICY.value:
                raise ValueError(f"{logical}: trust policy of {size} characters, past IAM's {IAM_TRUST_POLICY.value} "
                                 f"({IAM_TRUST_POLICY.source}): name fewer operator_principals")


def render(settings: Settings) -> dict[str, Any]:
    """The CloudFormation template (a JSON-ready dict) of every AWS resource of the service.

    Raises:
        imposition.common.clocks.ClockError: the settings' clocks break a rule of docs/design.md §4.
        ValueError: ``webhook_secret_kms_key_id`` is not an alias (:func:`webhook_key_alias`), or the
            template is past a quota (:func:`check_quotas`).
    """
    clocks = Clocks.from_settings(settings)
    resources: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    for name in settings.work_queues:
        dlq, work = dead_letter_queue_id(name), queue_id(name)
        resources[dlq] = {"Type": "AWS::SQS::Queue", "Properties": {
            "QueueName": settings.dead_letter_queue(name), "MessageRetentionPeriod": DLQ_RETENTION_S,
            "SqsManagedSseEnabled": True, "Tags": tags(settings)}}
        resources[work] = {"Type": "AWS::SQS::Queue", "Properties": {
            "QueueName": name,
            "VisibilityTimeout": clocks.visibility_timeout_s,
            "RedrivePolicy": {"deadLetterTargetArn": _arn(dlq), "maxReceiveCount": settings.max_receive_count},
            "SqsManagedSseEnabled": True,
            "Tags": tags(settings)}}
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
    _add_roles(settings, resources, outputs)
    resources.update(alarms(settings))
    template = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": (f"{settings.stack_name}: queues, tables, bucket, webhook key and roles of the imposition "
                        f"service (rendered by `imposition render-template`; visibility {clocks.visibility_timeout_s} s "
                        f"from lease_ttl_s={settings.lease_ttl_s:g})"),
        "Parameters": {ALARM_TOPIC_PARAMETER: {
            "Type": "String", "Default": "", "AllowedPattern": "^$|^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]+$",
            "Description": "SNS topic the alarms notify (imposition deploy passes IMPOSITION_ALARM_TOPIC_ARN); '' = none"}},
        "Conditions": {_TOPIC_GIVEN: {"Fn::Not": [{"Fn::Equals": [{"Ref": ALARM_TOPIC_PARAMETER}, ""]}]}},
        "Resources": resources,
        "Outputs": outputs,
    }
    check_quotas(template)
    return template


def render_json(settings: Settings) -> str:
    """:func:`render` as indented JSON text (what ``imposition render-template`` prints)."""
    return json.dumps(render(settings), indent=2, sort_keys=False) + "\n"
