"""The local DynamoDB endpoint does not keep (or make) a copy of a table per transaction (found by ``make soak``:
its moto server grew about 1 GB a minute, to 15 GB after 1,400 jobs).

moto 5.2 records every model object it creates for its dashboard (``instances_tracked``), and
``TransactWriteItems`` deep-copies every table it touches (its rollback), so each transaction kept
a whole copy of the table alive. Here a real moto server process of :class:`devstack.localaws.MotoProcess`
(not the session's) gets a table of 300 items and 100 transactions: with the leak its memory grows by
about 1 MB per transaction; :func:`devstack.localaws.forgetting_copies` keeps it flat.
"""

from __future__ import annotations

import boto3
import psutil
import pytest
from botocore.exceptions import ClientError

from devstack.localaws import MotoProcess

ITEMS = 300
TRANSACTIONS = 100
#: Growth allowed for the whole run, bytes (the leak costs ~100 MB here, the allocator a few).
GROWTH_BOUND_BYTES = 40 * 2**20


def test_transactions_do_not_keep_copies_of_the_table():
    server = MotoProcess(single_threaded=True)
    try:
        client = boto3.client("dynamodb", endpoint_url=server.url, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_table(TableName="jobs", KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")
        for i in range(ITEMS):
            client.put_item(TableName="jobs", Item={"k": {"S": f"job{i}"},
                                                    **{f"a{j}": {"S": "x" * 20} for j in range(25)}})
        update = {"TableName": "jobs", "UpdateExpression": "SET a0 = :v", "ExpressionAttributeValues": {":v": {"S": "y"}}}
        client.transact_write_items(TransactItems=[{"Update": {**update, "Key": {"k": {"S": "job0"}}}}])
        before = psutil.Process(server.proc.pid).memory_info().rss

        for n in range(TRANSACTIONS):
            client.transact_write_items(TransactItems=[{"Update": {**update, "Key": {"k": {"S": f"job{n}"}}}}])

        grown = psutil.Process(server.proc.pid).memory_info().rss - before
        assert grown < GROWTH_BOUND_BYTES, f"the server grew by {grown / 2**20:.0f} MB over {TRANSACTIONS} transactions"
        assert client.get_item(TableName="jobs", Key={"k": {"S": f"job{TRANSACTIONS - 1}"}})["Item"]["a0"] == {"S": "y"}
    finally:
        server.stop()


def test_a_cancelled_transaction_leaves_every_item_as_it_was_and_a_committed_one_applies():
    """The item-level rollback of :func:`devstack.localaws.item_level_transaction_rollback`: a
    transaction cancelled by its last condition leaves an updated item, a deleted item and a new
    item (and the index over them) as they were; the same transaction without the failing
    condition applies all three."""
    server = MotoProcess(single_threaded=True)
    try:
        client = boto3.client("dynamodb", endpoint_url=server.url, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_table(
            TableName="jobs", KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"},
                                  {"AttributeName": "status", "AttributeType": "S"}],
            GlobalSecondaryIndexes=[{"IndexName": "by-status", "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"}],
                                     "Projection": {"ProjectionType": "KEYS_ONLY"}}],
            BillingMode="PAY_PER_REQUEST")
        for k in ("a", "b", "guard"):
            client.put_item(TableName="jobs", Item={"k": {"S": k}, "status": {"S": "queued"}, "n": {"N": "1"}})

        def transaction(guard_status: str) -> list[dict]:
            return [
                {"Update": {"TableName": "jobs", "Key": {"k": {"S": "a"}}, "UpdateExpression": "SET #s = :r ADD n :one",
                            "ExpressionAttributeNames": {"#s": "status"},
                            "ExpressionAttributeValues": {":r": {"S": "running"}, ":one": {"N": "1"}}}},
                {"Delete": {"TableName": "jobs", "Key": {"k": {"S": "b"}}}},
                {"Put": {"TableName": "jobs", "Item": {"k": {"S": "c"}, "status": {"S": "running"}}}},
                {"ConditionCheck": {"TableName": "jobs", "Key": {"k": {"S": "guard"}}, "ConditionExpression": "#s = :g",
                                    "ExpressionAttributeNames": {"#s": "status"},
                                    "ExpressionAttributeValues": {":g": {"S": guard_status}}}},
            ]

        def state() -> dict:
            items = client.scan(TableName="jobs", ConsistentRead=True)["Items"]
            running = client.query(TableName="jobs", IndexName="by-status", KeyConditionExpression="#s = :r",
                                   ExpressionAttributeNames={"#s": "status"},
                                   ExpressionAttributeValues={":r": {"S": "running"}})["Items"]
            return {"items": {i["k"]["S"]: (i["status"]["S"], i.get("n", {}).get("N")) for i in items},
                    "running": sorted(i["k"]["S"] for i in running)}

        before = state()
        with pytest.raises(ClientError) as refused:
            client.transact_write_items(TransactItems=transaction("paused"))
        assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
        assert state() == before == {"items": {"a": ("queued", "1"), "b": ("queued", "1"), "guard": ("queued", "1")},
                                     "running": []}

        client.transact_write_items(TransactItems=transaction("queued"))
        assert state() == {"items": {"a": ("running", "2"), "c": ("running", None), "guard": ("queued", "1")},
                           "running": ["a", "c"]}
    finally:
        server.stop()
