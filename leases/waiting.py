"""The waiting line's verbs (``leases`` package docstring): **admit** at the door (:func:`admit`, the
one place a job is created, with its idempotency claim; :func:`withdraw` undoes it), **park** on a
cap hit, and **unblock** (:func:`wake`, the sweep's second half; also the door's and a cap change's).

A waiting job has no message: a release hands it its tenant's place, or :func:`wake` brings it
back (``waiting → queued``, then published), on condition the tenant's ``occupied`` (in_flight +
queued) is below its cap. A wake whose publish was lost leaves a ``queued`` job whose ``due_at``
passes; the sweep re-publishes it (:func:`leases.sweeper.stale_queued`). Across tenants,
:func:`gives_way` tells a job to let a poorer tenant take the slot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pynamodb.exceptions import DeleteError, TransactWriteError
from pynamodb.expressions.condition import Condition
from pynamodb.models import Model

from leases.errors import AdmitRefused, JobNotQueued
from leases import nodes, policy
from leases.models import PENDING_PARTITION, JobItem, JobStatus, TenantItem
from leases.reads import job_or_none, read_tenant
from leases.dynamo import (
    AMBIGUOUS,
    CANCELLED,
    CONDITION_FAILED,
    RETRY,
    NamedTransaction,
    Retryable,
    classify,
    new_token,
    old_item,
    reason_code,
    with_conflict_retries,
)
from leases.transactions import wake_actions
from leases.conditions import cap_has_room, cluster_state, condition_of, is_waiting, not_frozen, tenant_state
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)

#: ``publish(tenant_id, job_id)``: sends the job's message (delay 0, the tenant's MessageGroupId).
Publish = Callable[..., None]


def _park_actions(tenant_id: str, t: float) -> list:
    return [JobItem.status.set(JobStatus.WAITING.value), JobItem.waiting_tenant.set(tenant_id),
            JobItem.parked_at.set(t), JobItem.queued_tenant.remove(), JobItem.due_at.remove()]


def park(job_id: str, tenant_id: str, *, now: float | None = None) -> bool:
    """Move a queued job to ``waiting`` because its tenant is at its cap; one transaction.

    Items: the job ``queued → waiting`` (condition: ``queued`` and the tenant's; counts a deferral,
    stamps ``first_received_at``), the tenant ``queued − 1``, ``waiting + 1`` on condition it is
    still at its cap (or frozen by a counter repair). That condition is what makes a release never
    miss a parked job: a slot freed before the park commits cancels the park instead.

    Returns:
        True if parked; False if the tenant has room now (acquire again).

    Raises:
        JobNotQueued: the job is not ``queued`` any more (a duplicate delivery): drop the message.
        LeaseContention: conflicts outlasted the bounded retries.
    """
    s = get_settings()

    def attempt() -> bool:
        t = time.time() if now is None else now
        try:
            with NamedTransaction(new_token()) as tx:
                tx.add("update", "tenant", TenantItem(tenant_id),
                       actions=[TenantItem.queued.add(-1), TenantItem.occupied.add(-1),
                                *TenantItem.counted(TenantItem.waiting, 1)],
                       condition=~(cap_has_room(s.default_cap) & not_frozen(t)))
                tx.add("update", "job", JobItem(job_id),
                       actions=[*_park_actions(tenant_id, t),
                                JobItem.defer_count.set((JobItem.defer_count | 0) + 1),
                                JobItem.first_received_at.set(JobItem.first_received_at | t)],
                       condition=(JobItem.status == JobStatus.QUEUED.value) & (JobItem.tenant_id == tenant_id),
                       return_values="ALL_OLD")
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == AMBIGUOUS:
                job = job_or_none(job_id)
                if job is not None and job.status == JobStatus.WAITING.value and float(job.parked_at or 0) == t:
                    return True
                if job is not None and job.status == JobStatus.QUEUED.value:
                    raise Retryable(codes) from exc
                raise JobNotQueued(job_id, None if job is None else job.status, reason_codes=codes) from exc
            if kind == CANCELLED and exc.cancellation_reasons:
                reasons = tx.reasons(exc)
                if reason_code(reasons, "job") == CONDITION_FAILED:
                    old = old_item(reasons, "job")
                    raise JobNotQueued(job_id, old.get("status", {}).get("S"), reason_codes=codes) from exc
                if reason_code(reasons, "tenant") == CONDITION_FAILED:
                    return False
            raise
        return True

    return with_conflict_retries(attempt, what=f"park job {job_id}")


def waiting_jobs(tenant_id: str) -> Iterator[JobItem]:
    """The tenant's parked jobs, oldest submission first (sparse index; eventually consistent)."""
    return JobItem.by_waiting.query(tenant_id, scan_index_forward=True,
                                    page_size=get_settings().handoff_scan_limit)


