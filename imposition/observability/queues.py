"""Reading the work queues' state from SQS, and their oldest message's age from CloudWatch.

Depths come from ``GetQueueAttributes`` (SQS API reference): ``ApproximateNumberOfMessages``
(visible), ``ApproximateNumberOfMessagesNotVisible`` (in flight: received, not yet deleted) and
``ApproximateNumberOfMessagesDelayed`` (deferred copies waiting out their ``DelaySeconds``).

The age of the oldest message is **not** a queue attribute: SQS publishes it only as the CloudWatch
metric ``AWS/SQS ApproximateAgeOfOldestMessage`` (per ``QueueName``, 1-minute periods). It is read
with one ``GetMetricData`` call for all queues; the latest datapoint of the last
``Settings.sqs_age_lookback_s`` seconds is taken. When CloudWatch has none (the embedded moto
endpoint generates no SQS metrics; real CloudWatch stops publishing for queues idle for hours) the
age is ``None``: unknown, never a made-up number. There is no honest way around it from SQS
itself: reading a message's ``SentTimestamp`` means receiving it, which counts towards its
``maxReceiveCount`` and would push healthy jobs towards the dead-letter queue. Beware also that
CloudWatch's figure leaves out messages received three or more times, so it hides the most-deferred
jobs: the per-tenant queue wait (from job items) is the starvation signal; this one is the broker's.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import asdict, dataclass

from botocore.exceptions import BotoCoreError, ClientError

from imposition.common import aws
from imposition.common.settings import Settings, get_settings

log = logging.getLogger(__name__)

#: SQS attribute behind each ``sqs_messages`` state.
STATE_ATTRIBUTES = {
    "visible": "ApproximateNumberOfMessages",
    "in_flight": "ApproximateNumberOfMessagesNotVisible",
    "delayed": "ApproximateNumberOfMessagesDelayed",
}
#: The ``state`` label values of ``sqs_messages``.
SQS_STATES = tuple(STATE_ATTRIBUTES)


@dataclass(frozen=True)
class QueueDepth:
    """One queue's message counts (SQS approximations) and, if CloudWatch knows it, oldest age (s)."""

    queue: str
    visible: int
    in_flight: int
    delayed: int
    oldest_age_s: float | None = None

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


def monitored_queues(settings: Settings | None = None) -> list[str]:
    """Every work queue and its dead-letter queue, in that order."""
    s = settings or get_settings()
    return [name for queue in s.work_queues for name in (queue, s.dead_letter_queue(queue))]


def read_depths(queues: list[str]) -> dict[str, QueueDepth]:
    """``GetQueueAttributes`` for each queue (without ages).

    Raises:
        botocore.exceptions.ClientError: a queue does not exist (run ``imposition provision``) or SQS
            refused the call.
    """
    out = {}
    for name in queues:
        attrs = aws.sqs().get_queue_attributes(
            QueueUrl=aws.queue_url(name), AttributeNames=list(STATE_ATTRIBUTES.values())
        )["Attributes"]
        out[name] = QueueDepth(name, **{state: int(attrs.get(attr, 0)) for state, attr in STATE_ATTRIBUTES.items()})
    return out


def _query_id(index: int) -> str:
    return f"q{index}"  # GetMetricData ids: ^[a-z][a-zA-Z0-9_]*$


def read_oldest_ages(queues: list[str], *, now: dt.datetime | None = None) -> dict[str, float | None]:
    """Latest CloudWatch ``ApproximateAgeOfOldestMessage`` (Maximum) per queue, None where unknown.

    Never raises for a CloudWatch failure (no permission, no endpoint): it logs and returns None
    ages, since depths stay useful without them.
    """
    s = get_settings()
    end = now or dt.datetime.now(dt.timezone.utc)
    start = end - dt.timedelta(seconds=s.sqs_age_lookback_s)
    queries = [
        {
            "Id": _query_id(i),
            "MetricStat": {
                "Metric": {"Namespace": "AWS/SQS", "MetricName": "ApproximateAgeOfOldestMessage",
                           "Dimensions": [{"Name": "QueueName", "Value": name}]},
                "Period": s.sqs_age_period_s,
                "Stat": "Maximum",
            },
            "ReturnData": True,
        }
        for i, name in enumerate(queues)
    ]
    ages: dict[str, float | None] = dict.fromkeys(queues)
    if not queries:
        return ages
    try:
        pages = aws.client("cloudwatch").get_paginator("get_metric_data").paginate(
            MetricDataQueries=queries, StartTime=start, EndTime=end, ScanBy="TimestampDescending"
        )
        for page in pages:
            for result in page.get("MetricDataResults", []):
                match = re.fullmatch(r"q(\d+)", result.get("Id", ""))
                if not match or not result.get("Values"):
                    continue
                name = queues[int(match.group(1))]
                if ages[name] is None:  # descending: the first value is the latest
                    ages[name] = float(result["Values"][0])
    except (BotoCoreError, ClientError) as exc:
        log.warning("CloudWatch age of oldest message unavailable: %s", exc)
    return ages


def read_queues(queues: list[str] | None = None) -> dict[str, QueueDepth]:
    """Depths (SQS) and oldest ages (CloudWatch, None when unknown) of ``queues`` (default: all).

    Raises:
        botocore.exceptions.ClientError: as :func:`read_depths`.
    """
    names = queues if queues is not None else monitored_queues()
    depths = read_depths(names)
    ages = read_oldest_ages(names)
    return {name: QueueDepth(**{**asdict(depths[name]), "oldest_age_s": ages[name]}) for name in names}
