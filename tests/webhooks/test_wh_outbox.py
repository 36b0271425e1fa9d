"""The outbox drain (``imposition.drain_webhook_outbox``) run in this process against the real local
stack: what it sends, what it leaves alone, when it gives up. Its end-to-end checks with real
workers are in ``tests/faults/test_fault_outbox.py``."""

from __future__ import annotations

import time
import uuid

from leases import outbox
from leases.models import JobItem
from tests.webhooks.conftest import finished_job, job_item
from imposition.webhooks import delivery
from imposition.webhooks.tasks import drain_outbox


def _in_outbox(tenant: str, *, ended_s_ago: float) -> str:
    """A finished job whose event went to the outbox ``ended_s_ago`` seconds ago (as its final write puts it)."""
    job_id = finished_job(tenant)
    job_item(job_id).update(actions=outbox.intent_actions(time.time() - ended_s_ago))
    return job_id


def test_the_drain_sends_a_round_once_for_an_overdue_event_and_leaves_others_alone(short_delivery_clocks):
    tenant = f"drain-{uuid.uuid4().hex[:6]}"
    overdue = _in_outbox(tenant, ended_s_ago=3600)
    fresh = _in_outbox(tenant, ended_s_ago=0)  # within the grace: the immediate path's
    settled = _in_outbox(tenant, ended_s_ago=3600)
    delivery.record(settled, delivery.DELIVERED, attempts=1)

    first = drain_outbox()
    again = drain_outbox()  # claimed by the first: not sent twice

    assert first["sent"] >= 1 and again["sent"] == 0
    claimed = job_item(overdue)
    assert claimed.webhook_drained_at is not None
    assert float(claimed.webhook_due_at) > time.time()  # moved past the round it was sent
    assert job_item(fresh).webhook_drained_at is None
    assert job_item(settled).outbox_partition is None and job_item(settled).webhook_drained_at is None


def test_an_event_whose_drained_rounds_never_finish_is_recorded_gave_up(short_delivery_clocks):
    from imposition.common.settings import get_settings

    tenant = f"drain-{uuid.uuid4().hex[:6]}"
    give_up_s = get_settings().webhook_give_up_after_s
    job_id = finished_job(tenant)
    ended = time.time() - give_up_s - 7200
    job_item(job_id).update(actions=[*outbox.intent_actions(ended), JobItem.finished_at.set(ended),
                                     JobItem.webhook_drained_at.set(ended + give_up_s + 60)])

    assert drain_outbox()["gave_up"] >= 1

    item = job_item(job_id)
    assert item.webhook_status == delivery.GAVE_UP and item.outbox_partition is None
    assert "webhook_give_up_after_s" in item.webhook_error
