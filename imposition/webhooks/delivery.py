"""Delivering one job's event to its tenant: one *round* of signed POSTs, retried with tenacity.

A round (one run of the ``imposition.deliver_webhook`` task, see :mod:`imposition.webhooks.tasks`)::

    job item (final) ─► event body ─► POST, signed afresh per attempt ─┬─ 2xx ──► record delivered
                                        ▲                              └─ error/non-2xx
                                        └── tenacity: exponential backoff with jitter, for at most
                                            Settings.webhook_attempt_budget_s ─► round failed

Any non-2xx answer or connection error counts as a failed attempt (the tenant may fix its
endpoint or secret meanwhile). A destination refused by the SSRF guard (:mod:`imposition.webhooks.destinations`:
the host now resolves to a non-public address) ends the round at once, as a failed round. A failed
round is handed back to the task, which lets SQS hold the wait before the next round. Every round
is recorded on the job item: ``webhook_status``, ``webhook_attempts`` (HTTP attempts, all rounds),
``webhook_error`` (the last one), ``webhook_delivered_at``. Logs name the job, the tenant and the
URL without its query; never the secret, never the signature.

A round is bounded by the task's Celery time limits (:class:`RoundTimeLimits`; why: docs/design.md,
"A round is bounded by Celery's time limits"). A tenant with no webhook endpoint has its jobs
confirmed by the round (:func:`admission.confirm`, recorded ``no_endpoint``). The POSTs run in one
of the tenant's delivery slots (:func:`imposition.webhooks.fairness.delivery_slot`); a round that finds none
reports ``busy`` and is put back. Recording ``delivered``, ``gave_up`` or ``no_endpoint`` takes the
event out of the outbox (:mod:`leases.outbox`); ``retrying`` moves the drain's time past the next round.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass

import requests
from celery.exceptions import SoftTimeLimitExceeded
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.expressions.update import Action
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential_jitter,
)

from leases import outbox
from leases.models import JobItem
from imposition.common.settings import Settings, get_settings
from imposition.webhooks import fairness
from imposition.webhooks.destinations import guarded_session
from imposition.webhooks.endpoints import WebhookEndpoint, endpoint_for, loggable_url
from imposition.webhooks.errors import UnsafeWebhookDestination
from imposition.webhooks.events import encode, event_id, job_event
from imposition.webhooks.signing import signed_headers

log = logging.getLogger(__name__)

#: Values of ``JobItem.webhook_status`` (``pending``: written with the job's final status, the outbox).
PENDING = outbox.PENDING
RETRYING, DELIVERED, GAVE_UP, NO_ENDPOINT = "retrying", "delivered", "gave_up", "no_endpoint"
#: :attr:`RoundReport.status` of a round that POSTed nothing: the tenant's delivery slots were all taken.
BUSY = "busy"
#: Statuses after which no round delivers again.
SETTLED = frozenset({DELIVERED, GAVE_UP, NO_ENDPOINT})


class AttemptFailed(Exception):
    """One POST failed: a connection error or a non-2xx answer (tenacity retries on this)."""


@dataclass(frozen=True)
class RoundReport:
    """What one delivery round did.

    Attributes:
        status: ``delivered``, ``no_endpoint``, ``failed`` (retry in a later round), ``busy``
            (:data:`BUSY`: nothing POSTed, run it again later), or ``skipped`` (already settled, or
            the job is unknown or not final).
        attempts: HTTP attempts made in this round.
        error: the last attempt's error, if it failed.
        retry_after_s: for ``busy``, seconds until the tenant's first slot frees at the latest.
    """

    status: str
    attempts: int = 0
    error: str | None = None
    retry_after_s: float | None = None


@dataclass(frozen=True)
class RoundTimeLimits:
    """Celery time limits of one delivery round (the ``imposition.deliver_webhook`` task), seconds.

    Attributes:
        soft_s: ``webhook_attempt_budget_s + webhook_connect_timeout_s + webhook_read_timeout_s +
            webhook_round_overhead_s``: the last POST starts within the budget (tenacity's
            ``stop_before_delay``) and may then take both timeouts, the rest of the round (reading
            the job and the endpoint) takes the overhead. Past it, the round fails.
        hard_s: ``soft_s + webhook_hard_limit_grace_s``: time to record the failed round and publish
            the next one before Celery kills the child. Keep it below the queues' visibility
            timeout, or SQS hands a running round's message to a second worker.
    """

    soft_s: float
    hard_s: float


def round_time_limits(settings: Settings | None = None) -> RoundTimeLimits:
    """The time limits of a delivery round under ``settings`` (default: the process settings)."""
    s = settings or get_settings()
    soft_s = (s.webhook_attempt_budget_s + s.webhook_connect_timeout_s + s.webhook_read_timeout_s
              + s.webhook_round_overhead_s)
    return RoundTimeLimits(soft_s=soft_s, hard_s=soft_s + s.webhook_hard_limit_grace_s)


def outbox_due_at(now: float, delay_s: float = 0) -> float:
    """When the outbox drain may step in for a round that starts in ``delay_s`` seconds: after that
    round's hard time limit (:func:`round_time_limits`) and ``webhook_outbox_grace_s`` more (epoch s)."""
    return now + delay_s + round_time_limits().hard_s + get_settings().webhook_outbox_grace_s


