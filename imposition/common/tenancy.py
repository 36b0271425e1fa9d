"""Tenant identity and the S3 keys derived from it.

The canonical tenant id becomes the SQS ``MessageGroupId`` (``tenant-<id>``) and the S3 prefix
``tenants/<id>/``. SQS allows a ``MessageGroupId`` of 1–128 characters from alphanumerics and
punctuation (SQS API reference, SendMessage); we allow the stricter set ``[a-z0-9._-]``, starting
with a letter or digit, so the id is also safe as an S3 key segment and in a log line, and at most
``128 - len("tenant-") = 121`` characters. Lower case is the one canonical form: ``ACME`` is
refused with its canonical spelling ``acme`` named (:class:`NonCanonicalTenantId`), so one shop can
never become two tenants with two caps.

A job id is ``[A-Za-z0-9_-]``, 1–64 characters (:func:`validate_job_id`): an S3 key segment, the
Celery task id and a DynamoDB key, so no ``/``, ``.`` or space. Ours are UUID4 hex (32 characters).

Keys are derived by the service, never taken from the tenant: a submission naming a key outside its
own prefix is refused with :class:`ForeignKeyRefused`. A tenant id is checked once where it comes
in, into a :class:`TenantId`, which :func:`validate_tenant_id` below trusts as it is.

Errors::

    TenancyError (ValueError)
    ├── InvalidTenantId     not a canonical tenant id
    │   └── NonCanonicalTenantId   a valid id in another spelling (upper case): .canonical names it
    ├── InvalidJobId        not a canonical job id
    ├── ForeignKeyRefused   an S3 key outside the tenant's own prefix
    └── InvalidKey          an S3 key longer than S3 allows, or with a control character
"""

from __future__ import annotations

import re

from imposition.common.settings import S3_KEY_MAX_BYTES

#: Prefix of every message group id (SQS fair queues: one group per tenant).
MESSAGE_GROUP_PREFIX = "tenant-"
#: Message group of the service's own maintenance messages (sweeper, samplers): never a tenant's,
#: since tenant groups always start with ``tenant-``.
MAINTENANCE_GROUP = "maintenance"
#: SQS limit on a MessageGroupId's length (SQS API reference, SendMessage).
SQS_MAX_MESSAGE_GROUP_ID_LEN = 128
TENANT_ID_MAX_LEN = SQS_MAX_MESSAGE_GROUP_ID_LEN - len(MESSAGE_GROUP_PREFIX)
_TENANT_ID = re.compile(rf"[a-z0-9][a-z0-9._-]{{0,{TENANT_ID_MAX_LEN - 1}}}")
#: Longest job id: room for a UUID in any common spelling, far below every key limit it reaches.
JOB_ID_MAX_LEN = 64
_JOB_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{JOB_ID_MAX_LEN}}}")
#: S3's limit on an object key, UTF-8 bytes.
S3_MAX_KEY_BYTES = S3_KEY_MAX_BYTES
#: Longest rendering of a refused value in an error message (a refused id may be megabytes long).
ECHO_MAX_CHARS = 80


class TenancyError(ValueError):
    """Root of tenant-identity errors."""


class InvalidTenantId(TenancyError):
    """The tenant id is empty, too long, or uses a character outside ``[A-Za-z0-9._-]``."""


class NonCanonicalTenantId(InvalidTenantId):
    """The tenant id is valid but for its case: tenant ids are lower case.

    Attributes:
        canonical: the canonical spelling (``tenant_id.lower()``).
    """

    def __init__(self, tenant_id: str) -> None:
        self.canonical = tenant_id.lower()
        super().__init__(f"tenant_id={shown_value(tenant_id)}: tenant ids are lower case; "
                         f"the canonical form is {shown_value(self.canonical)}")


class InvalidJobId(TenancyError):
    """The job id is empty, too long, or uses a character outside ``[A-Za-z0-9_-]``."""


class ForeignKeyRefused(TenancyError):
    """A submission named an S3 key outside its own tenant's prefix."""


class InvalidKey(TenancyError):
    """An S3 key that S3 would refuse or that no log line should carry: longer than
    :data:`S3_MAX_KEY_BYTES` UTF-8 bytes, not encodable as UTF-8, or holding a control character."""


