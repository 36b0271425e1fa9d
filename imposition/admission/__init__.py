"""Admission control: the tenant side of fairness (docs/design.md §2, layer 3).

Every submission (``impose.delay``, :func:`tasks.submission.submit`, ``imposition submit``) passes
:func:`reserve` before anything is written or published: idempotency token, rate limit, in-flight cap,
in one atomic Redis script (see :mod:`imposition.admission.control`): the fast check. The durable check is the
token's claim in DynamoDB: its rules and the reading of a refusal are here (:mod:`imposition.admission.claims`),
the write is one item of the door's transaction (:func:`leases.waiting.admit`), so a Redis that forgot
its tokens never lets a duplicate through. A submission that fails after
admission calls :func:`abandon`; a tenant that received a job's webhook calls :func:`confirm`.

Public API::

    reserve(tenant_id, token, job_id, *, now_s=None) -> int    # in-flight count incl. this job
    abandon(tenant_id, token, job_id) -> bool
    confirm(job_id, *, tenant_id=None) -> bool                 # idempotent
    in_flight(tenant_id) -> int
    limits_for(tenant_id) -> TenantLimits;  set_limits(tenant_id, ...)
    check_registered(tenant_id)        # UnknownTenant unless registered (or auto_register_tenants)
    Admission (one Redis), get_admission(), reset()
    errors: AdmissionError > AdmissionRefused > UnknownTenant | DuplicateSubmission | DuplicateJobId | RateLimited
                                              | InFlightLimitReached;
            AdmissionError > AdmissionUnavailable
"""

from __future__ import annotations

from imposition.admission.control import Admission, get_admission, reset
from imposition.admission.errors import (
    AdmissionError,
    AdmissionRefused,
    AdmissionUnavailable,
    DuplicateJobId,
    DuplicateSubmission,
    InFlightLimitReached,
    RateLimited,
    UnknownTenant,
)
from imposition.admission.limits import TenantLimits, check_registered, limits_for, set_limits


def reserve(tenant_id: str, token: str, job_id: str, *, now_s: float | None = None) -> int:
    """Check and record ``job_id`` for ``tenant_id`` under ``token``; see :meth:`Admission.reserve`."""
    return get_admission().reserve(tenant_id, token, job_id, now_s=now_s)


def abandon(tenant_id: str, token: str, job_id: str) -> bool:
    """Undo the admission of a submission that failed later; see :meth:`Admission.abandon`."""
    return get_admission().abandon(tenant_id, token, job_id)


def confirm(job_id: str, *, tenant_id: str | None = None) -> bool:
    """Lower the tenant's in-flight count for ``job_id``, once; see :meth:`Admission.confirm`."""
    return get_admission().confirm(job_id, tenant_id=tenant_id)


def in_flight(tenant_id: str) -> int:
    """``tenant_id``'s admitted, unconfirmed jobs; see :meth:`Admission.in_flight`."""
    return get_admission().in_flight(tenant_id)


__all__ = [
    "Admission",
    "AdmissionError",
    "AdmissionRefused",
    "AdmissionUnavailable",
    "DuplicateJobId",
    "DuplicateSubmission",
    "InFlightLimitReached",
    "RateLimited",
    "TenantLimits",
    "UnknownTenant",
    "abandon",
    "check_registered",
    "confirm",
    "get_admission",
    "in_flight",
    "limits_for",
    "reserve",
    "reset",
    "set_limits",
]
