"""The local endpoint refuses what AWS refuses where moto does not: the quotas of
:mod:`imposition.common.aws_quotas`, each with AWS's error code and message; and it reads one
template property moto misreads.

:func:`install` patches moto in a server process (``devstack.localaws.serve`` calls it for every
server: ``make run``, the tests, the IAM-enforcing endpoint). Each refusal raises moto's own
exception for the service, so the answer has the service's protocol (query XML for CloudFormation
and IAM, JSON for SQS and DynamoDB). The table of what is checked where, and what moto keeps
itself: docs/development.md, "AWS's limits on the local endpoint". In short:

* CloudFormation (CreateStack, UpdateStack, CreateChangeSet, ValidateTemplate): the template's
  bytes, by TemplateBody or by TemplateURL, and its resources (``ValidationError``);
* IAM: a role's inline policies together (a template's ``AWS::IAM::Role`` too), a managed policy,
  a trust policy (``LimitExceeded``, HTTP 409);
* SQS: a message's UTF-8 bytes with its attributes (``InvalidParameterValue``; moto counts characters);
* DynamoDB: a TransactWriteItems past 4 MB (``ValidationException``); an Update that outgrows its
  item inside a transaction cancels it (``TransactionCanceledException``, reason ``ValidationError``).

moto's CloudFormation fails synchronously: CreateStack itself answers the error, where AWS accepts
the call and rolls the stack back. The property: moto's ``AWS::KMS::Key`` reads ``Tags`` in the
KMS API's shape (``TagKey``/``TagValue``) and fails on CloudFormation's; :func:`install` hands it
the shape it reads.
"""

from __future__ import annotations

import base64
import inspect
import json
import threading
from collections.abc import Callable
from typing import Any

from imposition.common.aws_quotas import (
    CLOUDFORMATION_RESOURCES,
    CLOUDFORMATION_TEMPLATE_BODY,
    CLOUDFORMATION_TEMPLATE_URL,
    DYNAMODB_ITEM_TO_UPDATE_TOO_LARGE,
    DYNAMODB_TRANSACTION_BYTES,
    IAM_MANAGED_POLICY,
    IAM_ROLE_INLINE_POLICIES,
    IAM_TRUST_POLICY,
    SQS_MESSAGE,
    policy_characters,
)

#: The CloudFormation actions that take a template (TemplateBody or TemplateURL).
TEMPLATE_ACTIONS = ("create_stack", "update_stack", "create_change_set", "validate_template")


def install() -> None:
    """Patch moto, in this server process, to refuse past each quota as AWS does (the module's
    table). Call it once, before the server answers its first request."""
    _cloudformation()
    _iam()
    _sqs()
    _dynamodb()
    _kms_key_tags()


def _argument(function: Callable, name: str) -> Callable[..., Any]:
    """A reader of argument ``name`` of a call of ``function`` (positional or keyword)."""
    signature = inspect.signature(function)
    return lambda *args, **kwargs: signature.bind(*args, **kwargs).arguments.get(name)


# --- CloudFormation ---------------------------------------------------------------------------------


def template_resources(body: str) -> int:
    """The resources a template (JSON or YAML text) declares; 0 when it has no ``Resources``.

    Raises:
        moto's ValidationError: the text is neither JSON nor YAML (as moto answers it).
    """
    try:
        template = json.loads(body)
    except ValueError:
        from moto.cloudformation.models import Stack  # noqa: PLC0415 - YAML, with CloudFormation's tags

        template = Stack.parse_template(body)
    resources = template.get("Resources") if isinstance(template, dict) else None
    return len(resources) if isinstance(resources, dict) else 0


def _check_template(body: str, size: Any) -> None:
    from moto.cloudformation.exceptions import ValidationError  # noqa: PLC0415 - server process only

    if len(body.encode("utf-8")) > size.value:
        raise ValidationError(message=size.refusal())
    count = template_resources(body)
    if count > CLOUDFORMATION_RESOURCES.value:
        raise ValidationError(message=CLOUDFORMATION_RESOURCES.refusal(count=count))


def _cloudformation() -> None:
    from moto.cloudformation.responses import CloudFormationResponse  # noqa: PLC0415

    def checked(action: Callable) -> Callable:
        def run(self):
            body = self._get_param("TemplateBody")
            if body:
                _check_template(body, CLOUDFORMATION_TEMPLATE_BODY)
            return action(self)

        return run

    for name in TEMPLATE_ACTIONS:
        setattr(CloudFormationResponse, name, checked(getattr(CloudFormationResponse, name)))
    from_s3 = CloudFormationResponse._get_stack_from_s3_url

    def stack_from_s3_url(self, template_url: str) -> str:
        body = from_s3(self, template_url)
        _check_template(body, CLOUDFORMATION_TEMPLATE_URL)
        return body

    CloudFormationResponse._get_stack_from_s3_url = stack_from_s3_url  # type: ignore[method-assign]  # moto's, server process only


# --- IAM ----------------------------------------------------------------------------------------------


def _limit_exceeded(message: str) -> Exception:
    from moto.iam.exceptions import LimitExceededException  # noqa: PLC0415

    return LimitExceededException(message)  # HTTP 409, from IAM's model, as AWS answers it


