"""PynamoDB models of the four tables (DESIGN §5, plus the token claims).

``TenantItem`` (table ``tenants``)
    one per tenant: ``in_flight`` (leases held now), optional ``cap`` (tier override of
    ``Settings.default_cap``), admission overrides, webhook URL and secret.
``LeaseItem`` (table ``leases``)
    one per held slot, keyed by job id (a job can never hold two leases): tenant, worker, fencing
    ``token``, ``expires_at``. The global secondary index :class:`LeaseExpiryIndex` (partition
    ``expiry_partition``, sort ``expires_at``) lets the sweeper query expired leases without a scan.
    The table holds at most (nodes × slots) items, so one partition value is enough.
``JobItem`` (table ``jobs``)
    one per job: status (``queued → running → succeeded | failed``, back to ``queued`` on a retry or
    a reclaim), attempts and budget, layout, S3 keys, timestamps (epoch seconds, float), defer
    count, error. The index :class:`JobsByTenantIndex` (partition ``tenant_id``, sort
    ``submitted_at``) serves per-tenant reports.

``TokenClaimItem`` (table ``tokens``)
    one per (tenant, idempotency token) submitted within the idempotency TTL: the durable claim of
    the token (:mod:`admission.claims`), written in one transaction with the job item it names;
    ``expires_at`` is the table's DynamoDB TTL attribute.

Times are UNIX epoch seconds (float) everywhere, named ``*_at``.

Table names come from :mod:`service.settings`; the endpoint and region follow the AWS SDK's
environment (``AWS_ENDPOINT_URL_DYNAMODB`` / ``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``).
"""

from __future__ import annotations

from enum import StrEnum

