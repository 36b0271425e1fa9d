"""Errors of the observability package, one root::

    ObservabilityError
    ├── MetricsSetupError    the metrics endpoint cannot start (port taken, prometheus-client
    │                        imported before its multiprocess directory was set)
    └── ReportWindowError    a capacity-report window or slot count that cannot be reported on
"""

from __future__ import annotations


class ObservabilityError(Exception):
    """Root of the observability package's errors."""


class MetricsSetupError(ObservabilityError):
    """A worker node's metrics endpoint cannot be set up; the message names the setting and value."""


class ReportWindowError(ObservabilityError, ValueError):
    """A capacity-report window or slot count that cannot be reported on (names the value and limit)."""
