"""What a job's delivery reads and produces, apart from its lease: the message's fields, the
job's result, its failure, and which errors are the infrastructure's (:mod:`tasks.base` uses them).
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError
from kombu.exceptions import KombuError
from pynamodb.exceptions import PynamoDBException

from imposition.common.tenancy import shown_value, validate_job_id, validate_tenant_id
from leases.errors import JobNotQueued, LeaseContention
from leases.models import JobStatus
from . import storage

#: Errors of the AWS SDKs and the broker client that say nothing about the job itself.
INFRASTRUCTURE_ERRORS = (PynamoDBException, BotoCoreError, ClientError, KombuError, OSError)


def is_infrastructure_failure(exc: BaseException) -> bool:
    """True if a run failed on the infrastructure, not on the job: an S3 transfer whose endpoint,
    network or bucket failed (:attr:`tasks.storage.StorageError.infrastructure`), a DynamoDB, botocore or
    kombu error, a connection error or timeout (raised by a renewal or an upload inside the run), or
    DynamoDB contention outlasting its retries; not any other ``OSError`` (a disk is the job's host). Such an attempt is not charged
    (up to ``Settings.infra_retry_limit``). The engine's errors, a missing input and anything else
    are the job's own."""
    if isinstance(exc, storage.StorageError):
        return exc.infrastructure
    if isinstance(exc, ClientError):
        return storage.is_infrastructure(exc)
    return isinstance(exc, (PynamoDBException, BotoCoreError, KombuError, ConnectionError, TimeoutError,
                            LeaseContention))


@dataclass(frozen=True)
class JobResult:
    """What a job produced: the plate's S3 key, its size in sheets and sides, the engine's typed
    warnings (``[{"code", "message"}, …]``), its previews' S3 keys and its JDF Layout's (None: the
    engine wrote none), recorded on the job item."""

    output_key: str
    sheets: int
    sides: int
    warnings: tuple[dict[str, str], ...] = ()
    preview_keys: tuple[str, ...] = ()
    jdf_key: str | None = None


class JobFailed(Exception):
    """The job ended ``failed``; raised after the failure is recorded so Celery shows FAILURE.

    Listed in :attr:`FairTask.throws`, so the worker logs it as an expected error, no traceback.
    """

    def __init__(self, job_id: str, code: str, reason: str) -> None:
        super().__init__(job_id, code, reason)  # picklable: args match __init__
        self.job_id = job_id
        self.code = code
        self.reason = reason

    def __str__(self) -> str:
        return f"job {self.job_id} failed ({self.code}): {self.reason}"


def is_duplicate(exc: JobNotQueued, after_attempt: int) -> bool:
    """True if a message that found its job not ``queued`` is a duplicate (ack and drop it).

    It is one if the job is final (or missing: the caller sends a message naming a missing job to
    the dead-letter queue as ``no_such_job`` first), or runs an attempt later than ``after_attempt`` (the
    attempt the message follows). Otherwise the job may still come back to ``queued`` (a retry or
    reclaim in flight, an orphaned lease the sweeper will remove) and the message must not be lost.
    """
    if exc.status is None or JobStatus(exc.status).is_final or exc.status == JobStatus.WAITING.value:
        return True  # a waiting job is brought back by its wake, with a message of its own
    return exc.status == JobStatus.RUNNING.value and exc.attempts is not None and exc.attempts > after_attempt


def message_fields(args: tuple, kwargs: dict) -> tuple[str, str, int]:
    """``(tenant_id, job_id, after_attempt)`` of a job message (kwargs only; ``after_attempt``: the
    attempt the message follows, 0 or absent for the first).

    Raises:
        ValueError: every problem found, named by field (such a message can never run).
    """
    after_attempt = kwargs.get("after_attempt", 0)
    problems, checked = [], []
    for check, value in ((validate_tenant_id, kwargs.get("tenant_id")), (validate_job_id, kwargs.get("job_id"))):
        try:
            checked.append(check(value))
        except ValueError as exc:
            problems.append(str(exc))
    if not isinstance(after_attempt, int) or isinstance(after_attempt, bool) or after_attempt < 0:
        problems.append(f"after_attempt={shown_value(after_attempt)}: must be an integer >= 0")
    if args:
        problems.append(f"positional arguments {shown_value(args)}: the message carries keyword arguments only")
    if problems:
        raise ValueError("; ".join(problems))
    tenant_id, job_id = checked
    return tenant_id, job_id, after_attempt
