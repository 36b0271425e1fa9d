"""The lease's verbs: **acquire** and **release** (docs/design.md, "The scheduling core"), each one
DynamoDB ``TransactWriteItems`` built from :mod:`leases.conditions`.

Invariant kept by every transaction here: a lease item for a job exists exactly while the job is
``running`` under that lease's token, and each tenant's ``in_flight`` equals its number of lease
items; the tenant's ``queued``/``waiting``/``occupied`` counters move with every status move.
Failures are read as :mod:`leases.dynamo` says (retry, cancelled, ambiguous). Every end of a lease
goes through :func:`fenced_release`, which writes its try's id into the job (``JobItem.release_id``)
and reads it back after a timeout or refusal.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from pynamodb.exceptions import DoesNotExist, PynamoDBException, TransactWriteError

from leases import outbox
from leases.dynamo import (AMBIGUOUS, CANCELLED, CONDITION_FAILED, ERROR, RETRY, NamedTransaction, Retryable, classify,
                           new_token, old_item, reason_code, with_conflict_retries, with_patience)
from leases.errors import AcquireUnresolved, CapReached, JobNotQueued, LeaseLost, TenantMismatch
from leases.models import ClusterItem, JobItem, JobStatus, LeaseItem, TenantItem, lost_attempt_entry
from leases.conditions import (
    can_borrow, cap_has_room, is_waiting, none_waiting, not_frozen, place_passes_on, queued_and_due, slot_to_borrow,
    slots_item,
)
from leases.reads import read_job, read_lease
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lease:
    """A held slot, as the worker that holds it knows it (times in epoch seconds)."""

    job_id: str
    tenant_id: str
    worker: str
    token: str
    acquired_at: float
    expires_at: float


def lease_of(item: LeaseItem) -> Lease:
    """The :class:`Lease` a lease item records."""
    return Lease(item.job_id, item.tenant_id, item.worker, item.token, float(item.acquired_at), float(item.expires_at))


def released_by(job_id: str, release_ids: Iterable[str]) -> str | None:
    """The one of ``release_ids`` that wrote the job's last release, or None. Read with retries
    (:func:`leases.reads.read_job`, whose LeaseContention it raises): it must outlast the blip."""
    try:
        job = read_job(job_id)
    except DoesNotExist:
        return None
    return job.release_id if job.release_id is not None and job.release_id in set(release_ids) else None


# --- job actions ------------------------------------------------------------------------------


def wake_actions(tenant_id: str, woken_at: float, reason: str) -> list:
    """Job actions of a wake, ``waiting → queued`` (its message is due at ``woken_at``); the
    condition is :func:`is_waiting`."""
    return [JobItem.status.set(JobStatus.QUEUED.value), JobItem.waiting_tenant.remove(),
            JobItem.queued_tenant.set(tenant_id), JobItem.woken_at.set(woken_at),
            JobItem.woken_by.set(reason), JobItem.due_at.set(woken_at)]


def take_actions(t: float, token: str, worker: str) -> list:
    """Job actions of a lease taken at ``t`` (epoch s) by ``worker`` with ``token``: ``running``,
    ``attempts + 1``, ``started_at``, ``first_received_at`` if absent; it leaves the queued index."""
    return [JobItem.status.set(JobStatus.RUNNING.value), JobItem.attempts.set((JobItem.attempts | 0) + 1),
            JobItem.started_at.set(t), JobItem.first_received_at.set(JobItem.first_received_at | t),
            JobItem.lease_token.set(token), JobItem.worker.set(worker), JobItem.queued_tenant.remove(),
            JobItem.due_at.remove()]


def new_lease_item(job_id: str, tenant_id: str, worker: str, token: str, t: float, *,
                   borrowed: bool = False) -> LeaseItem:
    """The lease item of a lease taken at ``t`` (epoch s): it expires ``lease_ttl_s`` later."""
    return LeaseItem(job_id, tenant_id=tenant_id, worker=worker, token=token, acquired_at=t, heartbeat_at=t,
                     expires_at=t + get_settings().lease_ttl_s, borrowed=True if borrowed else None)


def _number(raw: dict, name: str) -> int | None:
    return int(raw[name]["N"]) if name in raw else None


# --- acquire ------------------------------------------------------------------------------------

_ALL_OLD = "ALL_OLD"


def _acquire_refused(reasons: dict[str, object], codes: tuple[str, ...], job_id: str, tenant_id: str, token: str,
                     borrow: bool, t: float, exc: TransactWriteError) -> Lease:
    """Read a cancelled acquire: its own earlier try applied (the lease), or the domain error.

    Raises:
        TenantMismatch, JobNotQueued, CapReached: as :func:`acquire`; the original error otherwise.
    """
    s = get_settings()
    lease_failed = reason_code(reasons, "lease") == CONDITION_FAILED
    job_failed = reason_code(reasons, "job") == CONDITION_FAILED
    if lease_failed:
        old = LeaseItem.from_raw_data(old_item(reasons, "lease") or {"job_id": {"S": job_id}})
        if old.token == token:  # an earlier, ambiguous attempt of this call applied
            return lease_of(old)
    old_job = old_item(reasons, "job")
    job_tenant = old_job.get("tenant_id", {}).get("S")
    if job_tenant is not None and job_tenant != tenant_id:
        raise TenantMismatch(job_id, tenant_id, job_tenant, reason_codes=codes) from exc
    if job_failed or lease_failed:
        if not old_job and not job_failed:  # job queued, lease orphaned
            old_job = {"status": {"S": JobStatus.QUEUED.value}}
        status = old_job.get("status", {}).get("S")
        raise JobNotQueued(job_id, status, _number(old_job, "attempts"), reason_codes=codes) from exc
    if CONDITION_FAILED in (reason_code(reasons, "tenant"), reason_code(reasons, "cluster")):
        old_tenant = old_item(reasons, "tenant")
        cap = _number(old_tenant, "cap")
        frozen = float(old_tenant["repair_until"]["N"]) if "repair_until" in old_tenant else None
        raise CapReached(tenant_id, _number(old_tenant, "in_flight"), s.default_cap if cap is None else cap,
                         repair_until=frozen if frozen and frozen >= t else None,
                         burst_cap=_number(old_tenant, "burst_cap"), borrowing=borrow,
                         reason_codes=codes) from exc
    raise exc


def acquire(job_id: str, tenant_id: str, worker: str, *, borrow: bool = False, now: float | None = None,
            due_by: float | None = None) -> Lease:
    """**acquire**: take a slot for ``job_id`` in one transaction (docs/design.md §2, layer 2).

    Items, all or nothing: the tenant ``in_flight + 1``, ``queued − 1`` on condition
    :func:`cap_has_room` (read in the transaction: a tier change applies at once) and
    :func:`not_frozen`, or, with ``borrow``, :func:`can_borrow`; the job's shard of the cluster ``busy + 1``, with
    ``borrow`` on condition :func:`slot_to_borrow` (the reserve stays free); the lease item, on
    condition none exists; the job ``queued → running`` (:func:`take_actions`) on condition it is
    queued, the tenant's, and with ``due_by`` due by then (not in retry backoff).

    Conflicts and throttling are retried (bounded, jittered); after an ambiguous failure the lease
    is read back: this call's token means it applied.

    Raises:
        TenantMismatch: the job belongs to another tenant (checked first).
        JobNotQueued: the job is not ``queued`` or has a lease (checked before the cap: a
            duplicate is dropped, not parked).
        CapReached: the tenant is at its cap (or the cluster at its reserve, borrowing).
        LeaseContention: conflicts or unapplied ambiguous tries outlasted the retries.
        AcquireUnresolved: an ambiguous failure whose read-back failed too
            (:func:`leases.attempts.resolve_acquire`).
    """
    s = get_settings()
    token = new_token()

    def attempt() -> Lease:
        t = time.time() if now is None else now
        lease = new_lease_item(job_id, tenant_id, worker, token, t, borrowed=borrow)
        try:
            with NamedTransaction(new_token()) as tx:
                tx.add("save", "lease", lease, condition=LeaseItem.job_id.does_not_exist(), return_values=_ALL_OLD)
                tx.add("update", "tenant", TenantItem(tenant_id),
                       actions=[*TenantItem.leases_add(1), TenantItem.queued.add(-1)],
                       condition=(can_borrow() if borrow else cap_has_room(s.default_cap)) & not_frozen(t),
                       return_values=_ALL_OLD)
                tx.add("update", "cluster", slots_item(job_id), actions=ClusterItem.busy_add(1),
                       condition=slot_to_borrow() if borrow else None)
                tx.add("update", "job", JobItem(job_id), actions=take_actions(t, token, worker),
                       condition=queued_and_due(tenant_id, due_by), return_values=_ALL_OLD)
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == AMBIGUOUS:
                try:
                    held = read_lease(job_id)
                except PynamoDBException as read_exc:
                    raise AcquireUnresolved(job_id, tenant_id, worker, token, t + s.lease_ttl_s,
                                            reason_codes=codes) from read_exc
                if held is not None and held.token == token:
                    log.info("acquire of job %s: ambiguous failure (%s), but it applied", job_id, codes[0])
                    return lease_of(held)
                raise Retryable(codes) from exc
            if kind == CANCELLED and exc.cancellation_reasons:
                return _acquire_refused(tx.reasons(exc), codes, job_id, tenant_id, token, borrow, t, exc)
            raise
        return Lease(job_id, tenant_id, worker, token, t, t + s.lease_ttl_s)

    return with_conflict_retries(attempt, what=f"acquire lease for job {job_id}")


# --- release: the one fenced write that ends a lease ---------------------------------------------


@dataclass(frozen=True)
class Released:
    """What a release wrote: ``handed`` is the waiting job its place passed to (now ``queued``, its
    message still to publish), or None (the place was freed, or kept by a requeue)."""

    handed: str | None = None


class _Plan(NamedTuple):
    """One try of a release: hand the place to ``candidates[0]`` (oldest first), or, with none,
    free it, on condition none waits when ``none_waits`` (the index showed none); ``taken``: the
    candidates refused so far; ``settle_by`` (epoch s): when to stop reading a lagging index."""

    candidates: tuple[str, ...] = ()
    none_waits: bool = False
    settle_by: float = 0.0
    taken: frozenset[str] = frozenset()


def waiting_line(tenant_id: str) -> tuple[str, ...]:
    """The tenant's oldest waiting job ids, oldest first (``handoff_scan_limit`` of them, from the
    eventually consistent ``by-waiting`` index); a failed read is an empty line."""
    limit = get_settings().handoff_scan_limit
    try:
        return tuple(j.job_id for j in JobItem.by_waiting.query(tenant_id, scan_index_forward=True, limit=limit,
                                                                 page_size=limit, attributes_to_get=["job_id"]))
    except PynamoDBException as exc:
        log.info("could not read the waiting line of %s (%s); releasing on condition none waits", tenant_id, exc)
        return ()


def _first_plan(tenant_id: str, hand_on: bool) -> _Plan:
    if not hand_on:
        return _Plan()
    line = waiting_line(tenant_id)
    return _Plan(line, not line, time.time() + get_settings().index_settle_s)


def _reread(plan: _Plan, tenant_id: str) -> _Plan:
    """Read the line again, ``index_poll_s`` later, leaving out the candidates already taken; past
    ``settle_by``, free the place instead (the sweep's unblock wakes what the index hid)."""
    s = get_settings()
    if time.time() >= plan.settle_by:
        log.warning("tenant %s: a waiting job its index does not show after %s s; the sweep wakes it",
                    tenant_id, s.index_settle_s)
        return _Plan()
    time.sleep(s.index_poll_s)
    line = tuple(job_id for job_id in waiting_line(tenant_id) if job_id not in plan.taken)
    return plan._replace(candidates=line, none_waits=not line)


def _replan(plan: _Plan, reasons: dict[str, object], tenant_id: str) -> _Plan | None:
    """The next try after a refusal of the hand-off's own conditions only (None: not that).

    * the candidate was taken (woken by a sweep, cancelled): the next one, or the line read again;
    * the tenant refused a hand-off: its cap was lowered below ``occupied``; free the place;
    * the tenant refused "none waits": a job parked that the index does not show yet (real
      DynamoDB's indexes lag). The counter is strongly consistent, so the line is read again
      until ``settle_by`` (:func:`_reread`).
    """
    if CONDITION_FAILED in (reason_code(reasons, "lease"), reason_code(reasons, "job")):
        return None
    if plan.candidates and reason_code(reasons, "successor") == CONDITION_FAILED:
        taken = plan.taken | {plan.candidates[0]}
        rest = plan.candidates[1:]
        return plan._replace(candidates=rest, taken=taken) if rest else _reread(plan._replace(taken=taken), tenant_id)
    if reason_code(reasons, "tenant") != CONDITION_FAILED:
        return None
    return _Plan() if plan.candidates else _reread(plan, tenant_id)


def _release_items(tx: NamedTransaction, job_id: str, tenant_id: str, plan: _Plan, *, requeue: bool,
                   t: float) -> None:
    """The tenant, cluster and successor items of a release (the lease and job items are the caller's)."""
    s = get_settings()
    successor = plan.candidates[0] if plan.candidates else None
    if requeue:  # a retry keeps its place
        place, condition = [*TenantItem.leases_add(-1), *TenantItem.counted(TenantItem.queued, 1)], None
    elif successor is not None:  # the place passes on: occupied unchanged
        place = [*TenantItem.leases_add(-1), TenantItem.waiting.add(-1), *TenantItem.counted(TenantItem.queued, 1)]
        condition = place_passes_on(s.default_cap)
    else:
        place = [*TenantItem.leases_add(-1), TenantItem.occupied.add(-1)]
        condition = none_waiting() if plan.none_waits else None
    tx.add("update", "tenant", TenantItem(tenant_id), actions=place, condition=condition)
    tx.add("update", "cluster", slots_item(job_id), actions=ClusterItem.busy_add(-1))
    if successor is not None and not requeue:
        tx.add("update", "successor", JobItem(successor), actions=wake_actions(tenant_id, t, "release"),
               condition=is_waiting(tenant_id))


def _try_release(job_id: str, tenant_id: str, token: str, job_item: Callable[[NamedTransaction, str], None],
                 plan: _Plan, tried: dict[str, str | None], *, requeue: bool,
                 expired_before: float | None, now: float | None) -> Released | _Plan | None:
    """One try of :func:`fenced_release` with ``plan`` (``tried``: release id → its successor, for
    the read-back). Returns what applied, the next plan, or None (the lease is not ours)."""
    release_id = new_token()
    tried[release_id] = None if requeue or not plan.candidates else plan.candidates[0]
    condition = LeaseItem.token == token
    if expired_before is not None:
        condition = condition & (LeaseItem.expires_at < expired_before)
    try:
        with NamedTransaction(release_id) as tx:
            tx.add("delete", "lease", LeaseItem(job_id), condition=condition)
            _release_items(tx, job_id, tenant_id, plan, requeue=requeue, t=time.time() if now is None else now)
            job_item(tx, release_id)
    except TransactWriteError as exc:
        kind, codes = classify(exc)
        if kind == RETRY:
            raise Retryable(codes) from exc
        if kind == CANCELLED and exc.cancellation_reasons:
            replanned = _replan(plan, tx.reasons(exc), tenant_id)
            if replanned is not None:
                return replanned
        if kind == ERROR or (kind == CANCELLED and CONDITION_FAILED not in codes):
            raise
        applied = released_by(job_id, tried)
        if applied is not None:  # an earlier try applied (botocore resent it after a timeout)
            log.info("release of job %s: failed (%s), but a try of it applied", job_id, codes[0])
            return Released(tried[applied])
        if kind == AMBIGUOUS:
            held = read_lease(job_id, retried=True)
            if held is not None and held.token == token:
                raise Retryable(codes) from exc
        return None
    return Released(tried[release_id])


def fenced_release(job_id: str, tenant_id: str, token: str, job_item: Callable[[NamedTransaction, str], None], *,
                   requeue: bool = False, expired_before: float | None = None, hand_on: bool = False,
                   now: float | None = None, patience_until: float | None = None, what: str) -> Released | None:
    """**release**: end the lease of ``job_id`` in one transaction, fenced by ``token``.

    Items: the lease, deleted on condition it carries ``token`` (and ``expires_at < expired_before``
    when given); the tenant ``in_flight − 1``; the cluster ``busy − 1``; the job, added by
    ``job_item(tx, release_id)`` (an update that writes ``release_id``, or a condition check).
    The tenant's place: with ``requeue`` it is kept (``queued + 1``); with ``hand_on`` it passes to
    the tenant's oldest waiting job, which goes ``waiting → queued`` in the same transaction
    (``waiting − 1``, ``queued + 1``; condition: still waiting, and ``occupied <= cap``, or
    ``<= burst_cap`` for a tier that borrows), or, with none waiting, it is freed (``occupied − 1``)
    on condition the tenant's ``waiting`` counter says none waits. A refusal of only those
    conditions is tried again at once (:func:`_replan`). Otherwise the place is freed. ``now``
    (epoch s): the handed job's ``woken_at`` (the commit's time; None: each try's).

    Reading a failure: conflicts and throttling are retried (bounded, jittered). After an ambiguous
    failure, and after a refused one, the job is read back: if it carries the ``release_id`` of one
    of this call's tries, the release applied. Otherwise an ambiguous try whose lease is still held
    is tried again, and anything else means the lease is not ours any more. Until ``patience_until``
    (epoch s), a release that cannot reach DynamoDB starts over, its earlier tries still read back.

    Returns:
        :class:`Released` (``handed``: the job to publish, or None), or None if the lease was gone,
        carried another token, or (with ``expired_before``) was renewed.

    Raises:
        LeaseContention: conflicts, or failed read-backs, outlasted the bounded retries (the lease stays).
        pynamodb.exceptions.PynamoDBException: an error that says nothing about the lease.
    """
    tried: dict[str, str | None] = {}

    def release() -> Released | None:
        plan: _Plan | Released | None = _first_plan(tenant_id, hand_on and not requeue)
        while isinstance(plan, _Plan):
            plan = with_conflict_retries(functools.partial(_try_release, job_id, tenant_id, token, job_item, plan,
                                                           tried, requeue=requeue, expired_before=expired_before,
                                                           now=now), what=what)
        return plan

    return release() if patience_until is None else with_patience(release, until=patience_until, what=what)


def _release(lease: Lease, job_actions: list, *, what: str, requeue: bool = False, hand_on: bool = False,
             now: float | None = None) -> Released:
    """The holder's release: :func:`fenced_release` on a job that runs under ``lease``, patient up to
    ``lease.expires_at`` (pass the lease as last renewed): till then it is the holder's to end.

    Raises:
        LeaseLost: the lease was not ours any more (nothing was written).
        LeaseContention: as :func:`fenced_release`.
    """

    def job_item(tx: NamedTransaction, release_id: str) -> None:
        tx.add("update", "job", JobItem(lease.job_id),
               actions=[*job_actions, JobItem.release_id.set(release_id)],
               condition=(JobItem.lease_token == lease.token) & (JobItem.status == JobStatus.RUNNING.value))

    released = fenced_release(lease.job_id, lease.tenant_id, lease.token, job_item, requeue=requeue,
                              hand_on=hand_on, now=now, patience_until=lease.expires_at, what=what)
    if released is None:
        raise LeaseLost(lease.job_id, lease.token, f"({what} refused)")
    return released


def requeue_actions(tenant_id: str, due_at: float) -> list:
    """Job actions of a move to ``queued`` whose message becomes visible at ``due_at`` (epoch s)."""
    return [JobItem.status.set(JobStatus.QUEUED.value), JobItem.queued_tenant.set(tenant_id),
            JobItem.due_at.set(due_at), JobItem.lease_token.remove()]


def commit_success(
    lease: Lease, *, output_key: str, sheets: int, sides: int, now: float | None = None,
    warnings: list[dict[str, str]] | None = None, preview_keys: list[str] | None = None,
    jdf_key: str | None = None,
) -> tuple[dict[str, Any], Released]:
    """Record ``succeeded`` with the plate's key and release the slot, all fenced by the token;
    the tenant's place passes to its oldest waiting job in the same transaction
    (:func:`fenced_release` with ``hand_on``).

    The job's webhook event is put in the outbox by the same write (:mod:`leases.outbox`).
    ``warnings`` are the engine's typed warnings (``[{"code", "message"}, …]``), stored as
    ``JobItem.warnings`` (an empty list when there are none); ``preview_keys`` the S3 keys of the
    plate's previews, as ``JobItem.preview_keys``; ``jdf_key`` its JDF Layout's, as ``JobItem.jdf_key``.

    Returns:
        ``(written, released)``: the job attributes the commit wrote, by name (a removed one as
        None; the outbox's and ``release_id`` left out), so the caller knows the committed job
        without reading it back; and the :class:`Released` (the handed job to publish, if any).

    Raises:
        LeaseLost: the lease was reclaimed; nothing was written (the job is someone else's now).
        LeaseContention: conflicts outlasted the retries (the lease stays; the sweeper frees it).
    """
    t = time.time() if now is None else now
    written: dict[str, Any] = {
        "status": JobStatus.SUCCEEDED.value, "output_key": output_key, "sheets": sheets, "sides": sides,
        "warnings": list(warnings or []), "preview_keys": list(preview_keys or []), "finished_at": t,
        "jdf_key": jdf_key,
    }
    removed = ("lease_token", "error", "error_code")
    released = _release(
        lease,
        [
            *(getattr(JobItem, name).set(value) for name, value in written.items()),
            *(getattr(JobItem, name).remove() for name in removed),
            *outbox.intent_actions(t),
        ],
        what="commit",
        hand_on=True,
        now=t,
    )
    return {**written, **dict.fromkeys(removed)}, released


def release_for_retry(lease: Lease, *, error: str, error_code: str, delay_s: float = 0,
                      now: float | None = None, infra_attempt: int | None = None) -> None:
    """Put the job back to ``queued`` (a retry message, visible in ``delay_s``, is already
    published) and free the slot. With ``infra_attempt`` (the attempt's number), the failure was
    the infrastructure's (an AWS endpoint or the network failed the run): in the same transaction
    that attempt joins ``JobItem.infra_lost_attempts`` (not charged) and ``lost_attempts`` records it
    with cause ``infra_error``.

    Raises:
        LeaseLost, LeaseContention: as :func:`commit_success`.
    """
    t = time.time() if now is None else now
    infra = []
    if infra_attempt is not None:
        entry = lost_attempt_entry(infra_attempt, "infra_error", f"{error_code}: {error}", t, token=lease.token)
        infra = [JobItem.infra_lost_attempts.add({int(infra_attempt)}),
                 JobItem.lost_attempts.set((JobItem.lost_attempts | []).append([entry]))]
    _release(lease, [*requeue_actions(lease.tenant_id, t + delay_s), JobItem.error.set(error),
                     JobItem.error_code.set(error_code), *infra], what="release for retry", requeue=True)


def fail_job(lease: Lease, *, error: str, error_code: str, now: float | None = None) -> Released:
    """Record ``failed`` with the reason and release the slot, handing the tenant's place on as
    :func:`commit_success` does; the webhook event goes to the outbox.

    Raises:
        LeaseLost, LeaseContention: as :func:`commit_success`.
    """
    t = time.time() if now is None else now
    return _release(lease, [JobItem.status.set(JobStatus.FAILED.value), JobItem.finished_at.set(t),
                            JobItem.lease_token.remove(), JobItem.error.set(error),
                            JobItem.error_code.set(error_code), *outbox.intent_actions(t)],
                    what="fail", hand_on=True, now=t)