def shown_value(value: object, limit: int = ECHO_MAX_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error message never echoes a huge value."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TenantId(str):
    """A canonical tenant id, checked when made: ``TenantId(value)`` raises as
    :func:`validate_tenant_id` does. One in hand needs no check again (module docstring)."""

    __slots__ = ()

    def __new__(cls, value: object) -> "TenantId":
        if isinstance(value, str) and not _TENANT_ID.fullmatch(value):
            if value.isascii() and _TENANT_ID.fullmatch(value.lower()):
                raise NonCanonicalTenantId(value)
        if not isinstance(value, str) or not _TENANT_ID.fullmatch(value):
            raise InvalidTenantId(
                f"tenant_id={shown_value(value)}: must be 1–{TENANT_ID_MAX_LEN} characters from [a-z0-9._-], "
                "starting with a letter or digit"
            )
        return super().__new__(cls, value)


def validate_tenant_id(tenant_id: object) -> TenantId:
    """``tenant_id`` as a :class:`TenantId`: returned as it is if it is one already (checked when it
    was made), else checked now.

    Raises:
        NonCanonicalTenantId: it would be canonical in lower case (the message names that form).
        InvalidTenantId: it is not a string of 1–121 characters from ``[a-z0-9._-]`` starting
            with a letter or digit (limit derived from SQS's 128-character MessageGroupId).
    """
    return tenant_id if isinstance(tenant_id, TenantId) else TenantId(tenant_id)


def validate_job_id(job_id: object) -> str:
    """Return ``job_id`` if it is canonical.

    Raises:
        InvalidJobId: it is not a string of 1–64 characters from ``[A-Za-z0-9_-]``.
    """
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise InvalidJobId(f"job_id={shown_value(job_id)}: must be 1–{JOB_ID_MAX_LEN} characters from [A-Za-z0-9_-]")
    return job_id


def message_group_id(tenant_id: str) -> str:
    """The SQS ``MessageGroupId`` of every message of ``tenant_id``: ``tenant-<id>``."""
    return MESSAGE_GROUP_PREFIX + validate_tenant_id(tenant_id)


def tenant_prefix(tenant_id: str) -> str:
    """S3 prefix owned by ``tenant_id``: ``tenants/<id>/``."""
    return f"tenants/{validate_tenant_id(tenant_id)}/"


def job_prefix(tenant_id: str, job_id: str) -> str:
    """S3 prefix of one job: ``tenants/<tenant>/jobs/<job>/``.

    Raises:
        InvalidTenantId, InvalidJobId: either id is not canonical.
    """
    return f"{tenant_prefix(tenant_id)}jobs/{validate_job_id(job_id)}/"


def input_key(tenant_id: str, job_id: str) -> str:
    """Key of a job's uploaded input PDF."""
    return job_prefix(tenant_id, job_id) + "input.pdf"


def plate_key(tenant_id: str, job_id: str) -> str:
    """Key of a job's plate file (the imposed PDF)."""
    return job_prefix(tenant_id, job_id) + "plate.pdf"


def jdf_key(tenant_id: str, job_id: str) -> str:
    """Key of the JDF Layout of a job's plate (imposition.engine.jdf), beside the plate."""
    return job_prefix(tenant_id, job_id) + "plate.jdf"


def preview_key(tenant_id: str, job_id: str, side: int) -> str:
    """Key of the PNG preview of a job's plate side ``side`` (1-based), beside the plate."""
    return job_prefix(tenant_id, job_id) + f"preview-{int(side)}.png"


def check_own_key(tenant_id: str, key: str) -> str:
    """Return ``key`` if it is a valid S3 key under ``tenant_id``'s prefix. The length is checked
    first, so a key of megabytes costs nothing more than its length.

    Raises:
        InvalidKey: not a string, more than :data:`S3_MAX_KEY_BYTES` UTF-8 bytes, not UTF-8
            encodable, or holding a control character (U+0000–U+001F, U+007F).
        ForeignKeyRefused: it is not under the prefix, or it tries to climb out with ``..``.
    """
    if not isinstance(key, str):
        raise InvalidKey(f"input_key: must be a string, got {type(key).__name__}")
    if len(key) > S3_MAX_KEY_BYTES:  # a character is at least one byte: too long whatever its encoding
        raise InvalidKey(f"input_key: {len(key)} characters is more than S3's limit of {S3_MAX_KEY_BYTES} bytes")
    try:
        size_bytes = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidKey(f"input_key: not encodable as UTF-8 at character {exc.start}") from None
    if size_bytes > S3_MAX_KEY_BYTES:
        raise InvalidKey(f"input_key: {size_bytes} bytes (UTF-8) is more than S3's limit of {S3_MAX_KEY_BYTES} bytes")
    control = next((i for i, ch in enumerate(key) if ord(ch) < 0x20 or ord(ch) == 0x7F), None)
    if control is not None:
        raise InvalidKey(f"input_key: a control character at position {control} (none allowed)")
    prefix = tenant_prefix(tenant_id)
    if not isinstance(key, str) or not key.startswith(prefix) or ".." in key.split("/"):
        raise ForeignKeyRefused(f"input_key={shown_value(key)}: outside the prefix {prefix!r} of tenant {tenant_id!r}")
    return key
