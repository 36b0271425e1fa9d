"""AWS's quotas on the local endpoint (:mod:`devstack.conformance`, :mod:`imposition.common.aws_quotas`):
each one refused just past its value with AWS's error code and message, through boto3 against the
session's moto servers (the ones ``make run`` starts); and accepted at its value where moto allows
it and it is cheap to show. docs/development.md tables them."""

from __future__ import annotations

import json
import uuid

import boto3
import pytest
from botocore.exceptions import ClientError

from imposition.common import aws_quotas as quotas


def _client(local_aws, service: str):
    env = local_aws.env
    url = env["AWS_ENDPOINT_URL_DYNAMODB"] if service == "dynamodb" else env["AWS_ENDPOINT_URL"]
    return boto3.client(service, endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def refused(call, quota: quotas.Quota, **names: object) -> dict:
    """Run ``call``; it must fail with ``quota``'s code and message. Returns the error response."""
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value.response["Error"]
    assert error["Code"] == quota.error_code, caught.value.response
    assert quota.refusal(**names) in error["Message"], caught.value.response
    return caught.value.response


def _padded(document: dict, path: tuple, size: int, prefix: str = "") -> dict:
    """``document`` with the string at ``path`` (``prefix`` and padding) such that its compact JSON
    is ``size`` characters."""
    def at(doc: dict, value: str) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = prefix + value

    at(document, "")
    short = len(json.dumps(document, separators=(",", ":")))
    assert short <= size
    at(document, "x" * (size - short))
    assert quotas.policy_characters(document) == size
    return document


def template_of(size_bytes: int, resources: int = 1) -> str:
    """A CloudFormation template (compact JSON) of ``size_bytes`` bytes declaring ``resources`` resources."""
    template = {"AWSTemplateFormatVersion": "2010-09-09", "Metadata": {"Padding": ""},
                "Resources": {f"Handle{i}": {"Type": "AWS::CloudFormation::WaitConditionHandle"}
                              for i in range(resources)}}
    _padded(template, ("Metadata", "Padding"), size_bytes)
    return json.dumps(template, separators=(",", ":"))


# --- CloudFormation ------------------------------------------------------------------------------------


def test_a_template_body_past_51200_bytes_is_refused(local_aws):
    cfn = _client(local_aws, "cloudformation")
    limit = quotas.CLOUDFORMATION_TEMPLATE_BODY.value
    assert limit == 51_200
    cfn.validate_template(TemplateBody=template_of(limit))
    refused(lambda: cfn.validate_template(TemplateBody=template_of(limit + 1)), quotas.CLOUDFORMATION_TEMPLATE_BODY)
    refused(lambda: cfn.create_stack(StackName=f"big-{uuid.uuid4().hex[:8]}", TemplateBody=template_of(limit + 1)),
            quotas.CLOUDFORMATION_TEMPLATE_BODY)


def test_a_template_in_s3_past_one_megabyte_is_refused(local_aws):
    s3, cfn = _client(local_aws, "s3"), _client(local_aws, "cloudformation")
    bucket = f"templates-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    limit = quotas.CLOUDFORMATION_TEMPLATE_URL.value
    for key, size in (("fits.json", limit), ("big.json", limit + 1)):
        s3.put_object(Bucket=bucket, Key=key, Body=template_of(size).encode())
    url = f"https://{bucket}.s3.us-east-1.amazonaws.com/"
    cfn.validate_template(TemplateURL=url + "fits.json")
    refused(lambda: cfn.validate_template(TemplateURL=url + "big.json"), quotas.CLOUDFORMATION_TEMPLATE_URL)


def test_resources_are_counted_in_json_and_in_yaml_with_cloudformations_tags():
    from devstack.conformance import template_resources

    assert template_resources(template_of(1_000, resources=3)) == 3
    assert template_resources("Resources:\n  A:\n    Type: AWS::SQS::Queue\n  B:\n    Type: AWS::SQS::Queue\n"
                              "    Properties: {QueueName: !Sub '${AWS::StackName}-b'}\n") == 2


def test_a_template_of_more_than_500_resources_is_refused(local_aws):
    cfn = _client(local_aws, "cloudformation")
    limit = quotas.CLOUDFORMATION_RESOURCES.value
    cfn.validate_template(TemplateBody=template_of(40_000, resources=limit))
    refused(lambda: cfn.validate_template(TemplateBody=template_of(40_000, resources=limit + 1)),
            quotas.CLOUDFORMATION_RESOURCES, count=limit + 1)


# --- IAM -------------------------------------------------------------------------------------------------


def _trust(size: int) -> str:
    document = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole",
        "Condition": {"StringEquals": {"aws:PrincipalTag/team": ""}}}]}
    return json.dumps(_padded(document, ("Statement", 0, "Condition", "StringEquals", "aws:PrincipalTag/team"), size),
                      indent=4)  # white space IAM does not count


