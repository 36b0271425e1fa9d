"""Errors of admission control (docs/design.md §2, layer 3). One root, :class:`AdmissionError`::

    AdmissionError                      every error of this package
    ├── AdmissionRefused                the submission was checked and refused; nothing was published
    │   ├── UnknownTenant               no such tenant registered (code ``unknown_tenant``)
    │   ├── DuplicateSubmission         the token is already in flight or completed (.job_id)
    │   ├── DuplicateJobId              a caller-chosen job id is already taken, by any tenant (.job_id)
    │   ├── RateLimited                 the tenant's rate limit is spent (.retry_after_s)
    │   └── InFlightLimitReached        too many submitted-but-unconfirmed jobs (.in_flight, .cap)
    └── AdmissionUnavailable            Redis (or the tenant's limits) could not be read: fail closed,
                                        nothing was published unchecked

Every refusal names the tenant, the value and the limit, and has a stable ``code`` (the class name in
snake case, ``unknown_tenant``, ``rate_limited``, …); none carries a secret.
"""

from __future__ import annotations


class AdmissionError(Exception):
    """Root of every admission error."""


class AdmissionRefused(AdmissionError):
    """The submission was checked and refused; nothing was published and no state was left behind.

    Attributes:
        tenant_id: the tenant whose submission was refused.
    """

    def __init__(self, tenant_id: str, message: str) -> None:
        super().__init__(message)
        self.tenant_id = tenant_id


class UnknownTenant(AdmissionRefused):
    """No tenant ``tenant_id`` is registered (``imposition tenant create``), and
    ``Settings.auto_register_tenants`` is off: nothing was admitted, written or published.

    Attributes:
        code: ``"unknown_tenant"``.
    """

    code = "unknown_tenant"

    def __init__(self, tenant_id: str) -> None:
        super().__init__(tenant_id, f"unknown_tenant: tenant {tenant_id!r} is not registered; register it with "
                                    f"`imposition tenant create {tenant_id}` (or set IMPOSITION_AUTO_REGISTER_TENANTS=true)")


class DuplicateSubmission(AdmissionRefused):
    """The idempotency token was already used by this tenant within the idempotency TTL.

    Attributes:
        job_id: the job the token belongs to (in flight or completed).
    """

    #: Stable code of the refusal (``imposition submit`` prints it first).
    code = "duplicate_submission"

    def __init__(self, tenant_id: str, job_id: str) -> None:
        super().__init__(tenant_id, f"tenant {tenant_id!r}: token already submitted as job {job_id}")
        self.job_id = job_id


class DuplicateJobId(AdmissionRefused):
    """The caller chose a job id (``submit_job(job_id=...)``) that an existing job already has.

    Job ids are unique across tenants (the jobs table's key, the Celery task id, an S3 key segment),
    so the id is refused whoever holds it; nothing of that job or its tenant was changed, and the
    message does not say which tenant holds it.

    Attributes:
        job_id: the refused job id (canonical, at most 64 characters).
    """

    #: Stable code of the refusal (``imposition submit`` prints it first).
    code = "duplicate_job_id"

    def __init__(self, tenant_id: str, job_id: str) -> None:
        super().__init__(tenant_id, f"tenant {tenant_id!r}: job id {job_id!r} is already taken; choose another "
                                    "or let the service choose one")
        self.job_id = job_id


class RateLimited(AdmissionRefused):
    """The tenant submitted ``limit`` jobs within the last 60 s.

    Attributes:
        retry_after_s: seconds until one more submission would be admitted (> 0).
        limit: the tenant's limit, jobs per minute.
    """

    #: Stable code of the refusal (``imposition submit`` prints it first).
    code = "rate_limited"

    def __init__(self, tenant_id: str, retry_after_s: float, limit: int) -> None:
        super().__init__(
            tenant_id,
            f"tenant {tenant_id!r}: rate limit of {limit} jobs per minute reached; retry after {retry_after_s:.3f} s",
        )
        self.retry_after_s = retry_after_s
        self.limit = limit


class InFlightLimitReached(AdmissionRefused):
    """The tenant has ``cap`` submitted jobs whose completion it has not confirmed yet.

    Attributes:
        in_flight: the tenant's unconfirmed jobs now.
        cap: the tenant's admission in-flight cap.
    """

    #: Stable code of the refusal (``imposition submit`` prints it first).
    code = "in_flight_limit_reached"

    def __init__(self, tenant_id: str, in_flight: int, cap: int) -> None:
        super().__init__(
            tenant_id,
            f"tenant {tenant_id!r}: in_flight={in_flight} unconfirmed jobs reaches the cap of {cap}; "
            "confirm finished jobs first",
        )
        self.in_flight = in_flight
        self.cap = cap


class AdmissionUnavailable(AdmissionError):
    """Admission could not run (Redis unreachable or timing out, tenant limits unreadable).

    The submission fails closed: nothing is published. The cause is chained (``__cause__``).
    """