def has_place():
    """Condition on a tenant item: ``occupied < cap``, or ``occupied < burst_cap`` when its tier
    borrows (whether the cluster has a slot to lend is read, not conditioned: a job woken too many
    parks again at its acquire; :data:`leases.policy.WAKE_PLACE`)."""
    return condition_of(policy.WAKE_PLACE, get_settings().default_cap)


def _try_wake(job_id: str, tenant_id: str, t: float, reason: str) -> str:
    """One wake transaction; ``"woken"``, ``"job_gone"`` (not waiting any more) or ``"full"`` (the
    tenant has no place left)."""

    def attempt() -> str:
        try:
            with NamedTransaction(new_token()) as tx:
                tx.add("update", "tenant", TenantItem(tenant_id),
                       actions=[TenantItem.waiting.add(-1), TenantItem.occupied.add(1),
                                *TenantItem.counted(TenantItem.queued, 1)], condition=has_place())
                tx.add("update", "job", JobItem(job_id), actions=wake_actions(tenant_id, t, reason),
                       condition=is_waiting(tenant_id))
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == AMBIGUOUS:
                job = job_or_none(job_id)
                if job is not None and job.woken_at is not None and float(job.woken_at) == t:
                    return "woken"
                if job is not None and job.status == JobStatus.WAITING.value:
                    raise Retryable(codes) from exc
                return "job_gone"
            if kind == CANCELLED and exc.cancellation_reasons:
                reasons = tx.reasons(exc)
                if reason_code(reasons, "job") == CONDITION_FAILED:
                    return "job_gone"
                if reason_code(reasons, "tenant") == CONDITION_FAILED:
                    return "full"
            raise
        return "woken"

    return with_conflict_retries(attempt, what=f"wake job {job_id}")


def wake(tenant_id: str, *, publish: Publish, reason: str = "release", now: float | None = None,
         on_woken: Callable[[JobItem], None] | None = None, limit: int | None = None,
         cluster: policy.ClusterState | None = None) -> list[str]:
    """Wake the tenant's oldest waiting jobs while it has room (cap − in_flight − queued > 0, or
    more while it may borrow: :func:`room_with_borrowing`), at most ``limit`` of them.

    One read of the tenant decides how many to try (its room). Each wake is one transaction (job
    ``waiting → queued``, tenant ``waiting − 1``, ``queued + 1``, ``occupied + 1`` on condition
    :func:`has_place`). The conditions keep the counters exact. Each woken job is then published
    (``publish(tenant_id, job_id)``).
    ``reason`` (``release``, ``borrow``, ``door``, ``sweeper``, ``cap_change``, ``repair``) is recorded in the
    job's ``woken_by``; ``on_woken(job)`` is called after each publish (metrics); ``cluster``: the
    slot counter as the caller just read it, for the room of a tier that borrows (None: read it).

    Returns:
        The job ids woken, oldest first.

    Raises:
        LeaseContention, pynamodb/botocore/kombu errors: the wake stops; the sweeper finishes it (a
            woken job whose publish failed is re-published once its ``due_at`` is stale).
    """
    woken: list[str] = []
    tenant = read_tenant(tenant_id)
    if tenant is None or int(tenant.waiting or 0) <= 0:
        return woken
    room = room_with_borrowing(tenant, cluster)
    if limit is not None:
        room = min(room, limit)
    if room <= 0:
        return woken
    t = time.time() if now is None else now
    for job in waiting_jobs(tenant_id):
        outcome = "full" if len(woken) >= room else _try_wake(job.job_id, tenant_id, t, reason)
        if outcome == "full":
            break
        if outcome == "woken":
            publish(tenant_id, job.job_id)
            woken.append(job.job_id)
            job.woken_at, job.woken_by = t, reason
            if on_woken is not None:
                on_woken(job)
    return woken


