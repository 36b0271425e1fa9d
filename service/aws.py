"""boto3 clients for SQS and S3, one per process and service.

The endpoint and credentials follow the AWS SDK's own environment (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_SQS``, ``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``…), so the same code talks
to the embedded moto endpoint locally and to real AWS in production. Clients are cached per process
id: a botocore client must not cross a ``fork()`` (Celery's prefork pool forks workers).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import boto3
from botocore.config import Config

from service.settings import get_settings

#: botocore's "standard" retry mode: retries throttling and transient errors with backoff.
_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30)


@functools.lru_cache(maxsize=None)
def _client(service: str, pid: int) -> Any:
    return boto3.session.Session().client(
        service, region_name=get_settings().aws_region, config=_CLIENT_CONFIG
    )


def client(service: str) -> Any:
    """The process's boto3 client for ``service`` (``"sqs"``, ``"s3"``, ``"dynamodb"``)."""
    return _client(service, os.getpid())


def sqs() -> Any:
    """The process's SQS client."""
    return client("sqs")


def s3() -> Any:
    """The process's S3 client."""
    return client("s3")


@functools.lru_cache(maxsize=None)
def _queue_url(name: str, pid: int) -> str:
    return sqs().get_queue_url(QueueName=name)["QueueUrl"]


def queue_url(name: str) -> str:
    """URL of the SQS queue ``name`` (looked up once per process).

    Raises:
        botocore.exceptions.ClientError: ``AWS.SimpleQueueService.NonExistentQueue`` when the queue
            was never provisioned (run ``imposition provision``).
    """
    return _queue_url(name, os.getpid())


def reset() -> None:
    """Forget cached clients and queue URLs (after the endpoint changed, in tests)."""
    _client.cache_clear()
    _queue_url.cache_clear()