def _iam() -> None:
    from moto.iam.models import IAMBackend, Role  # noqa: PLC0415

    put_policy = Role.put_policy

    def role_put_policy(self, policy_name: str, policy_json: Any) -> None:
        others = sum(policy_characters(document) for name, document in self.policies.items() if name != policy_name)
        if others + policy_characters(policy_json) > IAM_ROLE_INLINE_POLICIES.value:
            raise _limit_exceeded(IAM_ROLE_INLINE_POLICIES.refusal(role=self.name))
        put_policy(self, policy_name, policy_json)

    def sized(method: Callable, argument: str, quota: Any) -> Callable:
        read = _argument(method, argument)

        def check(*args, **kwargs):
            document = read(*args, **kwargs)
            if document and policy_characters(document) > quota.value:
                raise _limit_exceeded(quota.refusal())
            return method(*args, **kwargs)

        return check

    Role.put_policy = role_put_policy  # type: ignore[method-assign]  # moto's, server process only
    for name, argument, quota in (("create_role", "assume_role_policy_document", IAM_TRUST_POLICY),
                                  ("update_assume_role_policy", "policy_document", IAM_TRUST_POLICY),
                                  ("create_policy", "policy_document", IAM_MANAGED_POLICY),
                                  ("create_policy_version", "policy_document", IAM_MANAGED_POLICY)):
        setattr(IAMBackend, name, sized(getattr(IAMBackend, name), argument, quota))


# --- SQS -----------------------------------------------------------------------------------------------


def _value_bytes(value: Any) -> int:
    if isinstance(value, bytes):
        return len(value)
    return len(str(value).encode("utf-8"))


def sqs_message_bytes(body: str, attributes: dict[str, Any] | None) -> int:
    """A message's size as SQS counts it against its limit: the body's UTF-8 bytes and, of each
    attribute, its name, its type and its value (a binary value decoded from base64)."""
    size = len(body.encode("utf-8"))
    for name, attribute in (attributes or {}).items():
        size += len(name.encode("utf-8")) + _value_bytes(attribute.get("DataType", ""))
        if attribute.get("StringValue") is not None:
            size += _value_bytes(attribute["StringValue"])
        binary = attribute.get("BinaryValue")
        if binary is not None:
            size += len(binary) if isinstance(binary, bytes) else len(base64.b64decode(binary))
    return size


def _sqs() -> None:
    from moto.sqs.exceptions import InvalidParameterValue  # noqa: PLC0415
    from moto.sqs.models import SQSBackend  # noqa: PLC0415

    send = SQSBackend.send_message
    attributes_of = _argument(send, "message_attributes")

    def send_message(self, queue_name: str, message_body: str, *args, **kwargs):
        limit = min(int(self.get_queue(queue_name).maximum_message_size), SQS_MESSAGE.value)
        attributes = attributes_of(self, queue_name, message_body, *args, **kwargs)
        if sqs_message_bytes(message_body, attributes) > limit:
            raise InvalidParameterValue(SQS_MESSAGE.message.format(value=limit))
        return send(self, queue_name, message_body, *args, **kwargs)

    SQSBackend.send_message = send_message  # type: ignore[method-assign]  # moto's, server process only


# --- DynamoDB --------------------------------------------------------------------------------------------


def dynamodb_item_bytes(attributes: dict[str, Any]) -> int:
    """An item's size by DynamoDB's rules (attribute names and values), as moto reckons it."""
    from moto.dynamodb.models.dynamo_type import DynamoType  # noqa: PLC0415
    from moto.dynamodb.models.utilities import bytesize  # noqa: PLC0415

    return sum(bytesize(name) + DynamoType(value).size() for name, value in (attributes or {}).items())


def transaction_bytes(transact_items: list[dict[str, Any]]) -> int:
    """The size of a TransactWriteItems request's items: each Put's item; of every other action,
    its key and its expression values."""
    size = 0
    for entry in transact_items:
        for kind, action in entry.items():
            if kind == "Put":
                size += dynamodb_item_bytes(action.get("Item", {}))
            else:
                size += dynamodb_item_bytes(action.get("Key", {}))
                size += dynamodb_item_bytes(action.get("ExpressionAttributeValues", {}))
    return size


class ValidationError(Exception):
    """An action of a transaction that DynamoDB cancels with reason code ``ValidationError``
    (moto's transaction records a reason by the exception's class name and message)."""


_in_transaction = threading.local()


def _dynamodb() -> None:
    from moto.dynamodb.exceptions import ItemSizeToUpdateTooLarge, MockValidationException  # noqa: PLC0415
    from moto.dynamodb.models import DynamoDBBackend  # noqa: PLC0415

    transact = DynamoDBBackend.transact_write_items
    update = DynamoDBBackend.update_item

    def transact_write_items(self, transact_items):
        if transaction_bytes(transact_items) > DYNAMODB_TRANSACTION_BYTES.value:
            raise MockValidationException(DYNAMODB_TRANSACTION_BYTES.refusal())
        _in_transaction.active = True
        try:
            return transact(self, transact_items)
        finally:
            _in_transaction.active = False

    def update_item(self, *args, **kwargs):
        try:
            return update(self, *args, **kwargs)
        except ItemSizeToUpdateTooLarge:
            if getattr(_in_transaction, "active", False):
                raise ValidationError(DYNAMODB_ITEM_TO_UPDATE_TOO_LARGE) from None
            raise

    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]  # moto's, server process only
    DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]  # moto's, server process only


# --- KMS key tags in a template ------------------------------------------------------------------------


def _kms_key_tags() -> None:
    from moto.kms.models import Key  # noqa: PLC0415

    create = Key.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]  # a classmethod's function

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, *args, **kwargs):
        properties = cloudformation_json.get("Properties", {})
        tags = [{"TagKey": tag["Key"], "TagValue": tag["Value"]} for tag in properties.get("Tags", [])]
        cloudformation_json = {**cloudformation_json, "Properties": {**properties, "Tags": tags}}
        return create(cls, resource_name, cloudformation_json, *args, **kwargs)

    Key.create_from_cloudformation_json = classmethod(create_from_cloudformation_json)  # type: ignore[method-assign,assignment]  # moto's, server process only