from pynamodb.attributes import (
    JSONAttribute,
    NumberAttribute,
    UnicodeAttribute,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from service.settings import get_settings

_settings = get_settings()

#: The one partition value of the lease expiry index (see module docstring).
LEASE_EXPIRY_PARTITION = "lease"


class JobStatus(StrEnum):
    """Lifecycle of a job item."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        """True for ``succeeded`` and ``failed``: no message may run the job again."""
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED)


class _Meta:
    region = _settings.aws_region
    billing_mode = "PAY_PER_REQUEST"


class TenantItem(Model):
    """A tenant's fairness state and configuration."""

    class Meta(_Meta):
        table_name = _settings.tenants_table

    tenant_id = UnicodeAttribute(hash_key=True)
    in_flight = NumberAttribute(default=0)
    #: Tier override of ``Settings.default_cap``; absent means the default.
    cap = NumberAttribute(null=True)
    rate_limit_per_min = NumberAttribute(null=True)
    admission_in_flight_cap = NumberAttribute(null=True)
    #: Override of ``Settings.idempotency_ttl_s`` (admission); absent means the default.
    idempotency_ttl_s = NumberAttribute(null=True)
    webhook_url = UnicodeAttribute(null=True)
    webhook_secret = UnicodeAttribute(null=True)
    updated_at = NumberAttribute(null=True)
    #: When the cap override last changed (epoch s): leases acquired before it may exceed a lowered
    #: cap legitimately, so :mod:`leases.audit` holds only later leases to the current cap.
    cap_changed_at = NumberAttribute(null=True)
    #: While set and in the future (epoch s), no lease of this tenant is acquired: ``imposition
    #: audit --repair`` is recounting ``in_flight`` (the lease set may then only shrink).
    repair_until = NumberAttribute(null=True)

    def effective_cap(self, default_cap: int) -> int:
        """The cap this tenant's lease transactions enforce (override or default)."""
        return int(self.cap) if self.cap is not None else default_cap


class LeaseExpiryIndex(GlobalSecondaryIndex["LeaseItem"]):
    """Leases by expiry: ``expiry_partition = 'lease' AND expires_at < now``."""

    class Meta:
        index_name = "by-expiry"
        projection = AllProjection()

    expiry_partition = UnicodeAttribute(hash_key=True)
    expires_at = NumberAttribute(range_key=True)


class LeaseItem(Model):
    """One held slot: the right of ``worker`` to run ``job_id`` until ``expires_at``."""

    class Meta(_Meta):
        table_name = _settings.leases_table

    job_id = UnicodeAttribute(hash_key=True)
    tenant_id = UnicodeAttribute()
    worker = UnicodeAttribute()
    #: Fencing token: every renewal, release and job commit is conditional on it.
    token = UnicodeAttribute()
    acquired_at = NumberAttribute()
    heartbeat_at = NumberAttribute()
    expires_at = NumberAttribute()
    expiry_partition = UnicodeAttribute(default=LEASE_EXPIRY_PARTITION)
    by_expiry = LeaseExpiryIndex()


class JobsByTenantIndex(GlobalSecondaryIndex["JobItem"]):
    """Jobs of one tenant ordered by submission time."""

    class Meta:
        index_name = "by-tenant"
        projection = AllProjection()

    tenant_id = UnicodeAttribute(hash_key=True)
    submitted_at = NumberAttribute(range_key=True)


class JobItem(Model):
    """One imposition job and its whole history."""

    class Meta(_Meta):
        table_name = _settings.jobs_table

    job_id = UnicodeAttribute(hash_key=True)
    tenant_id = UnicodeAttribute()
    token = UnicodeAttribute()
    status = UnicodeAttribute(default=JobStatus.QUEUED.value)
    attempts = NumberAttribute(default=0)
    max_attempts = NumberAttribute()
    layout = JSONAttribute()
    input_key = UnicodeAttribute()
    output_key = UnicodeAttribute(null=True)
    submitted_at = NumberAttribute()
    first_received_at = NumberAttribute(null=True)
    started_at = NumberAttribute(null=True)
    finished_at = NumberAttribute(null=True)
    defer_count = NumberAttribute(default=0)
    #: Fencing token of the lease the job runs under now (absent while queued).
    lease_token = UnicodeAttribute(null=True)
    #: Id of the transaction that last ended a lease on this job (release, commit, fail, reclaim): a
    #: writer whose transaction timed out reads it back to learn whether its write applied.
    release_id = UnicodeAttribute(null=True)
    worker = UnicodeAttribute(null=True)
    error = UnicodeAttribute(null=True)
    error_code = UnicodeAttribute(null=True)
    sheets = NumberAttribute(null=True)
    sides = NumberAttribute(null=True)
    #: Webhook delivery (package ``webhooks``): ``pending`` → ``retrying`` → ``delivered`` | ``gave_up``,
    #: or ``no_endpoint`` (the tenant has no webhook URL); HTTP attempts so far, last error, when delivered.
    webhook_status = UnicodeAttribute(null=True)
    webhook_attempts = NumberAttribute(null=True)
    webhook_error = UnicodeAttribute(null=True)
    webhook_delivered_at = NumberAttribute(null=True)
    by_tenant = JobsByTenantIndex()

    @property
    def job_status(self) -> JobStatus:
        """``status`` as a :class:`JobStatus`."""
        return JobStatus(self.status)


class TokenClaimItem(Model):
    """The durable claim of one tenant's idempotency token: the job that holds it, until when.

    Keyed by (``tenant_id``, ``token_sha256``: SHA-256 hex of the UTF-8 token, so the key is 64
    characters whatever the caller's token). A claim whose ``expires_at`` has passed no longer
    holds its token, even before DynamoDB's TTL deletion (which can lag by days) removes it.
    """

    class Meta(_Meta):
        table_name = _settings.tokens_table

    tenant_id = UnicodeAttribute(hash_key=True)
    token_sha256 = UnicodeAttribute(range_key=True)
    job_id = UnicodeAttribute()
    claimed_at = NumberAttribute()
    #: Epoch seconds (integer: the DynamoDB TTL attribute, see :data:`TOKEN_CLAIM_TTL_ATTRIBUTE`).
    expires_at = NumberAttribute()


#: The attribute DynamoDB's TTL deletes ``TokenClaimItem`` items by (enabled by ``imposition provision``).
TOKEN_CLAIM_TTL_ATTRIBUTE = "expires_at"

ALL_MODELS: tuple[type[Model], ...] = (TenantItem, LeaseItem, JobItem, TokenClaimItem)


def reset_connections() -> None:
    """Drop every model's cached DynamoDB client.

    Call in a freshly forked process (Celery's ``worker_process_init``): a botocore client and its
    connection pool must not be shared across ``fork()``.
    """
    for model in ALL_MODELS:
        model._connection = None
