"""AWS's quotas that the service depends on: one home for each number, the AWS page that states it,
and the error AWS answers past it.

moto, the local endpoint, has none of these or only some (docs/development.md, "AWS's limits on the
local endpoint"): ``devstack.conformance`` refuses past each one as AWS does, with these codes and
messages, and ``tests/integration/test_localaws_quotas.py`` hits each through boto3. The deploy reads
the CloudFormation ones (:mod:`imposition.cli.stack`), the template checks its trust policies and
resources against them (:mod:`imposition.cli.template`), the settings bound a job item by the item
size (:mod:`imposition.common.settings`).

Each :class:`Quota`'s ``message`` is AWS's message with the value (and, where AWS names one, the
role or the count) put in by :meth:`Quota.refusal`.
"""

from __future__ import annotations

from dataclasses import dataclass

CLOUDFORMATION_QUOTAS = "https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html"
IAM_QUOTAS = "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html"
SQS_SEND_MESSAGE = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html"
DYNAMODB_QUOTAS = "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html"
DYNAMODB_TRANSACT_WRITE = "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html"


@dataclass(frozen=True)
class Quota:
    """One AWS quota: ``value`` in ``unit``; ``source``, the AWS page that states it; past it AWS
    answers ``error_code`` with ``message`` (a format string: ``{value}`` and the names
    :meth:`refusal` is given)."""

    name: str
    value: int
    unit: str
    source: str
    error_code: str
    message: str

    def refusal(self, **names: object) -> str:
        """AWS's message past this quota, ``names`` (``role``, ``count``) put in."""
        return self.message.format(value=self.value, **names)


#: An inline template (``TemplateBody`` of CreateStack, UpdateStack, ValidateTemplate): 51,200
#: bytes. AWS's answer quotes the body; this one says where instead.
CLOUDFORMATION_TEMPLATE_BODY = Quota(
    "CloudFormation template body in a request", 51_200, "bytes", CLOUDFORMATION_QUOTAS, "ValidationError",
    "1 validation error detected: Value at 'templateBody' failed to satisfy constraint: "
    "Member must have length less than or equal to {value}")
#: A template passed by ``TemplateURL`` (an S3 object): 1 MB; AWS's message counts it as 1,000,000 bytes.
CLOUDFORMATION_TEMPLATE_URL = Quota(
    "CloudFormation template in an S3 object (TemplateURL)", 1_000_000, "bytes", CLOUDFORMATION_QUOTAS,
    "ValidationError", "Template may not exceed {value} bytes in size.")
#: Resources declared in one template.
CLOUDFORMATION_RESOURCES = Quota(
    "CloudFormation resources per template", 500, "resources", CLOUDFORMATION_QUOTAS, "ValidationError",
    "Template format error: Number of resources, {count}, is greater than maximum allowed, {value}")
#: All inline policies of one role together (white space not counted).
IAM_ROLE_INLINE_POLICIES = Quota(
    "IAM inline policies of one role, together", 10_240, "characters", IAM_QUOTAS, "LimitExceeded",
    "Maximum policy size of {value} bytes exceeded for role {role}")
#: One managed policy (white space not counted).
IAM_MANAGED_POLICY = Quota(
    "IAM managed policy", 6_144, "characters", IAM_QUOTAS, "LimitExceeded",
    "Cannot exceed quota for PolicySize: {value}")
#: A role's trust policy (white space not counted); the default, which Service Quotas can raise.
IAM_TRUST_POLICY = Quota(
    "IAM role trust policy", 2_048, "characters", IAM_QUOTAS, "LimitExceeded",
    "Cannot exceed quota for ACLSizePerRole: {value}")
#: One message, body and attributes (raised from 256 KiB in 2025: AWS Compute Blog, "More room to
#: build: serverless services now support payloads up to 1 MB"). It is also the default of a queue's
#: ``MaximumMessageSize`` (CreateQueue API reference), which the template leaves unset.
SQS_MESSAGE = Quota(
    "SQS message (body and attributes)", 1_048_576, "bytes", SQS_SEND_MESSAGE, "InvalidParameterValue",
    "One or more parameters are invalid. Reason: Message must be shorter than {value} bytes.")
#: One item, attribute names and values (400 KB). Past it in a transaction's Update AWS cancels the
#: transaction instead: TransactionCanceledException, reason ``ValidationError``, "Item size to update
#: has exceeded the maximum allowed size" (TransactWriteItems API reference).
DYNAMODB_ITEM = Quota(
    "DynamoDB item", 400 * 1024, "bytes", DYNAMODB_QUOTAS, "ValidationException",
    "Item size has exceeded the maximum allowed size")
#: Actions in one TransactWriteItems.
DYNAMODB_TRANSACTION_ACTIONS = Quota(
    "DynamoDB TransactWriteItems actions", 100, "actions", DYNAMODB_TRANSACT_WRITE, "ValidationException",
    "1 validation error detected at 'transactItems' failed to satisfy constraint: "
    "Member must have length less than or equal to {value}")
#: The items of one TransactWriteItems together (4 MB).
DYNAMODB_TRANSACTION_BYTES = Quota(
    "DynamoDB TransactWriteItems request", 4 * 1024 * 1024, "bytes", DYNAMODB_TRANSACT_WRITE,
    "ValidationException", "Transaction request cannot be larger than 4 MB")

#: Every quota above, in the order of docs/development.md's table.
QUOTAS = (CLOUDFORMATION_TEMPLATE_BODY, CLOUDFORMATION_TEMPLATE_URL, CLOUDFORMATION_RESOURCES,
          IAM_ROLE_INLINE_POLICIES, IAM_MANAGED_POLICY, IAM_TRUST_POLICY, SQS_MESSAGE, DYNAMODB_ITEM,
          DYNAMODB_TRANSACTION_ACTIONS, DYNAMODB_TRANSACTION_BYTES)

#: A reason code of a cancelled transaction (TransactWriteItems API reference, TransactionCanceledException).
DYNAMODB_ITEM_TO_UPDATE_TOO_LARGE = "Item size to update has exceeded the maximum allowed size"


def policy_characters(document: str | dict) -> int:
    """The characters IAM counts in a policy document (a JSON string or parsed): the document
    without white space outside its strings (IAM quotas page: white space is not counted).

    Raises:
        ValueError: ``document`` is a string that is not JSON.
    """
    import json  # noqa: PLC0415 - only where a policy is measured

    parsed = json.loads(document) if isinstance(document, str) else document
    return len(json.dumps(parsed, separators=(",", ":"), ensure_ascii=False))
