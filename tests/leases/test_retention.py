"""Retention (imposition.common.retention): a final job item carries its DynamoDB TTL, a job made
not final again drops it, and ``imposition provision`` turns the TTL on and sets the bucket's
lifecycle rules from the same setting. Real moto DynamoDB and S3 over HTTP."""

from __future__ import annotations

import uuid

import pytest

from imposition.cli.provision import provision
from imposition.common import aws
from imposition.common.retention import bucket_lifecycle_rules, job_expires_at
from imposition.common.settings import Settings, get_settings
from imposition.common.tenancy import input_key, jdf_key, plate_key, preview_key
from leases import lifecycle
from leases.models import JOB_TTL_ATTRIBUTE, JobItem
from tests.leases.helpers import make_job


def test_a_cancelled_job_expires_after_the_retention_and_a_retried_one_no_longer_does(tenant_id):
    job_id = make_job(tenant_id)
    assert JobItem.get(job_id).expires_at is None  # not final: kept
    lifecycle.cancel(job_id)
    job = JobItem.get(job_id, consistent_read=True)
    assert job.status == "failed"
    days = get_settings().job_retention_days
    assert job.expires_at == int(job.finished_at + days * 86_400) == job_expires_at(job.finished_at)
    lifecycle.retry(job_id)
    job = JobItem.get(job_id, consistent_read=True)
    assert (job.status, job.expires_at) == ("queued", None)


def test_provision_turns_the_jobs_ttl_on_and_sets_the_buckets_lifecycle_from_the_setting(tenant_id):
    provision()  # again, on the provisioned stack: converges
    s = get_settings()
    ttl = aws.client("dynamodb").describe_time_to_live(TableName=JobItem.Meta.table_name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", JOB_TTL_ATTRIBUTE)
    rules = aws.s3().get_bucket_lifecycle_configuration(Bucket=s.bucket)["Rules"]
    by_id = {rule["ID"]: rule for rule in rules}
    assert by_id["imposition-job-objects"]["Expiration"]["Days"] == s.job_retention_days
    assert by_id["imposition-job-objects"]["Filter"]["Prefix"] == "tenants/"
    # every object a job writes lies under it: input, plate, its JDF Layout, previews
    job_id = uuid.uuid4().hex
    keys = (input_key(tenant_id, job_id), plate_key(tenant_id, job_id), jdf_key(tenant_id, job_id),
            preview_key(tenant_id, job_id, 1))
    assert all(key.startswith("tenants/") for key in keys)
    assert by_id["imposition-incomplete-uploads"]["AbortIncompleteMultipartUpload"] == {
        "DaysAfterInitiation": s.s3_abort_incomplete_upload_days}
    assert len(rules) == len(bucket_lifecycle_rules())


def test_a_retention_shorter_than_the_capacity_report_reads_is_refused():
    with pytest.raises(ValueError, match=r"job_retention_days=20 must be >= capacity_weeks x 7=28"):
        Settings(job_retention_days=20, capacity_weeks=4)
