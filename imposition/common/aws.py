"""boto3 clients for SQS and S3, one per process and service.

The endpoint and credentials follow the AWS SDK's own environment (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_SQS``, ``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``…), so the same code talks
to the embedded moto endpoint locally and to real AWS in production. Clients are cached per process
id: a botocore client must not cross a ``fork()`` (Celery's prefork pool forks workers).

Every client of a process (boto3's and PynamoDB's) is made from one botocore session whose loader
holds the parsed service models (:func:`service_models`); a worker loads them before its pool forks
(:func:`preload_service_models`), so each child makes its clients in 0.06 s of CPU instead of about
1 s (botocore parses the DynamoDB model once per session, and PynamoDB makes a session per model).
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config

from imposition.common.settings import get_settings

#: botocore's "standard" retry mode: retries throttling and transient errors with backoff.
_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30)


#: The services whose models a worker loads before it forks.
SERVICES = ("dynamodb", "sqs", "s3")
#: botocore client creation on one session is not thread-safe (boto/botocore#1246).
_creating = threading.Lock()


@functools.lru_cache(maxsize=1)
def service_models() -> botocore.loaders.Loader:
    """The botocore loader every session of this process tree shares: parsed JSON only (no
    connection, no credential), so it may cross a ``fork()``; children inherit what it loaded."""
    return botocore.loaders.create_loader()


def preload_service_models(services: tuple[str, ...] = SERVICES) -> None:
    """Parse the service models (API, endpoint rules) of ``services`` into :func:`service_models`;
    call in a parent before it forks (a worker's ``worker_init``)."""
    loader = service_models()
    for service in services:
        loader.load_service_model(service, "service-2")
        loader.load_service_model(service, "endpoint-rule-set-1")
    loader.load_data("endpoints")
    loader.load_data("_retry")


def new_botocore_session() -> botocore.session.Session:
    """A new botocore session on the shared :func:`service_models` (for a library that makes a
    session per client and takes credentials of its own: kombu)."""
    session = botocore.session.get_session()
    session.register_component("data_loader", service_models())
    return session


@functools.lru_cache(maxsize=None)
def _botocore_session(pid: int) -> botocore.session.Session:
    return new_botocore_session()


def botocore_session() -> botocore.session.Session:
    """The process's botocore session (on the shared :func:`service_models`)."""
    return _botocore_session(os.getpid())


def on_shared_session(connection: Any) -> Any:
    """Make a PynamoDB ``Connection`` (not yet used) create its botocore client from
    :func:`botocore_session` instead of a session of its own; returns the connection. PynamoDB has
    no public way to share one (pynamodb/PynamoDB#1245): its ``session`` property is a per-thread
    cache, and the client it creates is then shared by every thread."""
    connection._local.session = botocore_session()
    return connection


@functools.lru_cache(maxsize=None)
def _boto3_session(pid: int) -> boto3.session.Session:
    return boto3.session.Session(botocore_session=botocore_session())


@functools.lru_cache(maxsize=None)
def _client(service: str, pid: int) -> Any:
    with _creating:
        return _boto3_session(pid).client(service, region_name=get_settings().aws_region, config=_CLIENT_CONFIG)


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
    _boto3_session.cache_clear()
    _botocore_session.cache_clear()
