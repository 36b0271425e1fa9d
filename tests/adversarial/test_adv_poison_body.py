"""A task message whose body is not ``[args, kwargs, embed]`` must not take the worker node down.

Celery's ``Request.__init__`` unpacks the body into three values outside the consumer's
``InvalidTaskError`` handling, so a body of ``null``, ``{"a": 1}`` or ``[[], {}]`` raised
TypeError/ValueError out of ``on_task_received``: "Unrecoverable error", the worker (all its slots
and the jobs running in them) stopped, and the restarted worker received the same message again,
up to ``maxReceiveCount`` times. The worker must treat it like the other poison messages of
:class:`tasks.worker.ServiceConsumer`: reject it towards the dead-letter queue and keep running.

Args and kwargs of the wrong type (args an int or a string, kwargs a string) passed Celery's
unpacking and raised TypeError in the tracer, where the message was acked and dropped with no poison
count; a kwarg named ``self`` clashed with the task's own parameter the same way. They must reach the
dead-letter queue too.

Its own module: while the bug lives, the worker it starts dies.
"""

from __future__ import annotations

import uuid

import pytest

from tests.adversarial.support import a5_pdf, celery_sqs_body, module_worker, submit_bytes
from tests.admission.helpers import queue_messages as queue_depth
from tests.support.cluster import Cluster

BAD_BODIES = [None, {"a": 1}, [[], {}]]
#: Bodies of the right length whose args/kwargs are garbage (finding 16).
GARBAGE_ARGUMENTS = [
    [1, {"tenant_id": "ghost", "job_id": "j1"}, {}],
    [[], "tenant_id=ghost", {}],
    ["ab", {"tenant_id": "ghost", "job_id": "j2"}, None],
    "abc",
    [[], {"self": 1}, {}],
    [[], {"tenant_id": "ghost", "job_id": "../../other/x"}, {}],
]


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    with module_worker(tmp_path_factory, "adv-poison") as process:
        yield process


def send_and_await_dead_letters(worker, bodies: list) -> None:
    """Send one raw task message per body; wait until all of them are in the dead-letter queue.

    Fails the test if the worker dies first, or if a message never arrives there (acked away)."""
    from imposition.common import aws
    from imposition.common.settings import get_settings
    from tests.support.processes import wait_for

    settings = get_settings()
    queue_url = aws.queue_url(settings.imposition_queue)
    dlq = settings.dead_letter_queue(settings.imposition_queue)
    expected = queue_depth(dlq) + len(bodies)
    for body in bodies:
        aws.sqs().send_message(QueueUrl=queue_url, MessageBody=celery_sqs_body(body), MessageGroupId="tenant-ghost")

    wait_for(lambda: worker.proc.poll() is not None or queue_depth(dlq) == expected, 90,
             what="the messages to reach the dead-letter queue (or the worker to die)")
    assert worker.proc.poll() is None, "the worker died:\n" + worker.log()[-3000:]
    assert queue_depth(dlq) == expected
    assert queue_depth(settings.imposition_queue) == 0


def test_malformed_task_bodies_go_to_the_dead_letter_queue_and_the_worker_keeps_running(worker):
    send_and_await_dead_letters(worker, BAD_BODIES)

    job = Cluster.final(submit_bytes(f"adv-{uuid.uuid4().hex[:10]}", a5_pdf()))
    assert job.status == "succeeded"


def test_garbage_args_and_kwargs_go_to_the_dead_letter_queue_not_acked_away(worker):
    send_and_await_dead_letters(worker, GARBAGE_ARGUMENTS)
