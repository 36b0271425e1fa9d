"""S3 transfers of one job (input PDF, plate file), retried in place when transient.

Transient failures (throttling, 5xx, connection drops) are retried with tenacity, after botocore's
own retries (docs/design.md §3: transient errors are retried in place). A missing object is not transient:
it raises :class:`InputMissing`, which fails the job at once. An input larger than
``Settings.max_input_bytes`` is refused from its ``HeadObject`` size, before a byte of it reaches the
worker's disk, with the engine's :class:`imposition.engine.errors.InputTooLarge` (never retried); the
engine checks the downloaded file's size again.

Errors::

    StorageError            S3 kept failing after the in-place retries (retryable; ``infrastructure``
    │                       True when the platform failed: 5xx, throttling, a connection error or
    │                       read timeout, the service's bucket gone; then the attempt is not charged)
    └── InputMissing        the input object does not exist (not retryable)
    imposition.engine.errors.InputTooLarge   (the engine's tree) the input is over max_input_bytes
"""

from __future__ import annotations

from pathlib import Path

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import BotoCoreError, ClientError
from s3transfer.exceptions import RetriesExceededError
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from imposition.engine.errors import InputTooLarge
from imposition.common import aws
from imposition.common.settings import get_settings
from imposition.common.tenancy import shown_value

_MISSING = {"NoSuchKey", "404", "NotFound"}


class StorageError(Exception):
    """Root of S3 transfer errors of a job; ``infrastructure``: the S3 endpoint or the network
    failed (:func:`is_infrastructure` of the cause), not the job's object or the request."""

    retryable = True
    code = "storage"

    def __init__(self, message: str, *, infrastructure: bool = False) -> None:
        super().__init__(message)
        self.infrastructure = infrastructure


class InputMissing(StorageError):
    """The job's input object does not exist (bad input: never retried)."""

    retryable = False
    code = "input_missing"


#: S3 error codes of an endpoint that is failing or shedding load (S3 API reference, "Error codes").
_ENDPOINT_CODES = {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "Throttling",
                   "ThrottlingException", "RequestTimeTooSkewed"}
#: S3 error codes of the service's own storage gone wrong: the deployment's fault, never the job's
#: (the bucket is the service's, ``Settings.bucket``; a plate upload that finds it deleted).
_PLATFORM_CODES = {"NoSuchBucket"}
#: Errors s3transfer raises around a part's failure (an upload's ``ClientError`` becomes the first,
#: a download's exhausted retries of a read the second).
_TRANSFER_ERRORS = (S3UploadFailedError, RetriesExceededError)


def is_infrastructure(exc: BaseException) -> bool:
    """True if ``exc`` says the platform failed, not the request or the object: any botocore
    transport error (connection refused or reset, read timeout), a 5xx or throttling answer, the
    service's bucket missing (``NoSuchBucket``), or an s3transfer error wrapping one (whose message
    is all that is left of it)."""
    if isinstance(exc, BotoCoreError):
        return True
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return int(status) >= 500 or error.get("Code") in _ENDPOINT_CODES | _PLATFORM_CODES
    if isinstance(exc, RetriesExceededError):
        return True  # s3transfer retries a download's reads on transport errors only (socket, timeout)
    if isinstance(exc, S3UploadFailedError):
        cause = exc.__cause__ or exc.__context__
        if cause is not None and cause is not exc:
            return is_infrastructure(cause)
        text = str(exc)
        return (any(code in text for code in _ENDPOINT_CODES | _PLATFORM_CODES) or "(50" in text
                or "Connection" in text)
    return False


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code") not in _MISSING | {"AccessDenied", "403"}
    return isinstance(exc, BotoCoreError) or is_infrastructure(exc)


_in_place = retry(
    retry=retry_if_exception(_transient),
    wait=wait_random_exponential(multiplier=0.2, max=5),
    stop=stop_after_attempt(4),
    reraise=True,
)


@_in_place
def _download(key: str, path: Path) -> None:
    settings = get_settings()
    size_bytes = aws.s3().head_object(Bucket=settings.bucket, Key=key)["ContentLength"]
    if size_bytes > settings.max_input_bytes:
        raise InputTooLarge(f"input_key={shown_value(key)}: {size_bytes} bytes is more than "
                            f"max_input_bytes={settings.max_input_bytes}")
    aws.s3().download_file(settings.bucket, key, str(path))


@_in_place
def _download_object(key: str, path: Path) -> None:
    aws.s3().download_file(get_settings().bucket, key, str(path))


def _mapped_download(transfer, key: str, path: Path, missing: type[StorageError], name: str) -> None:
    """Run ``transfer(key, path)``; a missing object becomes ``missing`` (naming ``name=key``), any
    other S3 failure :class:`StorageError`."""
    try:
        transfer(key, path)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in _MISSING:
            raise missing(f"{name}={shown_value(key)}: no such object in bucket {get_settings().bucket!r}") from exc
        raise StorageError(f"download of {shown_value(key)} failed: {exc}", infrastructure=is_infrastructure(exc)) from exc
    except (BotoCoreError, *_TRANSFER_ERRORS) as exc:
        raise StorageError(f"download of {shown_value(key)} failed: {exc}", infrastructure=is_infrastructure(exc)) from exc


def download_object(key: str, path: Path) -> None:
    """Download object ``key`` of the service bucket to ``path`` whatever its size (a plate, for
    ``imposition job download``); S3 errors retried in place like every transfer here.

    Raises:
        StorageError: no such object (the message says so), or S3 kept failing.
    """
    _mapped_download(_download_object, key, path, StorageError, "output_key")


def download(key: str, path: Path) -> None:
    """Download object ``key`` of the service bucket to ``path``, once its size is known to fit.

    Raises:
        imposition.engine.errors.InputTooLarge: the object is larger than ``Settings.max_input_bytes``
            (its ``HeadObject`` size); nothing was downloaded.
        InputMissing: no such object.
        StorageError: S3 kept failing after the in-place retries.
    """
    _mapped_download(_download, key, path, InputMissing, "input_key")


@_in_place
def _upload(path: Path, key: str, content_type: str) -> None:
    aws.s3().upload_file(str(path), get_settings().bucket, key, ExtraArgs={"ContentType": content_type})


def upload(path: Path, key: str, content_type: str = "application/pdf") -> None:
    """Upload ``path`` to object ``key`` of the service bucket.

    Raises:
        StorageError: S3 kept failing after the in-place retries.
    """
    try:
        _upload(path, key, content_type)
    except (ClientError, BotoCoreError, *_TRANSFER_ERRORS) as exc:
        raise StorageError(f"upload of {shown_value(key)} failed: {exc}", infrastructure=is_infrastructure(exc)) from exc


@_in_place
def delete(key: str) -> None:
    """Delete object ``key`` (no error if it is absent)."""
    aws.s3().delete_object(Bucket=get_settings().bucket, Key=key)