@functools.lru_cache(maxsize=None)
def _session(pid: int) -> requests.Session:
    return guarded_session()


def post_once(endpoint: WebhookEndpoint, body: bytes, evt_id: str) -> int:
    """POST ``body`` to ``endpoint``, signed now; return the 2xx status code.

    Raises:
        AttemptFailed: a connection error, a timeout, a redirect or any non-2xx status.
        UnsafeWebhookDestination: the host is or resolves to a non-public address (not retried).
    """
    settings = get_settings()
    try:
        response = _session(os.getpid()).post(
            endpoint.url, data=body, headers=signed_headers(body, endpoint.secret, evt_id),
            timeout=(settings.webhook_connect_timeout_s, settings.webhook_read_timeout_s), allow_redirects=False,
        )
    except requests.RequestException as exc:
        raise AttemptFailed(f"{type(exc).__name__} posting to {loggable_url(endpoint.url)}") from exc
    response.close()
    if not 200 <= response.status_code < 300:
        raise AttemptFailed(f"HTTP {response.status_code} from {loggable_url(endpoint.url)}")
    return response.status_code


def post_with_retries(endpoint: WebhookEndpoint, body: bytes, evt_id: str) -> RoundReport:
    """POST until one attempt succeeds, or no attempt can start within ``Settings.webhook_attempt_budget_s``.

    A refused destination, or the round's soft time limit (:func:`round_time_limits`) reached during
    an attempt or a backoff, ends the round at once as ``failed``.
    """
    settings = get_settings()
    retrying = Retrying(
        stop=stop_before_delay(settings.webhook_attempt_budget_s),
        wait=wait_exponential_jitter(multiplier=settings.webhook_backoff_initial_s, max=settings.webhook_backoff_max_s,
                                     jitter=settings.webhook_backoff_initial_s),
        retry=retry_if_exception_type(AttemptFailed),
    )
    try:
        retrying(post_once, endpoint, body, evt_id)
    except RetryError as exc:
        last = exc.last_attempt
        return RoundReport("failed", last.attempt_number, str(last.exception()))
    except UnsafeWebhookDestination as exc:
        return RoundReport("failed", retrying.statistics.get("attempt_number", 1), str(exc))
    except SoftTimeLimitExceeded:
        return RoundReport("failed", retrying.statistics.get("attempt_number", 1),
                           f"round time limit of {round_time_limits().soft_s:g} s reached while posting to "
                           f"{loggable_url(endpoint.url)} (the endpoint answered too slowly)")
    return RoundReport(DELIVERED, retrying.statistics.get("attempt_number", 1))


