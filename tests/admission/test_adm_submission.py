"""Admission inside real submissions: ``submit_job`` / ``submit`` / ``imposition submit`` against the
session's moto server (SQS, DynamoDB, S3) and real Redis (database 13)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from imposition import admission
from imposition.admission import AdmissionUnavailable, DuplicateSubmission, RateLimited
from imposition.admission.control import token_key
from imposition.common import aws
from imposition.cli.main import main as cli
from imposition.common.settings import get_settings
from imposition.common.tenancy import ForeignKeyRefused
from tasks.submission import submit, submit_job
from tests.admission.helpers import LAYOUT, SAMPLE_PDF, jobs_of, queue_messages, race_duplicates
from tests.conftest import REDIS_NAMESPACE


def _queue() -> str:
    return get_settings().imposition_queue


def test_one_token_1000_times_from_20_threads_makes_one_job(redis_db, uploaded, new_tenant):
    tenant = new_tenant()
    key = uploaded(tenant)
    created, refused = race_duplicates(
        lambda _thread, _i: submit_job(tenant_id=tenant, token="once", input_key=key, layout=LAYOUT))
    assert len(created) == 1 and len(refused) == 999
    assert set(refused) == set(created)
    assert [j.job_id for j in jobs_of(tenant)] == created
    assert queue_messages(_queue()) == 1
    # the documented option returns the existing job instead of raising
    assert submit_job(tenant_id=tenant, token="once", input_key=key, layout=LAYOUT, on_duplicate="return") == created[0]
    assert queue_messages(_queue()) == 1


def test_101st_submission_in_a_minute_is_refused_while_another_tenant_is_admitted(redis_db, uploaded, new_tenant):
    tenant, other = new_tenant("a"), new_tenant("b")
    key, other_key = uploaded(tenant), uploaded(other)
    for i in range(100):
        submit_job(tenant_id=tenant, token=f"t-{i}", input_key=key, layout=LAYOUT)
    with pytest.raises(RateLimited) as refused:
        submit_job(tenant_id=tenant, token="t-100", input_key=key, layout=LAYOUT)
    assert 0 < refused.value.retry_after_s <= 60
    assert submit_job(tenant_id=other, token="t-0", input_key=other_key, layout=LAYOUT)
    cap = get_settings().default_cap  # the door publishes the tenant's first `cap` jobs and parks the rest
    assert queue_messages(_queue()) == cap + 1
    assert len(jobs_of(tenant)) == 100
    assert sum(1 for j in jobs_of(tenant) if j.status == "waiting") == 100 - cap
    assert redis_db.get(token_key(tenant, "t-100")) is None


def test_publish_failure_leaves_no_key(redis_db, uploaded, new_tenant):
    tenant = new_tenant()
    key = uploaded(tenant)
    sqs = aws.sqs()
    sqs.delete_queue(QueueUrl=aws.queue_url(_queue()))  # a real failure of the real publish
    try:
        with pytest.raises(Exception) as failed:
            submit_job(tenant_id=tenant, token="retry-me", input_key=key, layout=LAYOUT)
        assert not isinstance(failed.value, admission.AdmissionError)
        assert any(entry.name == "publish_job" for entry in failed.traceback), "failed elsewhere than the publish"
        assert redis_db.get(token_key(tenant, "retry-me")) is None
        assert admission.in_flight(tenant) == 0
        assert jobs_of(tenant) == []
    finally:
        from imposition.cli.provision import provision

        provision()
    job_id = submit_job(tenant_id=tenant, token="retry-me", input_key=key, layout=LAYOUT)
    assert [j.job_id for j in jobs_of(tenant)] == [job_id]
    assert redis_db.get(token_key(tenant, "retry-me")) == job_id


def test_redis_down_fails_closed_and_publishes_nothing(fresh_aws, own_redis, new_tenant):
    server, _ = own_redis
    tenant = new_tenant()
    server.stop()
    with pytest.raises(AdmissionUnavailable):
        submit(SAMPLE_PDF, tenant_id=tenant, token="tok", layout=LAYOUT)
    assert queue_messages(_queue()) == 0
    assert jobs_of(tenant) == []
    listed = aws.s3().list_objects_v2(Bucket=get_settings().bucket, Prefix=f"tenants/{tenant}/")
    assert listed.get("KeyCount", 0) == 0


def test_another_tenants_key_is_refused_before_admission(redis_db, uploaded, new_tenant):
    owner, intruder = new_tenant("owner"), new_tenant("intruder")
    key = uploaded(owner)
    with pytest.raises(ForeignKeyRefused):
        submit_job(tenant_id=intruder, token="tok", input_key=key, layout=LAYOUT)
    with pytest.raises(ForeignKeyRefused):
        submit_job(tenant_id=intruder, token="tok", input_key=f"tenants/{intruder}/../{owner}/x.pdf", layout=LAYOUT)
    assert redis_db.keys(f"{REDIS_NAMESPACE}:*") == []
    assert queue_messages(_queue()) == 0


def test_submit_of_a_local_pdf_uploads_nothing_for_a_duplicate(redis_db, fresh_aws, new_tenant):
    tenant = new_tenant()
    job_id = submit(SAMPLE_PDF, tenant_id=tenant, token="local", layout=LAYOUT)
    with pytest.raises(DuplicateSubmission) as dup:
        submit(SAMPLE_PDF, tenant_id=tenant, token="local", layout=LAYOUT)
    assert dup.value.job_id == job_id
    listed = aws.s3().list_objects_v2(Bucket=get_settings().bucket, Prefix=f"tenants/{tenant}/")
    assert [o["Key"] for o in listed["Contents"]] == [f"tenants/{tenant}/jobs/{job_id}/input.pdf"]


def test_cli_submit_reports_refusals_and_returns_duplicates(redis_db, fresh_aws, new_tenant, tmp_path):
    import json

    tenant = new_tenant()
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps(LAYOUT))
    args = ["submit", "--tenant", tenant, "--token", "cli-1", "--layout", str(layout), str(SAMPLE_PDF)]
    runner = CliRunner()
    first = runner.invoke(cli, args)
    assert first.exit_code == 0, first.output
    job_id = first.output.strip()
    again = runner.invoke(cli, args)
    assert again.exit_code == 2 and again.output.startswith("Error: duplicate_submission: ") and job_id in again.output
    returned = runner.invoke(cli, [*args[:-1], "--on-duplicate", "return", str(SAMPLE_PDF)])
    assert returned.exit_code == 0 and returned.output.strip() == job_id
    limits = runner.invoke(cli, ["tenant", "set-limits", tenant, "--rate-limit-per-min", "1"])
    assert limits.exit_code == 0 and json.loads(limits.output)["rate_limit_per_min"] == 1
    limited = runner.invoke(cli, [*args[:4], "cli-2", *args[5:]])
    assert limited.exit_code == 2 and limited.output.startswith("Error: rate_limited: ") and "retry after" in limited.output


def test_submit_refuses_a_truncated_pdf_at_the_door_naming_the_callers_file(redis_db, fresh_aws, new_tenant,
                                                                            tmp_path):
    from imposition.engine.errors import DamagedPdf

    tenant = new_tenant()
    data = SAMPLE_PDF.read_bytes()
    cut = tmp_path / "order 17 – brochure.pdf"
    cut.write_bytes(data[: len(data) // 2])  # cut short: qpdf rebuilds the page tree, the content is gone
    with pytest.raises(DamagedPdf) as caught:
        submit(cut, tenant_id=tenant, token="cut", layout=LAYOUT)
    assert str(caught.value).startswith("order 17 – brochure.pdf: ") and "cannot be read (pages" in str(caught.value)
    assert "input.pdf" not in str(caught.value)
    assert redis_db.keys(f"{REDIS_NAMESPACE}:*") == []  # nothing admitted, uploaded, written or published
    assert jobs_of(tenant) == [] and queue_messages(_queue()) == 0
    listed = aws.s3().list_objects_v2(Bucket=get_settings().bucket, Prefix=f"tenants/{tenant}/")
    assert listed.get("KeyCount", 0) == 0


def test_a_job_keeps_the_name_of_the_file_the_tenant_sent(redis_db, fresh_aws, uploaded, new_tenant, tmp_path):
    from leases.models import JobItem

    tenant = new_tenant()
    local = tmp_path / "Spring catalogue v3.pdf"
    local.write_bytes(SAMPLE_PDF.read_bytes())
    assert JobItem.get(submit(local, tenant_id=tenant, token="local", layout=LAYOUT)).file_name == "Spring catalogue v3.pdf"
    key = uploaded(tenant)
    by_key = submit_job(tenant_id=tenant, token="by-key", input_key=key, layout=LAYOUT)
    assert JobItem.get(by_key).file_name == key.rsplit("/", 1)[-1]
    named = submit_job(tenant_id=tenant, token="named", input_key=key, layout=LAYOUT, file_name="order-17.pdf")
    assert JobItem.get(named).file_name == "order-17.pdf"
    for bad, limit in (("a/b.pdf", "no '/'"), ("", "non-empty"), ("x" * 256, "more than file_name_max_bytes=255")):
        with pytest.raises(ValueError, match=rf"file_name.*{limit}"):
            submit_job(tenant_id=tenant, token=f"bad-{len(bad)}", input_key=key, layout=LAYOUT, file_name=bad)
