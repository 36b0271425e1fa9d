"""``imposition provision`` converges what it finds to the template: a table missing an index gets it,
a table with TTL on another attribute is named in a typed error, and a second run changes nothing."""

from __future__ import annotations

import urllib.request

import pytest
from click.testing import CliRunner

from imposition.cli.main import main as cli
from imposition.cli.provision import TtlConflict, provision
from imposition.cli.template import render, table_id
from imposition.common import aws
from imposition.common.settings import get_settings
from leases.models import JobItem, TokenClaimItem
from tests.conftest import reset_aws


def _empty(local_aws) -> None:
    """Every moto backend emptied, nothing provisioned."""
    for server in (local_aws.main, local_aws.dynamodb):
        urllib.request.urlopen(urllib.request.Request(f"{server.url}/moto-api/reset", method="POST"), timeout=10).read()
    aws.reset()


@pytest.fixture
def empty_aws(local_aws):
    _empty(local_aws)
    yield local_aws
    reset_aws()  # the next test finds the stack provisioned again


def test_a_missing_index_is_added_to_an_existing_table(empty_aws):
    properties = render(get_settings())["Resources"][table_id(JobItem)]["Properties"]
    dynamodb = aws.client("dynamodb")
    older = [i for i in properties["GlobalSecondaryIndexes"] if i["IndexName"] != "by-webhook-due"]
    used = {key["AttributeName"] for index in older + [properties] for key in index["KeySchema"]}
    dynamodb.create_table(TableName=properties["TableName"], BillingMode="PAY_PER_REQUEST",
                          AttributeDefinitions=[d for d in properties["AttributeDefinitions"]
                                                if d["AttributeName"] in used],
                          KeySchema=properties["KeySchema"], GlobalSecondaryIndexes=older)
    report = provision()
    assert report.tables[properties["TableName"]] == "exists, index by-webhook-due added"
    indexes = {i["IndexName"] for i in dynamodb.describe_table(TableName=properties["TableName"])["Table"][
        "GlobalSecondaryIndexes"]}
    assert indexes == {i["IndexName"] for i in properties["GlobalSecondaryIndexes"]}
    again = CliRunner().invoke(cli, ["provision"])
    assert again.exit_code == 0, again.output
    assert all(line.split()[-1] == "exists" for line in again.output.splitlines()), again.output


def test_ttl_on_another_attribute_is_named_not_overwritten(empty_aws):
    properties = render(get_settings())["Resources"][table_id(TokenClaimItem)]["Properties"]
    dynamodb = aws.client("dynamodb")
    dynamodb.create_table(TableName=properties["TableName"], BillingMode="PAY_PER_REQUEST",
                          AttributeDefinitions=properties["AttributeDefinitions"], KeySchema=properties["KeySchema"])
    dynamodb.update_time_to_live(TableName=properties["TableName"],
                                 TimeToLiveSpecification={"Enabled": True, "AttributeName": "purge_at"})
    with pytest.raises(TtlConflict, match=rf"{properties['TableName']}.*'purge_at'.*'expires_at'"):
        provision()
    ttl = dynamodb.describe_time_to_live(TableName=properties["TableName"])["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "purge_at"  # left as it was


def test_the_bucket_gets_the_templates_protections(fresh_aws):
    s3, bucket = aws.s3(), get_settings().bucket
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == dict.fromkeys(
        ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets"), True)
    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [r["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"] for r in rules if r["ID"] ==
            "imposition-incomplete-uploads"] == [get_settings().s3_abort_incomplete_upload_days]
    assert s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
