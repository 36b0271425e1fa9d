"""The queue sampler: Celery beat sends ``imposition.sample_queues`` every ``sample_interval_s`` to
the ``maintenance`` queue; the maintenance worker reads every work queue and dead-letter queue
(:func:`imposition.observability.queues.read_queues`) and sets

* ``sqs_messages{queue,state}`` (state ``visible``, ``in_flight``, ``delayed``) from SQS attributes;
* ``sqs_oldest_message_age_seconds{queue}`` from CloudWatch, NaN when CloudWatch has no datapoint
  (a gauge series cannot be withdrawn from prometheus-client's multiprocess files once written;
  NaN says "unknown now" instead of repeating a stale value). A queue CloudWatch never reported
  on has no series at all;
* ``jobs_waiting{tenant}``, ``slots_borrowed{tenant}`` from each tenant item (parked jobs; leases
  above its cap), ``cluster_slots`` from the slot registry.
"""

from __future__ import annotations

import math


from leases import nodes
from leases.models import TenantItem
from imposition.common.celery_app import app
from imposition.common.settings import get_settings
from imposition.observability.metrics import get_metrics
from imposition.observability.queues import SQS_STATES, QueueDepth, read_queues

TASK_NAME = "imposition.sample_queues"
_aged: set[str] = set()  # queues this process has set an age for


def record_sample(depths: dict[str, QueueDepth]) -> None:
    """Set the SQS gauges of this process from one sample."""
    m = get_metrics()
    for name, depth in depths.items():
        for state in SQS_STATES:
            m.sqs_messages.labels(name, state).set(getattr(depth, state))
        if depth.oldest_age_s is not None:
            _aged.add(name)
            m.sqs_oldest_message_age.labels(name).set(depth.oldest_age_s)
        elif name in _aged:
            m.sqs_oldest_message_age.labels(name).set(math.nan)


@app.task(name=TASK_NAME, acks_late=True, ignore_result=True)
def sample_queues() -> dict:
    """Sample every work queue and DLQ; returns ``{queue: {visible, in_flight, delayed, oldest_age_s}}``."""
    depths = read_queues()
    record_sample(depths)
    m = get_metrics()
    default_cap = get_settings().default_cap
    for tenant in TenantItem.scan(attributes_to_get=["tenant_id", "waiting", "in_flight", "cap"]):
        m.jobs_waiting.labels(tenant.tenant_id).set(int(tenant.waiting or 0))
        m.slots_borrowed.labels(tenant.tenant_id).set(max(0, int(tenant.in_flight or 0)
                                                          - tenant.effective_cap(default_cap)))
    m.cluster_slots.set(sum(nodes.live_nodes().values()))
    return {name: depth.as_dict() for name, depth in depths.items()}
