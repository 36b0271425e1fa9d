"""Adversarial inputs that need no worker: layout text, webhook headers, the command line.

Each test states the behaviour the service promises (a typed error naming field, value and limit; a
clear refusal instead of a traceback) for one hostile input found by the adversarial review.
Project modules are imported inside the tests: this file may load before the session's
``pytest_configure`` has set the environment.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import redis
from click.testing import CliRunner

#: Nesting deep enough to exhaust the JSON decoder's recursion (CPython's limit is 1000 frames).
DEEP_NESTING = 100_000


def test_deeply_nested_layout_json_is_an_invalid_layout_not_a_recursion_error():
    from imposition.engine import parse_layout
    from imposition.engine.errors import InvalidLayout

    nested = '{"layout": "n_up", "sheet": "A4", "x": ' + "[" * DEEP_NESTING + "]" * DEEP_NESTING + "}"
    with pytest.raises(InvalidLayout):
        parse_layout(nested)


def test_invalid_layout_message_does_not_echo_a_megabyte_value():
    """A 1 MiB bogus sheet name must not come back as a 2 MiB error message (it did: the value is
    repeated whole, once by the field and once by the preset check; 50 MiB gave 100 MiB)."""
    from imposition.engine import parse_layout
    from imposition.engine.errors import InvalidLayout

    with pytest.raises(InvalidLayout) as caught:
        parse_layout({"layout": "n_up", "sheet": "A" * 1024 * 1024})
    message = str(caught.value)
    assert "sheet" in message
    assert len(message) < 10_000


def test_layout_that_cannot_fit_any_sheet_is_refused_at_submission(fresh_aws):
    """Two 200 mm gutters on an A5 sheet can never fit, whatever the PDF: refuse before publishing
    instead of spending a slot to fail the job at the worker."""
    from imposition.engine.errors import InvalidLayout
    from imposition.common.tenancy import input_key
    from tasks import storage
    from tasks.submission import submit_job
    from tests.admission.helpers import SAMPLE_PDF

    from imposition.common.settings import get_settings
    from tests.admission.helpers import jobs_of, queue_messages
    from tests.conftest import REDIS_NAMESPACE

    tenant, job_id = f"adv-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    storage.upload(SAMPLE_PDF, input_key(tenant, job_id))
    queued_before = queue_messages(get_settings().imposition_queue)
    with pytest.raises(InvalidLayout, match="gutter"):
        submit_job(tenant_id=tenant, token=job_id, input_key=input_key(tenant, job_id),
                   layout={"layout": "n_up", "sheet": "A5", "columns": 2, "gutter_mm": 200})
    assert queue_messages(get_settings().imposition_queue) == queued_before  # nothing published
    assert jobs_of(tenant) == []  # no job item
    with redis.Redis.from_url(get_settings().redis_url) as r:  # admission never ran: no token, no count
        assert list(r.scan_iter(match=f"{REDIS_NAMESPACE}:admission:{tenant}:*")) == []


@pytest.mark.parametrize("job_id", ["../../other-tenant/jobs/x", "a/b", "x" * 2000, " "])
def test_caller_given_job_id_is_validated(fresh_aws, job_id):
    """``impose.delay(..., job_id=...)`` reaches S3 keys, a worker temp directory name and the
    Celery task id; a job id with '/' or '..' was accepted and the job then failed three times with
    FileNotFoundError at the worker (tempfile prefix ``job-../../...``)."""
    from imposition.common.tenancy import input_key
    from tasks import storage
    from tasks.imposition_task import impose
    from tests.admission.helpers import SAMPLE_PDF

    tenant = f"adv-{uuid.uuid4().hex[:8]}"
    key = input_key(tenant, uuid.uuid4().hex)
    storage.upload(SAMPLE_PDF, key)
    with pytest.raises(ValueError, match="job_id"):
        impose.delay(tenant_id=tenant, token=uuid.uuid4().hex, input_key=key,
                     layout={"layout": "saddle_stitch", "sheet": "A4"}, job_id=job_id)


@pytest.mark.parametrize("candidate", ["é", "\xff\xfe", "ab\u20ac"])
def test_verify_webhook_rejects_non_ascii_signature_with_a_verification_error(candidate):
    """A header value with non-ASCII characters made ``hmac.compare_digest`` raise TypeError, so a
    receiver catching WebhookVerificationError answered 500 (or dropped the connection)."""
    from imposition.webhooks.errors import WebhookVerificationError
    from imposition.webhooks.signing import verify_webhook

    body = json.dumps({"id": "evt-1"}).encode()
    headers = {"Imposition-Signature": f"t={int(time.time())},v1={candidate}", "Imposition-Event-Id": "evt-1"}
    with pytest.raises(WebhookVerificationError):
        verify_webhook(headers, body, "k" * 40)


def _cli(*args: str):
    from imposition.cli.main import main

    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("args", [
    ("tenant", "show", "a/b"),
    ("tenant", "set-cap", "a/b", "3"),
    ("job", "show", ""),
])
def test_cli_refuses_bad_identifiers_with_a_usage_error_not_a_traceback(fresh_aws, args):
    result = _cli(*args)
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    assert isinstance(result.exception, SystemExit)


def test_cli_submit_with_deeply_nested_layout_is_refused(fresh_aws, tmp_path):
    from tests.admission.helpers import SAMPLE_PDF

    layout = tmp_path / "layout.json"
    layout.write_text("[" * DEEP_NESTING + "]" * DEEP_NESTING)
    result = _cli("submit", "--tenant", "acme", "--token", uuid.uuid4().hex, "--layout", str(layout), str(SAMPLE_PDF))
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    assert isinstance(result.exception, SystemExit)


def test_set_cap_refuses_a_number_dynamodb_cannot_store(fresh_aws):
    """DynamoDB numbers hold 38 significant digits. A 41-digit cap was written to the local stack,
    and from then on every projected scan of the tenants table (audit, status, capacity-report)
    failed with HTTP 500; real DynamoDB refuses the write with a traceback instead."""
    from leases.audit import audit

    result = _cli("tenant", "set-cap", f"adv-{uuid.uuid4().hex[:8]}", str(10**41 - 1))
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    assert audit().clean


@pytest.mark.parametrize("max_attempts", [0, 11, 10**40, True, "3"])
def test_max_attempts_is_bounded_by_the_settings_limit(max_attempts):
    """``max_attempts=10**40`` was accepted: a crash-looping job would never end ``failed``."""
    from tasks.submission import submit_job

    tenant, job_id = f"adv-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with pytest.raises(ValueError, match="max_attempts=.*max_attempts_limit=10"):
        submit_job(tenant_id=tenant, token=job_id, input_key=f"tenants/{tenant}/jobs/{job_id}/input.pdf",
                   layout={"layout": "saddle_stitch", "sheet": "A4"}, max_attempts=max_attempts)


def test_token_with_a_lone_surrogate_is_a_value_error_naming_the_token():
    from tasks.submission import submit_job

    tenant, job_id = f"adv-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with pytest.raises(ValueError, match="token"):
        submit_job(tenant_id=tenant, token="tok-\ud800", input_key=f"tenants/{tenant}/jobs/{job_id}/input.pdf",
                   layout={"layout": "saddle_stitch", "sheet": "A4"})


@pytest.fixture
def small_input_limit(monkeypatch):
    """This process runs with ``max_input_bytes`` = 1000 (settings re-read), restored after."""
    from imposition.common.settings import get_settings

    monkeypatch.setenv("IMPOSITION_MAX_INPUT_BYTES", "1000")
    get_settings.cache_clear()
    yield 1000
    monkeypatch.undo()
    get_settings.cache_clear()


def test_an_input_over_max_input_bytes_is_refused_before_any_transfer(fresh_aws, tmp_path, small_input_limit):
    """The worker downloaded the whole input before the engine checked its size, and ``submit``
    uploaded any file: both now refuse from the size alone (the object's HEAD, the local file)."""
    from imposition.engine.errors import InputTooLarge
    from imposition.common import aws
    from imposition.common.settings import get_settings
    from imposition.common.tenancy import input_key, tenant_prefix
    from tasks import storage
    from tasks.submission import submit
    from tests.admission.helpers import SAMPLE_PDF, jobs_of

    assert SAMPLE_PDF.stat().st_size > small_input_limit
    tenant = f"adv-{uuid.uuid4().hex[:8]}"
    key = input_key(tenant, uuid.uuid4().hex)
    storage.upload(SAMPLE_PDF, key)
    target = tmp_path / "input.pdf"
    operations: list[str] = []  # every S3 call this process makes while refusing

    def record(event_name: str, **_: object) -> None:
        operations.append(event_name.rsplit(".", 1)[-1])

    aws.s3().meta.events.register("before-call.s3", record, unique_id="adv-count-s3")
    try:
        with pytest.raises(InputTooLarge, match="max_input_bytes=1000") as caught:
            storage.download(key, target)
        assert (caught.value.code, caught.value.retryable) == ("input_too_large", False)
        assert not target.exists()
        assert operations == ["HeadObject"], operations  # the size alone: no GetObject

        operations.clear()
        with pytest.raises(InputTooLarge, match="max_input_bytes=1000"):
            submit(SAMPLE_PDF, tenant_id=tenant, token=uuid.uuid4().hex,
                   layout={"layout": "saddle_stitch", "sheet": "A4"})
        assert not {"PutObject", "CreateMultipartUpload"} & set(operations), operations  # nothing uploaded
    finally:
        aws.s3().meta.events.unregister("before-call.s3", unique_id="adv-count-s3")
    listing = aws.s3().list_objects_v2(Bucket=get_settings().bucket, Prefix=tenant_prefix(tenant))
    assert [o["Key"] for o in listing.get("Contents", [])] == [key]  # only the one this test put there
    assert jobs_of(tenant) == []


@pytest.mark.parametrize("args", [
    ("provision",),
    ("job", "show", "abc"),
    ("tenant", "show", "acme"),
    ("tenant", "set-cap", "acme", "3"),
    ("audit",),
])
def test_cli_reports_an_unreachable_endpoint_in_one_line(args):
    """With the stack down, every command ended in an EndpointConnectionError traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9"}
    command = Path(sys.executable).with_name("imposition")
    result = subprocess.run([str(command), *args], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "http://127.0.0.1:9" in result.stderr, result.stderr


@pytest.mark.parametrize("args", [
    ("audit",),
    ("job", "show", "0" * 32),
    ("tenant", "show", "acme"),
])
def test_cli_reports_an_unprovisioned_table_in_one_line(args):
    """Against a reachable endpoint whose tables were never provisioned, ``audit`` ended in a
    ``ScanError`` (ResourceNotFoundException) traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    suffix = uuid.uuid4().hex[:8]
    env = {**os.environ, **{f"IMPOSITION_{kind}_TABLE": f"never-provisioned-{kind.lower()}-{suffix}"
                            for kind in ("TENANTS", "LEASES", "JOBS")}}
    command = Path(sys.executable).with_name("imposition")
    result = subprocess.run([str(command), *args], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "never-provisioned-" in result.stderr or "does not exist" in result.stderr, result.stderr
    assert "imposition provision" in result.stderr, result.stderr


@pytest.mark.parametrize("status", ["queued", "succeeded"])
def test_acquire_naming_another_tenant_is_a_tenant_mismatch_and_writes_nothing(fresh_aws, status):
    """The lease transaction counted the cap of the tenant the caller named and never compared it
    with the job's own tenant (the worker passes the message's ``tenant_id``)."""
    from leases import reads, transactions
    from leases.errors import TenantMismatch
    from leases.models import JobItem, TenantItem
    from tests.leases.helpers import make_job

    owner, other = f"adv-{uuid.uuid4().hex[:8]}", f"adv-{uuid.uuid4().hex[:8]}"
    job_id = make_job(owner)
    JobItem(job_id).update(actions=[JobItem.status.set(status)])
    with pytest.raises(TenantMismatch) as caught:
        transactions.acquire(job_id, other, "adv-worker/1")
    assert (caught.value.tenant_id, caught.value.job_tenant_id) == (other, owner)
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, int(job.attempts or 0)) == (status, 0)
    assert reads.read_lease(job_id) is None
    assert TenantItem.count(other, consistent_read=True) == 0
