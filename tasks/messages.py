"""Publishing job messages: every copy carries the tenant's ``MessageGroupId``.

The three publishers of a job message are the first submission, the sweeper's re-publish and
:meth:`tasks.sqs_task.SqsTask.retry` (deferrals and retries); each sets ``MessageGroupId`` explicitly,
because Celery's own retry does not keep it. The Celery task id of every copy is the job id, so
Flower shows one task per job.
"""

from __future__ import annotations

from imposition.common.settings import get_settings
from imposition.common.sqs import delay_seconds, publish_retry_policy
from imposition.common.tenancy import message_group_id


def publish_job(tenant_id: str, job_id: str, *, delay_s: int = 0, after_attempt: int = 0) -> None:
    """Publish the message that runs ``job_id``; SQS holds it for ``delay_s`` seconds (0–900).

    ``after_attempt`` is the attempt this message is meant to follow (0 for the first): a copy
    published before the transaction that re-queues the job (a retry, a reclaim) says so, and a
    worker that receives it while that attempt still holds the job defers it instead of dropping it
    (see :mod:`tasks.base`). Sent only when non-zero, so a first message carries just
    ``tenant_id`` and ``job_id``.

    Raises:
        ValueError: ``delay_s`` is outside 0–900 (the SQS DelaySeconds limit).
        kombu.exceptions.OperationalError, botocore.exceptions.ClientError: the publish failed.
    """
    from .imposition_task import impose  # noqa: PLC0415 (the task module imports this one)

    delay_s = delay_seconds(delay_s)
    kwargs: dict = {"tenant_id": tenant_id, "job_id": job_id}
    if after_attempt:
        kwargs["after_attempt"] = int(after_attempt)
    impose.apply_async(
        kwargs=kwargs,
        task_id=job_id,
        queue=get_settings().imposition_queue,
        MessageGroupId=message_group_id(tenant_id),
        DelaySeconds=delay_s,
        retry=True,
        retry_policy=publish_retry_policy(),
    )