def room_with_borrowing(tenant: TenantItem, cluster: policy.ClusterState | None = None) -> int:
    """Jobs the tenant may still have started: its room under its cap, or, if its tier borrows,
    under its burst cap as far as the cluster has slots above its reserve (``borrowable − busy``;
    :func:`leases.policy.wake_room`); ``cluster``: the slot counter as the caller read it (None:
    read it now, if the tier borrows)."""
    default_cap = get_settings().default_cap
    state = tenant_state(tenant)
    if cluster is None and policy.borrows(state, default_cap):
        cluster = cluster_state(nodes.slots())
    return policy.wake_room(state, cluster, default_cap)


def wake_borrowers(*, publish: Publish, on_woken: Callable[[JobItem], None] | None = None) -> list[str]:
    """After every release that freed a slot: while the cluster has slots above its reserve that
    no queued job claims (:func:`leases.policy.borrow_spare`), wake one waiting job of each tier
    that borrows, the fewest leases first (:func:`leases.policy.borrow_order`). Reads the slot
    counter and, if it lends, the pending index (it may lag: the wakes' conditions keep the
    counters exact, the sweeper wakes what a stale read missed). Returns the job ids woken."""
    cluster = cluster_state(nodes.slots())
    if cluster is None or not policy.lends(cluster):
        return []
    pending = pending_tenants()
    spare = policy.borrow_spare(cluster, pending)
    woken: list[str] = []
    for tenant_id in policy.borrow_order(pending):
        if len(woken) >= spare:
            break
        woken += wake(tenant_id, publish=publish, reason="borrow", on_woken=on_woken, limit=1, cluster=cluster)
    return woken


def pending_tenants() -> dict[str, policy.TenantState]:
    """The counters of every tenant with queued or waiting jobs, by id (the ``by-pending`` index:
    eventually consistent, so a counter may lag by a moment)."""
    return {t.tenant_id: tenant_state(t) for t in TenantItem.by_pending.query(PENDING_PARTITION)}


def gives_way(tenant_id: str, *, now: float | None = None) -> bool:
    """Whether a job of ``tenant_id`` about to be acquired should give its slot to a poorer
    tenant (:func:`leases.policy.gives_way`) that has a job due by ``now`` (epoch s; default the
    clock). Reads the pending index; only where the rule may fire, the slot counter and the poorer
    tenants' queued jobs. A failed read is False: the job takes the slot."""
    default_cap = get_settings().default_cap
    t = time.time() if now is None else now
    try:
        pending = pending_tenants()
        poorer = policy.poorer_tenants(tenant_id, pending, default_cap)
        if not poorer:
            return False
        cluster = cluster_state(nodes.slots())
        return (cluster is not None and policy.gives_way(tenant_id, pending, cluster, default_cap)
                and any(_has_job_due(other, t) for other in poorer))
    except Exception as exc:  # noqa: BLE001 - the read only advises: on any failure the job takes its slot
        log.info("could not read the pending tenants (%s); job of %s takes its slot", exc, tenant_id)
        return False


def _has_job_due(tenant_id: str, now: float) -> bool:
    """The tenant has a queued job whose message is due by ``now`` (not one in retry backoff or
    held by a deferral): the ``by-queued`` index."""
    due = JobItem.by_queued.query(tenant_id, filter_condition=JobItem.due_at <= now,
                                  page_size=get_settings().handoff_scan_limit, attributes_to_get=["job_id"])
    return next(iter(due), None) is not None