def record(job_id: str, status: str, *, attempts: int = 0, error: str | None = None,
           due_at: float | None = None) -> bool:
    """Write a round's outcome on the job item; return False if it was already ``delivered``.

    ``delivered`` is never overwritten (a duplicate round that failed after another succeeded). A
    status of :data:`SETTLED` takes the event out of the outbox; ``due_at`` (epoch s) moves the time
    the outbox drain may send a round itself (:mod:`leases.outbox`).
    """
    actions: list[Action] = [JobItem.webhook_status.set(status), JobItem.webhook_attempts.add(attempts)]
    actions.append(JobItem.webhook_error.set(error) if error else JobItem.webhook_error.remove())
    if status == DELIVERED:
        actions.append(JobItem.webhook_delivered_at.set(time.time()))
    if status in SETTLED:
        actions += outbox.settle_actions()
    elif due_at is not None:
        actions += outbox.postpone_actions(due_at)
    try:
        JobItem(job_id).update(
            actions=actions,
            condition=JobItem.job_id.exists()
            & (JobItem.webhook_status.does_not_exist() | (JobItem.webhook_status != DELIVERED)),
        )
    except UpdateError as exc:
        if exc.cause_response_code != "ConditionalCheckFailedException":
            raise
        return False
    return True


def _keep_drain_away(job: JobItem) -> None:
    """A round put back: if its outbox entry falls due before the round can have run (the longest
    put-back delay and a round's time limit), move the entry on, so the drain sends no copy of a
    round that is only waiting for its tenant's slot. Best effort (at worst the drain sends a copy)."""
    now = time.time()
    latest_end = outbox_due_at(now, get_settings().webhook_tenant_busy_delay_max_s)
    if job.webhook_due_at is None or float(job.webhook_due_at) >= latest_end - get_settings().webhook_outbox_grace_s:
        return
    try:
        outbox.postpone(job.job_id, latest_end)
    except Exception as exc:  # noqa: BLE001
        log.info("webhook of job %s: outbox entry not moved on (%s); the drain may send a copy", job.job_id, exc)


def deliver_round(job_id: str, tenant_id: str) -> RoundReport:
    """Run one delivery round for ``job_id`` (see module docstring) and record it.

    Raises:
        pynamodb errors: the job item could not be read or written (the task's message stays and
            comes back after its visibility timeout).
    """
    from imposition import admission  # noqa: PLC0415 (only for tenants without an endpoint)

    try:
        job = JobItem.get(job_id, consistent_read=True)
    except DoesNotExist:
        log.warning("webhook of job %s (tenant %s): no such job; nothing to deliver", job_id, tenant_id)
        return RoundReport("skipped")
    if job.tenant_id != tenant_id or not job.job_status.is_final or job.webhook_status in SETTLED:
        log.info("webhook of job %s (tenant %s): nothing to deliver (status %s, webhook %s)",
                 job_id, tenant_id, job.status, job.webhook_status)
        return RoundReport("skipped")
    endpoint = endpoint_for(tenant_id)
    if endpoint is None:
        admission.confirm(job_id, tenant_id=tenant_id)
        record(job_id, NO_ENDPOINT)
        log.info("webhook of job %s: tenant %s has no endpoint; confirmed on its behalf", job_id, tenant_id)
        return RoundReport(NO_ENDPOINT)
    body = encode(job_event(job))
    try:
        with fairness.delivery_slot(tenant_id, hold_s=round_time_limits().hard_s):
            report = post_with_retries(endpoint, body, event_id(job_id, int(job.retries or 0)))
    except fairness.TenantBusy as busy:
        log.info("webhook of job %s: %s; put back", job_id, busy)
        _keep_drain_away(job)
        return RoundReport(BUSY, error=str(busy), retry_after_s=busy.retry_after_s)
    if report.status == DELIVERED:
        record(job_id, DELIVERED, attempts=report.attempts)
        log.info("webhook of job %s delivered to %s after %s attempt(s)",
                 job_id, loggable_url(endpoint.url), report.attempts)
    else:
        log.warning("webhook of job %s to %s: round failed after %s attempt(s): %s",
                    job_id, loggable_url(endpoint.url), report.attempts, report.error)
    return report
