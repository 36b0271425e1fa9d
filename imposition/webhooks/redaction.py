"""Keep webhook secrets out of the AWS SDK's debug logs.

At DEBUG level botocore logs every request's parameters and every response body, and PynamoDB logs
every call's arguments; for the tenants table those carry ``webhook_secret``. The service runs these
loggers at WARNING (:mod:`tasks.celery_app`), but an operator who turns on DEBUG to chase a problem
must not get secrets in the log. :func:`install` puts a filter on exactly those loggers that replaces
any record mentioning the secret attribute with a fixed text. Our own code never logs a secret.
"""

from __future__ import annotations

import logging

#: The tenants-table attribute that holds a webhook secret (``leases.models.TenantItem``).
SECRET_ATTRIBUTE = "webhook_secret"
#: Loggers that write request or response bodies at DEBUG (botocore 1.x, PynamoDB 6.x).
SDK_BODY_LOGGERS = ("botocore.endpoint", "botocore.parsers", "botocore.awsrequest", "pynamodb.connection.base")
REDACTED = "<SDK debug record withheld: it carries a webhook secret>"


class SecretRecordFilter(logging.Filter):
    """Replace the text of a record that mentions :data:`SECRET_ATTRIBUTE` with :data:`REDACTED`."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Always keep the record; withhold its text if it carries a secret."""
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's problem, not ours
            return True
        if SECRET_ATTRIBUTE in text:
            record.msg, record.args = REDACTED, None
        return True


_filter = SecretRecordFilter()


def install() -> None:
    """Attach the filter to every logger of :data:`SDK_BODY_LOGGERS` (idempotent)."""
    for name in SDK_BODY_LOGGERS:
        logger = logging.getLogger(name)
        if _filter not in logger.filters:
            logger.addFilter(_filter)