def _policy(size: int) -> str:
    document = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject",
                                                        "Resource": ""}]}
    return json.dumps(_padded(document, ("Statement", 0, "Resource"), size, prefix="arn:aws:s3:::b/"),
                      indent=2)  # white space IAM does not count


def test_a_trust_policy_past_2048_characters_is_refused(local_aws):
    iam = _client(local_aws, "iam")
    name = f"trust-{uuid.uuid4().hex[:8]}"
    limit = quotas.IAM_TRUST_POLICY.value
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=_trust(limit))
    response = refused(lambda: iam.create_role(RoleName=name + "-big", AssumeRolePolicyDocument=_trust(limit + 1)),
                       quotas.IAM_TRUST_POLICY)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 409
    refused(lambda: iam.update_assume_role_policy(RoleName=name, PolicyDocument=_trust(limit + 1)),
            quotas.IAM_TRUST_POLICY)


def test_a_managed_policy_past_6144_characters_is_refused(local_aws):
    iam = _client(local_aws, "iam")
    name = f"managed-{uuid.uuid4().hex[:8]}"
    limit = quotas.IAM_MANAGED_POLICY.value
    iam.create_policy(PolicyName=name, PolicyDocument=_policy(limit))
    refused(lambda: iam.create_policy(PolicyName=name + "-big", PolicyDocument=_policy(limit + 1)),
            quotas.IAM_MANAGED_POLICY)


def test_a_roles_inline_policies_past_10240_characters_together_are_refused(local_aws):
    iam = _client(local_aws, "iam")
    role = f"inline-{uuid.uuid4().hex[:8]}"
    limit = quotas.IAM_ROLE_INLINE_POLICIES.value
    iam.create_role(RoleName=role, AssumeRolePolicyDocument=_trust(200))
    iam.put_role_policy(RoleName=role, PolicyName="a", PolicyDocument=_policy(6_000))
    iam.put_role_policy(RoleName=role, PolicyName="b", PolicyDocument=_policy(limit - 6_000))
    iam.put_role_policy(RoleName=role, PolicyName="a", PolicyDocument=_policy(6_000))  # replaced, not added
    refused(lambda: iam.put_role_policy(RoleName=role, PolicyName="c", PolicyDocument=_policy(120)),
            quotas.IAM_ROLE_INLINE_POLICIES, role=role)


def test_a_stack_whose_role_has_too_much_inline_policy_is_refused(local_aws):
    """The template's path to a role (AWS::IAM::Role Policies) is held to the same quota as PutRolePolicy."""
    cfn = _client(local_aws, "cloudformation")
    role = f"stack-role-{uuid.uuid4().hex[:8]}"
    policies = [{"PolicyName": name, "PolicyDocument": json.loads(_policy(size))}
                for name, size in (("a", 6_000), ("b", 4_241))]
    template = {"Resources": {"Role": {"Type": "AWS::IAM::Role", "Properties": {
        "RoleName": role, "AssumeRolePolicyDocument": json.loads(_trust(200)), "Policies": policies}}}}
    refused(lambda: cfn.create_stack(StackName=role, TemplateBody=json.dumps(template),
                                     Capabilities=["CAPABILITY_NAMED_IAM"]),
            quotas.IAM_ROLE_INLINE_POLICIES, role=role)


# --- SQS ---------------------------------------------------------------------------------------------------


