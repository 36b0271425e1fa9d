"""Operators' view of the fairness controls (docs/design.md §8): metrics, ``imposition status``, the capacity
report and Flower over the Redis events side channel.

=====================  ==============================================================================
module                 what it owns
=====================  ==============================================================================
``metrics``            the Prometheus metric definitions and the receivers that move them on the
                       domain signals of :mod:`leases.signals`
``exporter``           the per-node HTTP endpoint (prometheus-client multiprocess mode, so every
                       prefork child counts) and its worker start/stop hooks
``recent``             per-tenant counts of recent events (cap defers, lease recoveries) in Redis,
                       so ``imposition status`` can show the last hour with no worker running
``queues``             reading SQS queue attributes and CloudWatch's age of the oldest message
``sampler``            the beat task ``imposition.sample_queues`` that turns those into gauges
``history``            reading job items back (per tenant, by submission time) and wait arithmetic
``status``             ``imposition status``: one screen (or ``--json``) per tenant and queue
``capacity``           ``imposition capacity-report``: the second-licence verdict and its PNG
``events``             Celery monitoring events over the Redis side channel, for Flower
``install()``s         connected by :func:`tasks.wiring.install` in every process of the app
=====================  ==============================================================================

Errors, one root: :mod:`imposition.observability.errors`.
"""

from imposition.observability.errors import MetricsSetupError, ObservabilityError, ReportWindowError

__all__ = ["MetricsSetupError", "ObservabilityError", "ReportWindowError"]
