"""The serialised DynamoDB endpoint's account of its own work (``devstack.localaws.serialized``,
``GET /_local/busy``), which ``make bench-sched`` turns into its "DynamoDB busy" column: the
requests it counts are exactly those it served, its busy seconds lie within the wall time they
took, and its own reads are not counted. Real moto server processes, not the session's.
"""

from __future__ import annotations

import time

import boto3
import pytest

from bench.sched import Load
from devstack.localaws import MotoProcess, endpoint_busy

REQUESTS = 20


def _client(url: str):
    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture
def server():
    process = MotoProcess(single_threaded=True)
    try:
        client = _client(process.url)
        client.create_table(TableName="jobs", KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
                            BillingMode="PAY_PER_REQUEST")
        yield process, client
    finally:
        process.stop()


def test_the_endpoint_counts_each_request_it_served_and_the_time_it_was_busy(server):
    process, client = server
    busy_before, served_before = endpoint_busy(process.url)
    assert endpoint_busy(process.url)[1] == served_before  # its own reads are not requests it served
    started = time.monotonic()
    for i in range(REQUESTS):
        client.put_item(TableName="jobs", Item={"k": {"S": f"job{i}"}})
    wall_s = time.monotonic() - started
    busy_after, served_after = endpoint_busy(process.url)

    assert served_after - served_before == REQUESTS
    assert 0 < busy_after - busy_before <= wall_s


def test_the_benchmark_reads_the_share_of_the_run_the_endpoint_was_busy(server):
    process, client = server
    load = Load(process.url)
    for i in range(REQUESTS):
        client.put_item(TableName="jobs", Item={"k": {"S": f"job{i}"}})
    time.sleep(0.5)  # idle for the endpoint: its share must be below one
    dynamodb, cpu = load.shares()

    assert dynamodb is not None and 0 < dynamodb < 1
    assert cpu is not None and 0 <= cpu <= 1


def test_an_endpoint_that_is_not_serialised_has_no_account():
    process = MotoProcess(single_threaded=False)
    try:
        with pytest.raises(OSError):
            endpoint_busy(process.url)
        assert Load(process.url).shares()[0] is None  # the column then reads "—", not a made-up share
    finally:
        process.stop()