def test_an_sqs_message_past_one_mebibyte_is_refused_counting_bytes_and_attributes(local_aws):
    sqs = _client(local_aws, "sqs")
    url = sqs.create_queue(QueueName=f"quota-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    limit = quotas.SQS_MESSAGE.value
    assert limit == 1_048_576
    sqs.send_message(QueueUrl=url, MessageBody="x" * limit)
    refused(lambda: sqs.send_message(QueueUrl=url, MessageBody="x" * (limit + 1)), quotas.SQS_MESSAGE)
    # two bytes a character: within the limit in characters, past it in bytes
    refused(lambda: sqs.send_message(QueueUrl=url, MessageBody="é" * (limit // 2 + 1)), quotas.SQS_MESSAGE)
    attribute = {"tenant": {"DataType": "String", "StringValue": "t" * 100}}
    refused(lambda: sqs.send_message(QueueUrl=url, MessageBody="x" * (limit - 100), MessageAttributes=attribute),
            quotas.SQS_MESSAGE)


# --- DynamoDB ------------------------------------------------------------------------------------------------


@pytest.fixture
def table(local_aws):
    dynamodb = _client(local_aws, "dynamodb")
    name = f"quota-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(TableName=name, KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                          BillingMode="PAY_PER_REQUEST")
    yield dynamodb, name
    dynamodb.delete_table(TableName=name)


def _item(key: str, size: int) -> dict:
    """An item of ``size`` bytes by DynamoDB's rules: key ``k`` and a string ``v``."""
    return {"k": {"S": key}, "v": {"S": "x" * (size - len("k") - len(key) - len("v"))}}


def test_an_item_past_400_kilobytes_is_refused(table):
    dynamodb, name = table
    refused(lambda: dynamodb.put_item(TableName=name, Item=_item("big", quotas.DYNAMODB_ITEM.value + 1)),
            quotas.DYNAMODB_ITEM)


def test_a_transaction_of_more_than_100_actions_is_refused(table):
    dynamodb, name = table
    limit = quotas.DYNAMODB_TRANSACTION_ACTIONS.value
    dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": name, "Item": _item(f"i{i}", 100)}}
                                                 for i in range(limit)])
    refused(lambda: dynamodb.transact_write_items(TransactItems=[
        {"Put": {"TableName": name, "Item": _item(f"j{i}", 100)}} for i in range(limit + 1)]),
        quotas.DYNAMODB_TRANSACTION_ACTIONS)


def test_a_transaction_past_4_megabytes_is_refused_and_writes_nothing(table):
    dynamodb, name = table
    limit = quotas.DYNAMODB_TRANSACTION_BYTES.value
    size = 400_000  # under moto's item bound; 11 of them pass 4 MB, 10 do not
    assert 10 * size < limit < 11 * size
    dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": name, "Item": _item(f"a{i}", size)}}
                                                 for i in range(10)])
    refused(lambda: dynamodb.transact_write_items(TransactItems=[
        {"Put": {"TableName": name, "Item": _item(f"b{i}", size)}} for i in range(11)]),
        quotas.DYNAMODB_TRANSACTION_BYTES)
    assert "Item" not in dynamodb.get_item(TableName=name, Key={"k": {"S": "b0"}}, ConsistentRead=True)


def test_an_update_in_a_transaction_past_the_item_size_cancels_the_transaction(table):
    """AWS cancels the transaction (TransactionCanceledException, reason ValidationError) where a
    lone UpdateItem answers ValidationException; nothing of the transaction applies."""
    dynamodb, name = table
    dynamodb.put_item(TableName=name, Item=_item("grows", 300_000))
    grow = {"Update": {"TableName": name, "Key": {"k": {"S": "grows"}}, "UpdateExpression": "SET w = :w",
                       "ExpressionAttributeValues": {":w": {"S": "y" * 200_000}}}}
    other = {"Put": {"TableName": name, "Item": _item("other", 100)}}
    with pytest.raises(ClientError) as caught:
        dynamodb.transact_write_items(TransactItems=[other, grow])
    response = caught.value.response
    assert response["Error"]["Code"] == "TransactionCanceledException", response
    assert response["CancellationReasons"] == [
        {"Code": "None"}, {"Code": "ValidationError", "Message": quotas.DYNAMODB_ITEM_TO_UPDATE_TOO_LARGE}]
    assert "Item" not in dynamodb.get_item(TableName=name, Key={"k": {"S": "other"}}, ConsistentRead=True)
    assert "w" not in dynamodb.get_item(TableName=name, Key={"k": {"S": "grows"}}, ConsistentRead=True)["Item"]
    # the same update alone: a ValidationException, as AWS answers it
    with pytest.raises(ClientError) as alone:
        dynamodb.update_item(**{key: value for key, value in grow["Update"].items()})
    assert alone.value.response["Error"]["Code"] == "ValidationException"
    assert quotas.DYNAMODB_ITEM_TO_UPDATE_TOO_LARGE in alone.value.response["Error"]["Message"]
