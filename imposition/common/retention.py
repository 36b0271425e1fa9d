"""How long a final job and its objects are kept: one setting, ``Settings.job_retention_days``, read
by the jobs table's DynamoDB TTL and by the bucket's S3 lifecycle rules (docs/deploy-processes.md,
"Retention").

====================================  =============================================================
what                                  expires
====================================  =============================================================
a job item, once final                ``expires_at`` = the final write's time + job_retention_days
                                      (DynamoDB TTL on ``leases.models.JOB_TTL_ATTRIBUTE``; deletion
                                      follows within days, as DynamoDB's TTL documentation says)
its input, plate, JDF and previews    job_retention_days after each was written (S3 lifecycle rule
                                      on the prefix ``tenants/``, where every job object lives)
an unfinished multipart upload        s3_abort_incomplete_upload_days after it began
====================================  =============================================================

An object is written before its job is final, so it goes at most the job's run time before the item
that names it: a download of an expired plate says ``no such object``. A job retried by an operator
is not final again until it ends, so it loses its ``expires_at`` (leases.lifecycle.retry).
"""

from __future__ import annotations

from imposition.common.settings import Settings, get_settings

#: Every job object (input, plate, its JDF Layout, previews) lives under this prefix (imposition.common.tenancy).
JOB_OBJECTS_PREFIX = "tenants/"
SECONDS_PER_DAY = 86_400


def job_expires_at(final_at: float, s: Settings | None = None) -> int:
    """Epoch seconds at which a job that became final at ``final_at`` expires (DynamoDB TTL wants
    a whole number)."""
    s = s or get_settings()
    return int(final_at + s.job_retention_days * SECONDS_PER_DAY)


def bucket_lifecycle_rules(s: Settings | None = None) -> list[dict]:
    """The bucket's lifecycle rules in the S3 API's shape (``PutBucketLifecycleConfiguration``'s
    ``Rules``), for ``imposition provision``."""
    s = s or get_settings()
    return [
        {"ID": "imposition-job-objects", "Filter": {"Prefix": JOB_OBJECTS_PREFIX}, "Status": "Enabled",
         "Expiration": {"Days": s.job_retention_days}},
        {"ID": "imposition-incomplete-uploads", "Filter": {"Prefix": ""}, "Status": "Enabled",
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": s.s3_abort_incomplete_upload_days}},
    ]


def cloudformation_lifecycle_rules(s: Settings | None = None) -> list[dict]:
    """The same rules in CloudFormation's shape (``AWS::S3::Bucket`` ``LifecycleConfiguration.Rules``),
    for the rendered template."""
    s = s or get_settings()
    return [
        {"Id": "imposition-job-objects", "Prefix": JOB_OBJECTS_PREFIX, "Status": "Enabled",
         "ExpirationInDays": s.job_retention_days},
        {"Id": "imposition-incomplete-uploads", "Status": "Enabled",
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": s.s3_abort_incomplete_upload_days}},
    ]
