"""A client stopped in the middle of a request does not hold the local DynamoDB endpoint.

The DynamoDB endpoint serialises moto's work (:mod:`devstack.localaws`). It did so by serving one
connection at a time, so a worker SIGSTOPped while sending a request (the fault tests stop
children holding leases) left the server reading that request for good: every other client met
connect timeouts and the cluster's tests failed one after another. Here a raw socket sends half a
request and stays open; the endpoint must still answer a real client at once, and transactions
must still be isolated (the serialisation is kept).
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import boto3

from devstack.localaws import MotoProcess


def test_a_half_sent_request_does_not_hold_the_dynamodb_endpoint():
    server = MotoProcess(single_threaded=True)
    stalled = None
    try:
        url = urlparse(server.url)
        stalled = socket.create_connection((url.hostname, url.port), timeout=5)
        stalled.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.0\r\n"
                        b"X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 100\r\n\r\n{\"a\"")
        time.sleep(0.5)  # the server has accepted it and is reading its body
        client = boto3.client("dynamodb", endpoint_url=server.url, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing",
                              config=boto3.session.Config(connect_timeout=3, read_timeout=3,
                                                          retries={"max_attempts": 1}))
        started = time.monotonic()
        assert client.list_tables()["TableNames"] == []
        assert time.monotonic() - started < 3
    finally:
        if stalled is not None:
            stalled.close()
        server.stop()
