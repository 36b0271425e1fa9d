"""What an attempt costs when DynamoDB failed it, not the job (docs/design.md, "Nothing lost when an
endpoint or a process fails"): an acquire whose outcome DynamoDB could not tell, settled once it
answers; an attempt recorded ``infra_lost`` (not charged); and the count of a deferral. Outside
the scheduling core: none of these moves a slot or a place.
"""

from __future__ import annotations

import logging
import time

from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.expressions.condition import size

from leases.dynamo import _CONDITION_FAILED_EXCEPTION, error_code
from leases.errors import AcquireUnresolved, LeaseLost
from leases.models import JobItem, JobStatus
from leases.transactions import Lease, lease_of
from leases.models import lost_attempt_entry
from leases.renewal import renew
from leases.reads import read_lease
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)


def resolve_acquire(unresolved: AcquireUnresolved, *, now: float | None = None) -> Lease | None:
    """Settle an :class:`~leases.errors.AcquireUnresolved` once DynamoDB answers.

    * the lease exists under the acquire's token: the acquire applied and the lease is still this
      caller's; it is renewed at once (its TTL may have run out meanwhile) and returned;
    * else, if the sweeper already reclaimed that lease (a ``holder_vanished`` entry of
      ``JobItem.lost_attempts`` with the token), the attempt is recorded ``infra_lost``
      (:func:`record_infra_lost`: not charged); returns None;
    * else the acquire never applied: returns None.

    Raises:
        pynamodb.exceptions.PynamoDBException: DynamoDB still cannot be reached (the caller retries).
    """
    held = read_lease(unresolved.job_id)
    if held is not None and held.token == unresolved.token:
        try:
            return renew(lease_of(held), now=now)
        except LeaseLost:
            pass  # reclaimed between the read and the renewal: look for the sweeper's note below
    try:
        job = JobItem.get(unresolved.job_id, consistent_read=True, attributes_to_get=["lost_attempts"])
    except DoesNotExist:
        return None
    for entry in job.lost_attempts or []:
        if entry.get("token") == unresolved.token and entry.get("cause") == "holder_vanished":
            record_infra_lost(unresolved.job_id, int(entry["attempt"]),
                              detail=f"acquire unresolved: DynamoDB unreachable ({unresolved})", now=now)
    return None


def record_infra_lost(job_id: str, attempt: int, *, detail: str, now: float | None = None) -> bool:
    """The holder of attempt ``attempt`` lost its lease because it could not reach DynamoDB: the
    attempt stops counting against the budget (``JobItem.infra_lost_attempts``) and the job's
    ``lost_attempts`` says so. One update, on condition the job is not final (a job the sweeper
    already failed stays failed) and has fewer than ``Settings.infra_retry_limit`` uncharged
    attempts (the bound ``FairTask`` applies to an ``infra_error``: a release that fails the same
    way every time, a ValidationException say, must end in the budget, not loop). Returns True if
    written (or ``attempt`` was recorded already), False if the job is final, missing or at the limit.

    Raises:
        pynamodb.exceptions.UpdateError: DynamoDB failed (the caller retries).
    """
    t = time.time() if now is None else now
    entry = lost_attempt_entry(attempt, "infra_lost", detail, t)
    try:
        JobItem(job_id).update(
            actions=[JobItem.infra_lost_attempts.add({int(attempt)}),
                     JobItem.lost_attempts.set((JobItem.lost_attempts | []).append([entry]))],
            condition=JobItem.job_id.exists() & JobItem.status.is_in(
                JobStatus.QUEUED.value, JobStatus.RUNNING.value, JobStatus.WAITING.value)
            & (JobItem.infra_lost_attempts.does_not_exist()
               | (size(JobItem.infra_lost_attempts) < get_settings().infra_retry_limit)
               | JobItem.infra_lost_attempts.contains(int(attempt))),
        )
    except UpdateError as exc:
        if error_code(exc) == _CONDITION_FAILED_EXCEPTION:
            return False
        raise
    return True


def record_defer(job_id: str, *, delay_s: float = 0, now: float | None = None) -> bool:
    """Count one deferral on a queued job, stamp its first receive and when its copy is due (best
    effort; ``delay_s`` is the copy's SQS delay).

    Does nothing if the job is not queued any more. Never raises: the count is a statistic, and
    a failure here must not cost the deferral itself. Returns True if the count was written.
    """
    t = time.time() if now is None else now
    try:
        JobItem(job_id).update(
            actions=[
                JobItem.defer_count.set((JobItem.defer_count | 0) + 1),
                JobItem.first_received_at.set(JobItem.first_received_at | t),
                JobItem.due_at.set(t + delay_s),
            ],
            condition=JobItem.status == JobStatus.QUEUED.value,
        )
    except UpdateError as exc:
        if error_code(exc) != _CONDITION_FAILED_EXCEPTION:
            log.warning("could not count the deferral of job %s: %s", job_id, exc.cause or exc)
        return False
    return True