def through_door(job: JobItem, *, door: bool = True, now: float | None = None) -> bool:
    """The door: is a new job ``queued`` (True: publish it) or ``waiting`` (False)? Sets the job's
    fields; writes nothing (:func:`admit`'s transaction does).

    It parks when its tenant has waiting jobs or no room (:func:`queues_at_door`, strongly
    consistent), so a burst stands in DynamoDB, not in SQS before other tenants' messages. The
    read is no lock: a surplus parks at its acquire. A park here must be followed by :func:`wake`
    (the caller's), so room that appeared meanwhile is used. ``door=False`` always queues."""
    t = time.time() if now is None else now
    queued = not door or queues_at_door(read_tenant(job.tenant_id))
    if queued:
        job.status, job.queued_tenant, job.due_at = JobStatus.QUEUED.value, job.tenant_id, t
    else:
        job.status, job.waiting_tenant, job.parked_at = JobStatus.WAITING.value, job.tenant_id, t
        job.defer_count = int(job.defer_count or 0) + 1  # a park at the door is a cap deferral too
    return queued


def queues_at_door(tenant: TenantItem | None) -> bool:
    """:func:`leases.policy.door_queues` on ``tenant`` as read; the cluster's slot counter is read
    (strongly consistent) only where it decides: a tier that borrows, with no waiting job and no
    room under its cap."""
    default_cap = get_settings().default_cap
    state = None if tenant is None else tenant_state(tenant)
    cluster = None
    if (state is not None and int(state.waiting or 0) == 0 and policy.room(state, default_cap) <= 0
            and policy.borrows(state, default_cap)):
        cluster = cluster_state(nodes.slots())
    return policy.door_queues(state, default_cap, cluster)


def counter_actions(job: JobItem, delta: int) -> list:
    """Tenant-item actions that count (``delta`` = 1) or uncount (−1) a new job in its status
    (a queued job also takes or frees a place: ``occupied``)."""
    queued = job.status == JobStatus.QUEUED.value
    counter = TenantItem.queued if queued else TenantItem.waiting
    actions = TenantItem.counted(counter, delta) if delta > 0 else [counter.add(delta)]
    return [*actions, TenantItem.occupied.add(delta)] if queued else actions


@dataclass(frozen=True)
class Claim:
    """The job's idempotency claim: one more item of :func:`admit`'s transaction, deleted with the
    job by :func:`withdraw`. The layer above owns its rules and builds it
    (:func:`imposition.admission.claims.token_claim`).

    Attributes:
        item: the claim item to put (a PynamoDB model instance whose ``job_id`` names the job).
        free: :func:`admit`'s condition on the stored claim: the claim may be taken.
        ours: :func:`withdraw`'s condition on the stored claim: it still names this job.
    """

    item: Model
    free: Condition
    ours: Condition


def admit(job: JobItem, claim: Claim, *, door: bool = True, now: float | None = None) -> bool:
    """**admit**, the door: :func:`through_door`, then one transaction, the single place a job is
    created: the claim (condition ``claim.free``), the job item (condition: a new job id) and its
    tenant's counter (:func:`counter_actions`). Conflicts and throttling are tried again; a write
    with no answer is read back (the job item, strongly consistent: there as this call wrote it
    exactly when the transaction applied), never blindly repeated.

    Returns:
        True if the job is ``queued`` (publish it); False if it is ``waiting``, parked at the door
        (follow with :func:`wake`, so room that appeared meanwhile is used).

    Raises:
        leases.errors.AdmitRefused: the claim is held by another job, or the job id is taken
            (``.item``, ``.holder``); nothing written.
        leases.errors.LeaseContention: conflicts or throttling outlasted the bounded retries;
            nothing written.
        pynamodb.exceptions.PynamoDBException: any other DynamoDB failure.
    """
    queued = through_door(job, door=door, now=now)

    def attempt() -> bool:
        try:
            with NamedTransaction(new_token()) as tx:
                tx.add("save", "claim", claim.item, condition=claim.free, return_values="ALL_OLD")
                tx.add("save", "job", job, condition=JobItem.job_id.does_not_exist(), return_values="ALL_OLD")
                tx.add("update", "tenant", TenantItem(job.tenant_id), actions=counter_actions(job, 1))
        except TransactWriteError as exc:
            _read_admit_failure(exc, tx, job)
            log.info("job %s: admit failed (%s), but an earlier try of it applied", job.job_id, exc)
        return queued

    return with_conflict_retries(attempt, what=f"admit job {job.job_id}")


