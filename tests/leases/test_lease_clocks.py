"""The clocks of docs/design.md §4 against what really runs: the provisioned queues and Celery's transport."""

from __future__ import annotations

import json

from imposition.common import aws
from imposition.common.clocks import get_clocks
from imposition.common.settings import SQS_MAX_DELAY_S, SQS_MAX_VISIBILITY_TIMEOUT_S, get_settings


def _queue_attributes(name: str) -> dict[str, str]:
    return aws.sqs().get_queue_attributes(QueueUrl=aws.queue_url(name), AttributeNames=["All"])["Attributes"]


def test_the_provisioned_queues_and_celery_agree_with_the_clocks():
    from tasks import app

    settings, clocks = get_settings(), get_clocks()
    transport_visibility_s = app.conf.broker_transport_options["visibility_timeout"]
    for queue in settings.work_queues:
        attributes = _queue_attributes(queue)
        visibility_s = int(attributes["VisibilityTimeout"])
        # The provisioned value is the one SQS applies (kombu sets its own only on queues it creates).
        assert visibility_s == clocks.visibility_timeout_s == transport_visibility_s
        assert visibility_s >= clocks.lease_ttl_s + clocks.sweep_interval_s + clocks.visibility_margin_s
        assert visibility_s <= SQS_MAX_VISIBILITY_TIMEOUT_S
        redrive = json.loads(attributes["RedrivePolicy"])
        assert int(redrive["maxReceiveCount"]) == settings.max_receive_count == 5
        dlq_arn = _queue_attributes(settings.dead_letter_queue(queue))["QueueArn"]
        assert redrive["deadLetterTargetArn"] == dlq_arn
    assert clocks.heartbeat_interval_s <= clocks.lease_ttl_s / 3
    assert clocks.lease_lost_after_s == clocks.lease_ttl_s / 2
    # The reconciler's bound: one long poll (a visible message reaches a free worker) plus one
    # heartbeat (a live holder has started or parked it); well inside the visibility timeout, so a
    # message hidden by a dead worker is re-published before SQS would return it.
    assert clocks.lost_message_after_s == settings.sqs_wait_time_s + clocks.heartbeat_interval_s
    assert clocks.lost_message_after_s >= settings.sqs_wait_time_s
    assert clocks.lost_message_after_s < clocks.visibility_timeout_s
    # The sweeper's wait for an infra_lost report: half a TTL, past the holder's SDK timeouts.
    assert clocks.infra_report_grace_s == clocks.lease_lost_after_s >= clocks.heartbeat_interval_s
    assert 0 <= clocks.defer_delay_s <= SQS_MAX_DELAY_S
    assert app.conf.broker_transport_options["predefined_queues"].keys() == set(settings.work_queues)

