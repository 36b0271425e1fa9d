"""A worker's clean shutdown leaves no message hidden (issue 15, item 6): real workers, moto SQS.

The cause of the job that went missing for a whole run: a worker stopped (SIGTERM, a warm
shutdown) while its long-poll ``ReceiveMessage`` was still open. SQS answers that poll when a
message arrives, and marks the message received, hidden for the visibility timeout (720 s by
default); kombu's event loop had stopped, so nobody read the answer and nothing released it. The
job then sat ``queued`` with its only message hidden. :class:`tasks.sqs_transport.Channel` now
reads every receive still open when its last consumer is cancelled, and releases what it brings
(visibility 0), before the worker exits; messages delivered but not started are released the same
way (kombu would publish a copy and leave the original hidden).

``python -m soak.shutdown_drains`` is the long reproduction (2,000-job no-op drains with worker
restarts); this test is the short one.
"""

from __future__ import annotations

import time
import uuid

import pytest

from imposition.common import aws
from imposition.common.settings import get_settings
from tests.conftest import reset_aws
from tests.support.processes import start_worker, wait_for
from tasks.messages import publish_job

#: A long poll long enough for a message to arrive while the worker shuts down.
WAIT_TIME_S = 8


def _counts() -> tuple[int, int]:
    attributes = aws.sqs().get_queue_attributes(
        QueueUrl=aws.queue_url(get_settings().imposition_queue),
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


@pytest.mark.parametrize("after_shutdown_began_s", [0.2, 1.5])
def test_a_message_that_arrives_while_a_worker_shuts_down_stays_visible(tmp_path, after_shutdown_began_s):
    """Sent just as the warm shutdown begins (delivered, not started: released at the close) or
    once the event loop has stopped (brought by the open long poll: read and released)."""
    reset_aws()
    worker = start_worker(tmp_path, concurrency=1, name=f"shutdown-{uuid.uuid4().hex[:6]}",
                          env={"IMPOSITION_SQS_WAIT_TIME_S": str(WAIT_TIME_S)})
    try:
        time.sleep(2)  # its first long poll is open on the queue now
        worker.terminate()
        wait_for(lambda: "Warm shutdown" in worker.log(), 10, what="the warm shutdown to begin")
        time.sleep(after_shutdown_began_s)  # at 1.5 s kombu's event loop has stopped; the long poll is open
        assert worker.proc.poll() is None, "the worker exited before the message was sent: nothing tested"
        job_id = uuid.uuid4().hex
        publish_job("shutdown-tenant", job_id)  # no job item: a worker that received it would reject it
        assert worker.proc.wait(timeout=WAIT_TIME_S + 30) == 0, worker.log()[-3000:]
    finally:
        worker.stop()
    # Every receive of the stopped worker was answered and released: the message is visible.
    assert _counts() == (1, 0), (_counts(), worker.log()[-3000:])
    log = worker.log()
    assert "releasing 1 received message(s)" in log or "released an unstarted message" in log, log[-3000:]
