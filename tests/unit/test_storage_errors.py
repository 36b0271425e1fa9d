"""Which failures are the infrastructure's and which the job's (issue 15, item 5): S3 errors as
botocore and s3transfer raise them, and the run's errors as :class:`tasks.base.FairTask` sees them."""

from __future__ import annotations

import pytest
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError
from pynamodb.exceptions import PutError
from s3transfer.exceptions import RetriesExceededError

from imposition.engine.errors import NotAPdf
from leases.errors import LeaseContention
from tasks.outcomes import is_infrastructure_failure
from tasks.storage import InputMissing, StorageError, is_infrastructure

pytestmark = pytest.mark.unit


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


def upload_failed(cause: BaseException) -> S3UploadFailedError:
    """What boto3's ``upload_file`` raises: an S3UploadFailedError raised while handling ``cause``."""
    try:
        try:
            raise cause
        except ClientError as exc:
            raise S3UploadFailedError(f"Failed to upload a to b/c: {exc}")  # noqa: B904 - as boto3 does
    except S3UploadFailedError as wrapped:
        return wrapped


@pytest.mark.parametrize("exc", [
    client_error("ServiceUnavailable", 503), client_error("InternalError", 500), client_error("SlowDown", 503),
    client_error("RequestTimeout", 400), EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), ConnectionClosedError(endpoint_url="http://127.0.0.1:1"),
    upload_failed(client_error("ServiceUnavailable", 503)), RetriesExceededError(ConnectionError("reset")),
    client_error("NoSuchBucket", 404), upload_failed(client_error("NoSuchBucket", 404)),
])
def test_an_endpoint_or_network_failure_is_the_infrastructures(exc):
    assert is_infrastructure(exc)


@pytest.mark.parametrize("exc", [
    client_error("NoSuchKey", 404), client_error("AccessDenied", 403), client_error("InvalidArgument", 400),
    upload_failed(client_error("AccessDenied", 403)), ValueError("x"),
])
def test_a_refused_request_or_a_missing_object_is_not(exc):
    assert not is_infrastructure(exc)


def test_the_run_charges_the_jobs_own_failures_only():
    assert is_infrastructure_failure(StorageError("upload failed", infrastructure=True))
    assert is_infrastructure_failure(PutError("renewal", cause=EndpointConnectionError(endpoint_url="u")))
    assert is_infrastructure_failure(LeaseContention("renewal throttled"))
    assert is_infrastructure_failure(ConnectionResetError())
    assert not is_infrastructure_failure(StorageError("upload failed"))  # e.g. access denied
    assert not is_infrastructure_failure(InputMissing("input_key='k': no such object"))
    assert not is_infrastructure_failure(NotAPdf("not a PDF"))
    assert not is_infrastructure_failure(OSError(28, "No space left on device"))  # the host's, not AWS's
    assert not is_infrastructure_failure(client_error("AccessDenied", 403))


def test_an_unresolved_acquire_crosses_a_process_boundary():
    import pickle

    from leases.errors import AcquireUnresolved

    exc = pickle.loads(pickle.dumps(AcquireUnresolved("j" * 32, "t", "w/1", "a" * 32, 12.5)))
    assert (exc.job_id, exc.tenant_id, exc.worker, exc.token, exc.expires_at) == ("j" * 32, "t", "w/1", "a" * 32, 12.5)
    assert "unresolved" in str(exc)