def _read_admit_failure(exc: TransactWriteError, tx: NamedTransaction, job: JobItem) -> None:
    """Return if an earlier try of this admit applied (its answer was lost); else raise what the
    failure means: :class:`Retryable` (nothing written, try again), :class:`AdmitRefused`, or
    ``exc`` itself."""
    kind, codes = classify(exc)
    if kind == RETRY:
        raise Retryable(codes) from exc
    if kind == AMBIGUOUS:
        if _admitted(job):
            return
        raise Retryable(codes) from exc
    if kind == CANCELLED and exc.cancellation_reasons:
        reasons = tx.reasons(exc)
        refused = [name for name in (AdmitRefused.CLAIM, AdmitRefused.JOB)
                   if reason_code(reasons, name) == CONDITION_FAILED]
        if refused:
            holder = old_item(reasons, refused[0]).get("job_id", {}).get("S")
            if holder == job.job_id and _admitted(job):
                return  # the refusal is this call's own earlier try, which applied
            if holder is None:  # no stored image came back: the next try's answer names it
                raise Retryable(codes) from exc
            raise AdmitRefused(job.job_id, refused[0], holder, reason_codes=codes) from exc
    raise exc


def _admitted(job: JobItem) -> bool:
    """True if ``job`` is stored as this admit wrote it: its tenant, token and submission time (a
    caller may choose a job id another submission took)."""
    stored = job_or_none(job.job_id)
    return (stored is not None and stored.tenant_id == job.tenant_id and stored.token == job.token
            and stored.submitted_at == job.submitted_at)


def withdraw(job: JobItem, claim: Claim) -> bool:
    """Undo :func:`admit` of a job whose message could not be published (the submission's undo):
    delete its claim, its job item and its tenant's count of it, in one transaction; idempotent.

    Only what is the job's is deleted: the job item (and its count) if it is the tenant's and still
    has the status admit gave it (nothing ran it), the claim if it still names the job
    (``claim.ours``; the claim expired and a later job took it: kept). A job that moved on (a wake
    or a worker took it) is left alone with its claim, so the token stays taken by a live job.

    Returns:
        True if the job item was deleted; False if it had moved on or was gone.

    Raises:
        pynamodb.exceptions.PynamoDBException: DynamoDB failed (the caller keeps its own error; the
            claim then expires with its TTL).
    """
    try:
        with NamedTransaction(new_token()) as tx:
            tx.add("delete", "claim", claim.item, condition=claim.ours)
            _withdraw_job(tx, job)
        return True
    except TransactWriteError as exc:
        if classify(exc)[0] != CANCELLED:
            raise
    try:  # one of the two conditions failed: each part on its own
        with NamedTransaction(new_token()) as tx:
            _withdraw_job(tx, job)
        withdrawn = True
    except TransactWriteError as exc:
        if classify(exc)[0] != CANCELLED:
            raise
        withdrawn = False
    if withdrawn or job_or_none(job.job_id) is None:
        try:
            claim.item.delete(condition=claim.ours)
        except DeleteError as exc:
            if classify(exc)[0] != CANCELLED:
                raise
    return withdrawn


def _withdraw_job(tx: NamedTransaction, job: JobItem) -> None:
    tx.add("delete", "job", JobItem(job.job_id),
           condition=(JobItem.tenant_id == job.tenant_id) & (JobItem.status == job.status))
    tx.add("update", "tenant", TenantItem(job.tenant_id), actions=counter_actions(job, -1))
