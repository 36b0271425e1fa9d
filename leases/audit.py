"""``imposition audit``: check, and optionally repair, the lease invariant of docs/design.md §4 per tenant.

What must hold at every instant (each lease transaction keeps it, all or nothing); the finding kinds:

* ``counter``      — the tenant's ``in_flight`` equals its number of live lease items;
* ``over_cap``     — no lease was taken above the cap (its burst cap, for a tier that borrows) in
  force when it was acquired (a lowered cap kills nothing);
* ``orphan_lease`` — every lease fences a job ``running`` under its token;
* ``stranded_job`` — every ``running`` job has the lease its ``lease_token`` names;
* ``lost_job``     — no ``queued`` job is overdue by ``Clocks.lost_message_after_s`` while the work
  queue shows no visible message (checked only when the caller gives the visible count);
* ``job_counters`` — the tenant's ``queued`` and ``waiting`` equal its jobs in those statuses, and
  ``occupied`` equals its live leases plus its queued jobs;
* the cluster (a whole-cluster audit only) — each slot-counter shard's ``busy`` equals its jobs' live leases.

Expired leases are the sweeper's work. Reads are no snapshot: an orphan or stranded suspect is read
again after its job or lease; counters and cap are judged only from reads no lease moved through
(``TenantItem.lease_moves``; else not ``settled``); a drift counts if seen in N snapshots in a row.

**Repair** (``--repair``, safe while workers run), each fix one conditional transaction (refused: read
again): an orphan lease removed (:func:`leases.sweeper.remove_orphan`), a stranded job re-published
and re-queued (or failed), a lost job re-published, a counter rewritten under a short freeze of the
tenant's acquires (``TenantItem.repair_until``; also for a tenant not settled), the job counters
rewritten; an over-cap lease left alone. Each fix that frees a slot or changes a counter, and each
freeze, is followed by :func:`leases.waiting.wake`. Why: docs/design.md, "The audit's repair freezes".
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from leases import nodes, outbox, sweeper, waiting
from leases.errors import LeaseContention
from leases.models import ClusterItem, JobItem, JobStatus, LeaseItem, TenantItem, slot_shard_key, slot_shard_of
from leases.dynamo import CANCELLED, RETRY, Retryable, classify, new_token, tx_connection, with_conflict_retries
from leases.transactions import requeue_actions
from leases.reads import read_lease
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings

log = logging.getLogger(__name__)

#: Drift kinds, in the order repairs are applied.
DRIFT_KINDS = ("orphan_lease", "stranded_job", "counter", "job_counters", "lost_job", "over_cap")


@dataclass(frozen=True)
class Drift:
    """One broken rule: ``kind`` (see :data:`DRIFT_KINDS`), the tenant, the job if any, a sentence."""

    tenant_id: str
    kind: str
    detail: str
    job_id: str | None = None

    @property
    def key(self) -> tuple[str, str, str | None]:
        """Identity across snapshots. An ``in_flight`` counter drift is the same drift whatever its
        values (acquires are frozen to repair it); a ``job_counters`` drift only with the same
        values, since jobs that move between its reads (an acquire and a release of one job cancel
        out in the counters) can make one snapshot look wrong."""
        return (self.tenant_id, self.kind, self.detail if self.kind == "job_counters" else self.job_id)


@dataclass
class TenantAudit:
    """One tenant's state as read, and its drifts."""

    tenant_id: str
    in_flight: int
    cap: int
    leases: int
    running_jobs: int
    expired_leases: int
    queued: int = 0
    waiting: int = 0
    queued_jobs: int = 0
    waiting_jobs: int = 0
    drifts: list[Drift] = field(default_factory=list)
    #: False when the leases moved during every read (``Settings.audit_stable_read_tries``): the
    #: counters and the cap were then not judged (the next audit tries again).
    settled: bool = True


@dataclass
class AuditReport:
    """The audit of every tenant looked at; ``repairs`` lists what ``--repair`` did."""

    tenants: list[TenantAudit]
    repairs: list[str] = field(default_factory=list)

    @property
    def drifts(self) -> list[Drift]:
        """Every drift, tenant by tenant."""
        return [d for t in self.tenants for d in t.drifts]

    #: The slot counter's shards against their live leases: ``{shard: (busy, leases)}``, every shard
    #: with either; a drift where unequal.
    shards: dict[int, tuple[int, int]] | None = None
    #: False when leases moved through every read of the shards: they were then not judged.
    cluster_settled: bool = True

    @property
    def cluster(self) -> tuple[int, int] | None:
        """The cluster's ``(busy, leases)``, summed over the shards (None: no whole-cluster audit)."""
        if self.shards is None:
            return None
        return (sum(b for b, _ in self.shards.values()), sum(h for _, h in self.shards.values()))

    @property
    def shard_drifts(self) -> dict[int, tuple[int, int]]:
        """The shards whose ``busy`` differs from their live leases (none if not ``cluster_settled``)."""
        return {k: (b, h) for k, (b, h) in (self.shards or {}).items() if b != h} if self.cluster_settled else {}

    @property
    def clean(self) -> bool:
        """True when no tenant has drift and every shard's busy counter equals its leases."""
        return not self.drifts and not self.shard_drifts

    def describe(self) -> str:
        """Human-readable report: one line per tenant, one indented line per drift or repair."""
        lines = []
        for t in self.tenants:
            state = "ok" if not t.drifts else f"DRIFT ({len(t.drifts)})"
            state += "" if t.settled else " (leases kept moving: counters and cap not judged)"
            lines.append(f"{t.tenant_id:24} in_flight={t.in_flight} leases={t.leases} cap={t.cap} "
                         f"running={t.running_jobs} queued={t.queued_jobs} waiting={t.waiting_jobs} "
                         f"expired={t.expired_leases}  {state}")
            lines.extend(f"    {d.kind}: {d.detail}" for d in t.drifts)
        if self.cluster is not None:
            busy, held = self.cluster
            state = "DRIFT (slot counter)" if self.shard_drifts else "ok"
            state += "" if self.cluster_settled else " (leases kept moving: not judged)"
            lines.append(f"cluster busy={busy} leases={held}  {state}")
            lines.extend(f"    shard {k}: busy={b} leases={h}" for k, (b, h) in sorted(self.shard_drifts.items()))
        lines.extend(f"  repaired: {r}" for r in self.repairs)
        return "\n".join(lines) if lines else "no tenants"

    def to_json(self) -> str:
        """The report as JSON (``tenants``, ``repairs``, ``clean``)."""
        return json.dumps({"tenants": [asdict(t) for t in self.tenants], "repairs": self.repairs,
                           "cluster": self.cluster, "shard_drifts": {str(k): v for k, v in self.shard_drifts.items()},
                           "cluster_settled": self.cluster_settled, "clean": self.clean}, indent=2, sort_keys=True)


@dataclass
class _Snapshot:
    tenants: dict[str, TenantItem]
    leases: dict[str, list[LeaseItem]]
    jobs_of_leases: dict[str, JobItem | None]
    #: tenant → leases that fenced nothing while live: read again after their job, same token.
    orphans: dict[str, list[LeaseItem]]
    stranded: dict[str, list[JobItem]]
    running: dict[str, int]
    #: tenant → its jobs counted by status and its counters read around the count.
    counted: dict[str, "JobCount | None"] = field(default_factory=dict)
    lost: dict[str, list[JobItem]] = field(default_factory=dict)
    #: tenants whose leases moved during every read: their counters and cap are not judged.
    unsettled: set[str] = field(default_factory=set)


def _read_jobs(job_ids: Iterable[str]) -> dict[str, JobItem | None]:
    ids = list(dict.fromkeys(job_ids))
    found = {job.job_id: job for job in JobItem.batch_get(ids, consistent_read=True)} if ids else {}
    return {job_id: found.get(job_id) for job_id in ids}


def _tenant_and_leases(tenant_id: str) -> tuple[TenantItem | None, list[LeaseItem], bool]:
    """The tenant item and its leases, read between two reads of the tenant item that agree, and
    whether they agreed.

    Every lease transaction adds one to ``lease_moves``, so equal readings on both sides mean no
    lease moved during the scan: the leases and ``in_flight`` are then one state. Up to
    ``Settings.audit_stable_read_tries`` tries; the last is returned, settled or not.
    """

    def tenant() -> TenantItem | None:
        try:
            return TenantItem.get(tenant_id, consistent_read=True)
        except DoesNotExist:
            return None

    def moves(item: TenantItem | None) -> tuple[int | None, int | None]:
        return (None, None) if item is None else (_int(item.in_flight), _int(item.lease_moves))

    before = tenant()
    for _ in range(get_settings().audit_stable_read_tries):
        leases = list(LeaseItem.scan(LeaseItem.tenant_id == tenant_id, consistent_read=True))
        after = tenant()
        if moves(before) == moves(after):
            return after, leases, True
        before = after
    return after, leases, False


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _unchanged(attr, value: int | None):
    """Condition: ``attr`` still reads ``value`` (absent for None)."""
    return attr.does_not_exist() if value is None else attr == value


def _lost_jobs(tenant_id: str, now: float) -> list[JobItem]:
    """The tenant's queued jobs overdue by ``Clocks.lost_message_after_s``, confirmed by consistent
    reads (the index lags)."""
    overdue = [job.job_id for job in sweeper.lost_queued(tenant_id, now=now)]
    return [job for job in _read_jobs(overdue).values()
            if job is not None and job.status == JobStatus.QUEUED.value and job.due_at is not None
            and float(job.due_at) < now - get_clocks().lost_message_after_s]


def _snapshot(tenant_ids: list[str] | None, *, lost_at: float | None = None) -> _Snapshot:
    if tenant_ids is None:
        wanted = {t.tenant_id for t in TenantItem.scan(attributes_to_get=["tenant_id"])}
        wanted |= {lease.tenant_id for lease in LeaseItem.scan(attributes_to_get=["tenant_id"])}
    else:
        wanted = set(tenant_ids)
    tenants: dict[str, TenantItem] = {}
    leases: dict[str, list[LeaseItem]] = {}
    unsettled: set[str] = set()
    for tenant_id in sorted(wanted):
        item, held, settled = _tenant_and_leases(tenant_id)
        if not settled:
            unsettled.add(tenant_id)
        if item is not None:
            tenants[tenant_id] = item
        if held:
            leases[tenant_id] = held
    jobs_of_leases = _read_jobs(lease.job_id for held in leases.values() for lease in held)
    orphans = {tenant_id: _orphans(held, jobs_of_leases) for tenant_id, held in leases.items()}
    stranded: dict[str, list[JobItem]] = defaultdict(list)
    running: dict[str, int] = {}
    for tenant_id in set(tenants) | set(leases):
        candidates = list(JobItem.by_tenant.query(tenant_id, filter_condition=JobItem.status == JobStatus.RUNNING.value))
        running[tenant_id] = len(candidates)
        held_tokens = {lease.job_id: lease.token for lease in leases.get(tenant_id, [])}
        suspects = [job.job_id for job in candidates if held_tokens.get(job.job_id) != job.lease_token]
        for job_id, job in _read_jobs(suspects).items():  # the index lags: confirm each with a consistent read
            if job is None or job.status != JobStatus.RUNNING.value:
                continue
            lease = read_lease(job_id)
            if lease is not None and lease.token == job.lease_token:
                continue
            # Read the job once more: released between the two reads, it is not stranded; running
            # under the same token on both sides of the lease read (tokens are never reused), it is.
            again = _read_jobs([job_id]).get(job_id)
            if again is not None and again.status == JobStatus.RUNNING.value and again.lease_token == job.lease_token:
                stranded[tenant_id].append(job)
    counted = {tenant_id: _count_jobs(tenant_id) for tenant_id in set(tenants) | set(leases)}
    lost = {tenant_id: _lost_jobs(tenant_id, lost_at) for tenant_id in tenants} if lost_at is not None else {}
    return _Snapshot(tenants, leases, jobs_of_leases, orphans, stranded, running, counted, lost, unsettled)


def _orphans(held: list[LeaseItem], jobs: dict[str, JobItem | None]) -> list[LeaseItem]:
    """The leases of ``held`` whose job (read after them) does not run under them, and which are
    still there, under the same token, when read again after the job.

    A lease and its job change in one transaction, and a token is never reused, so a lease seen
    before and after the job read was live when the job was read: a true orphan. A release between
    the lease scan and the job read, which a busy tenant makes often, is not one.
    """
    suspects = [lease for lease in held if not sweeper.runs_under(jobs.get(lease.job_id), lease)]
    return [lease for lease in suspects
            if (again := read_lease(lease.job_id)) is not None and again.token == lease.token]


class JobCount(NamedTuple):
    """A tenant's jobs counted by status, and its counters read around the count."""

    queued_jobs: int
    waiting_jobs: int
    queued: int | None
    waiting: int | None
    occupied: int | None
    in_flight: int | None

    def drifted(self, leases: int) -> bool:
        """Counters that disagree with the jobs, or ``occupied`` ≠ ``leases`` + queued jobs (``leases``
        at the count's moment: the lease scan is another)."""
        queued, waiting_, occupied = (int(v or 0) for v in (self.queued, self.waiting, self.occupied))
        return (queued, waiting_, occupied) != (self.queued_jobs, self.waiting_jobs, leases + self.queued_jobs)


def _count_jobs(tenant_id: str) -> JobCount | None:
    """The tenant's queued and waiting jobs, counted through the sparse indexes (confirmed by
    consistent reads) between two reads of its counters that agree (every status move changes
    one); None if no two reads agreed in ``Settings.audit_stable_read_tries`` tries."""

    def counters() -> tuple[int | None, ...]:
        try:
            item = TenantItem.get(tenant_id, consistent_read=True, attributes_to_get=[
                "tenant_id", "queued", "waiting", "occupied", "in_flight", "lease_moves"])
        except DoesNotExist:
            return None, None, None, None, None
        return tuple(_int(v) for v in (item.queued, item.waiting, item.occupied, item.in_flight, item.lease_moves))

    before = counters()
    for _ in range(get_settings().audit_stable_read_tries):
        ids = {status: [job.job_id for job in index.query(tenant_id, attributes_to_get=["job_id"])]
               for status, index in ((JobStatus.QUEUED, JobItem.by_queued), (JobStatus.WAITING, JobItem.by_waiting))}
        found = _read_jobs(ids[JobStatus.QUEUED] + ids[JobStatus.WAITING])
        queued = sum(1 for j in found.values() if j is not None and j.status == JobStatus.QUEUED.value)
        waiting_ = sum(1 for j in found.values() if j is not None and j.status == JobStatus.WAITING.value)
        after = counters()
        if before == after:  # ``lease_moves`` last: an acquire and a retry's release cancel out in the rest
            return JobCount(queued, waiting_, *after[:4])
        before = after
    return None  # its jobs kept moving: no count to judge by (the next audit tries again)


def _over_cap(leases: list[LeaseItem], cap: int, cap_changed_at: float) -> list[LeaseItem]:
    """Leases acquired (after the last cap change) while ``cap`` or more older leases were live."""
    ordered = sorted(leases, key=lambda lease: float(lease.acquired_at))
    return [lease for rank, lease in enumerate(ordered) if rank >= cap and float(lease.acquired_at) > cap_changed_at]


def _judge(snap: _Snapshot, now: float) -> list[TenantAudit]:
    default_cap = get_settings().default_cap
    out = []
    for tenant_id in sorted(set(snap.tenants) | set(snap.leases)):
        item = snap.tenants.get(tenant_id)
        leases = snap.leases.get(tenant_id, [])
        in_flight = int(item.in_flight or 0) if item is not None else 0
        cap = item.effective_cap(default_cap) if item is not None else default_cap
        audit_ = TenantAudit(tenant_id, in_flight, cap, len(leases), snap.running.get(tenant_id, 0),
                             sum(1 for lease in leases if float(lease.expires_at) < now))
        for lease in snap.orphans.get(tenant_id, []):
            job = snap.jobs_of_leases.get(lease.job_id)
            state = "missing" if job is None else f"{job.status} under token {str(job.lease_token)[:8]}"
            audit_.drifts.append(Drift(tenant_id, "orphan_lease",
                                       f"lease of job {lease.job_id} (token {lease.token[:8]}) fences nothing: job {state}",
                                       lease.job_id))
        for job in snap.stranded.get(tenant_id, []):
            audit_.drifts.append(Drift(tenant_id, "stranded_job",
                                       f"job {job.job_id} is running under token {str(job.lease_token)[:8]} "
                                       "but has no such lease", job.job_id))
        for job in snap.lost.get(tenant_id, []):
            audit_.drifts.append(Drift(tenant_id, "lost_job",
                                       f"job {job.job_id} queued, due at {float(job.due_at):.0f}, never started, "
                                       "and no message visible in its queue", job.job_id))
        audit_.settled = tenant_id not in snap.unsettled
        if audit_.settled and in_flight != len(leases):
            audit_.drifts.append(Drift(tenant_id, "counter", f"in_flight={in_flight} but {len(leases)} live lease(s)"))
        count = snap.counted.get(tenant_id)
        if count is not None:
            audit_.queued, audit_.waiting = int(count.queued or 0), int(count.waiting or 0)
            audit_.queued_jobs, audit_.waiting_jobs = count.queued_jobs, count.waiting_jobs
        # The leases at the count's moment: its in_flight less the counter's drift, which lease moves keep.
        counter_drift = in_flight - len(leases)
        if audit_.settled and count is not None and count.drifted(int(count.in_flight or 0) - counter_drift):
            audit_.drifts.append(Drift(tenant_id, "job_counters",
                                       f"queued={audit_.queued} waiting={audit_.waiting} occupied={count.occupied} "
                                       f"but {count.queued_jobs} queued and {count.waiting_jobs} waiting job(s), "
                                       f"{len(leases)} lease(s)"))
        changed_at = float(item.cap_changed_at or 0) if item is not None else 0.0
        # A tier that borrows may hold up to its burst cap (the cluster's reserve is the acquire's).
        limit = max(cap, int(item.burst_cap)) if item is not None and item.burst_cap is not None else cap
        for lease in _over_cap(leases, limit, changed_at) if audit_.settled else []:
            audit_.drifts.append(Drift(tenant_id, "over_cap",
                                       f"lease of job {lease.job_id} was taken with {cap} or more older leases "
                                       f"live (cap {cap})", lease.job_id))
        out.append(audit_)
    return out


def audit(tenant_ids: Iterable[str] | None = None, *, now: float | None = None,
          backlog: Callable[[], int] | None = None) -> AuditReport:
    """Audit ``tenant_ids`` (default: every tenant with an item or a lease); read-only.

    A drift is kept only if it shows in ``Settings.audit_confirm_snapshots`` snapshots in a row.
    ``backlog()`` → visible messages in the work queue; with it, lost queued jobs are looked for
    (``lost_job``) in every snapshot whose queue shows none.

    Returns:
        An :class:`AuditReport`; ``report.clean`` is False on drift.
    """
    wanted = sorted(set(tenant_ids)) if tenant_ids is not None else None
    confirmed: set | None = None
    tenants: list[TenantAudit] = []
    for _ in range(get_settings().audit_confirm_snapshots):
        t = time.time() if now is None else now
        lost_at = t if backlog is not None and backlog() == 0 else None
        tenants = _judge(_snapshot(wanted, lost_at=lost_at), t)
        keys = {d.key for t in tenants for d in t.drifts}
        confirmed = keys if confirmed is None else confirmed & keys
        if not confirmed:
            break
    for tenant in tenants:
        tenant.drifts = [d for d in tenant.drifts if d.key in (confirmed or set())]
    shards, settled = None, True
    if wanted is None:
        for _ in range(get_settings().audit_confirm_snapshots):
            shards, settled = _cluster_snapshot()
            if settled and all(busy == held for busy, held in shards.values()):
                break
    return AuditReport(tenants, shards=shards, cluster_settled=settled)


def _cluster_snapshot() -> tuple[dict[int, tuple[int, int]], bool]:
    """``{shard: (busy counter, live leases of its jobs)}`` for every shard with either, read
    between two readings of the shards, and whether they agreed: every lease transaction adds one
    to its shard's ``lease_moves``, so agreeing readings mean no lease moved during the scan."""
    shard_count = get_settings().cluster_slot_shards
    shard_of_key = {slot_shard_key(k): k for k in range(shard_count)}

    def busy() -> dict[int, tuple[int, int]]:
        return {shard_of_key[item.key]: (int(item.busy or 0), int(item.lease_moves or 0))
                for item in nodes.slot_shards()}

    before, settled = busy(), False
    for _ in range(get_settings().audit_stable_read_tries):
        held: dict[int, int] = defaultdict(int)
        for lease in LeaseItem.scan(consistent_read=True, attributes_to_get=["job_id"]):
            held[slot_shard_of(lease.job_id, shard_count)] += 1
        after = busy()
        settled, before = before == after, after
        if settled:
            break
    shards = {k: (after[k][0] if k in after else 0, held.get(k, 0)) for k in sorted(set(after) | set(held))}
    return {k: v for k, v in shards.items() if any(v)}, settled


def _repair_cluster(report: AuditReport) -> str | None:
    """Set each drifting shard's ``busy`` to the live leases of its jobs counted, on condition it is
    unchanged since; a note of what was set, or None."""
    notes = []
    for shard, (busy, held) in sorted(report.shard_drifts.items()):
        unchanged = ClusterItem.busy == busy
        if busy == 0:  # read as 0: absent, or written 0
            unchanged = unchanged | ClusterItem.busy.does_not_exist()
        try:
            ClusterItem(slot_shard_key(shard)).update(
                actions=[ClusterItem.busy.set(held), ClusterItem.lease_moves.add(1)], condition=unchanged)
        except UpdateError as exc:
            if classify(exc)[0] in (RETRY, CANCELLED):  # a lease moved meanwhile: the next round
                continue
            raise
        notes.append(f"cluster shard {shard}: busy {busy} → {held}")
    return "; ".join(notes) or None


# --- repair -------------------------------------------------------------------------------------


def _repair_counter(tenant_id: str) -> str | None:
    """Freeze the tenant's acquires, set ``in_flight`` to its live lease count, lift the freeze.

    Returns a note of the fix, or None if the counter was right after all.
    """
    freeze_s = get_settings().audit_repair_freeze_s
    TenantItem(tenant_id).update(actions=[TenantItem.repair_until.set(time.time() + freeze_s)])

    def attempt() -> str | None:
        item, leases, settled = _tenant_and_leases(tenant_id)
        if not settled:  # frozen, only releases move its leases: read again
            raise Retryable(("unsettled",))
        observed, moves = (None, None) if item is None else (_int(item.in_flight), _int(item.lease_moves))
        try:  # no lease moved since the settled read (old workers' releases move in_flight only)
            TenantItem(tenant_id).update(
                actions=[TenantItem.in_flight.set(len(leases)), TenantItem.lease_moves.add(1),
                         TenantItem.repair_until.remove(), TenantItem.updated_at.set(time.time())],
                condition=_unchanged(TenantItem.in_flight, observed) & _unchanged(TenantItem.lease_moves, moves))
        except UpdateError as exc:
            kind, codes = classify(exc)
            if kind in (RETRY, CANCELLED):  # a lease was released meanwhile: read again
                raise Retryable(codes) from exc
            raise
        return None if observed == len(leases) else f"{tenant_id}: in_flight {observed} → {len(leases)}"

    try:
        return with_conflict_retries(attempt, what=f"repair in_flight of tenant {tenant_id}")
    finally:  # lifted by the fix itself; this covers a fix that never committed
        TenantItem(tenant_id).update(actions=[TenantItem.repair_until.remove()])


def _repair_stranded(job: JobItem, publish: waiting.Publish) -> str | None:
    """Put a running job that has no lease back to ``queued`` (re-published) or ``failed``."""
    token = job.lease_token
    requeue = job.attempts_left
    reason = f"stranded: running under token {str(token)[:8]} with no lease (imposition audit --repair)"
    if requeue:  # first: an early copy is deferred until this commits, a spare one dropped
        publish(job.tenant_id, job.job_id, after_attempt=int(job.attempts or 0))
        actions = requeue_actions(job.tenant_id, time.time())
    else:
        now = time.time()
        actions = [JobItem.status.set(JobStatus.FAILED.value), JobItem.finished_at.set(now),
                   JobItem.lease_token.remove(), *outbox.intent_actions(now)]
    actions += [JobItem.error.set(reason), JobItem.error_code.set("stranded")]

    def attempt() -> bool:
        try:
            with TransactWrite(connection=tx_connection(), client_request_token=new_token()) as tx:
                tx.condition_check(LeaseItem, job.job_id,
                                   condition=LeaseItem.job_id.does_not_exist() | (LeaseItem.token != token))
                tx.update(JobItem(job.job_id), actions=actions,
                          condition=(JobItem.status == JobStatus.RUNNING.value) & (JobItem.lease_token == token))
                if requeue:  # no lease to free: the job takes a place again
                    tx.update(TenantItem(job.tenant_id),
                              actions=[*TenantItem.counted(TenantItem.queued, 1), TenantItem.occupied.add(1)])
        except TransactWriteError as exc:
            kind, codes = classify(exc)
            if kind == RETRY:
                raise Retryable(codes) from exc
            if kind == CANCELLED:
                return False
            raise
        return True

    if not with_conflict_retries(attempt, what=f"repair stranded job {job.job_id}"):
        return None
    return f"{job.tenant_id}: job {job.job_id} {'re-queued' if requeue else 'failed'} (was stranded)"


def repair(tenant_ids: Iterable[str] | None = None, *, publish: waiting.Publish,
           backlog: Callable[[], int] | None = None) -> AuditReport:
    """Audit, fix what can be fixed safely (module docstring), and audit again.

    Every fix is conditional on the state it read, so under heavy traffic a fix may be refused
    repeatedly; it is then tried again in the next round, and left in the report after
    ``Settings.audit_repair_rounds`` rounds. Safety never depends on how busy the tenant is. A
    tenant whose leases moved through every read (not ``settled``) has its ``in_flight`` recounted
    once, with its acquires frozen, as for a counter drift.

    Args:
        tenant_ids: tenants to look at (default: all).
        publish: ``publish(tenant_id, job_id, after_attempt=n)`` re-publishes a job
            (``tasks.messages.publish_job``).
        backlog: as :func:`audit` (lost queued jobs are re-published).

    Returns:
        The audit after the repairs, with ``repairs`` listing each fix made. Drift that remains
        (``over_cap``, or a state that kept changing) stays in the report.
    """
    wanted = list(tenant_ids) if tenant_ids is not None else None
    done: list[str] = []
    report = audit(wanted, backlog=backlog)
    recounted: set[str] = set()
    for _ in range(get_settings().audit_repair_rounds):
        fixable = [d for d in report.drifts if d.kind != "over_cap"]
        # Leases that kept moving hide a tenant's counters from reads: recount them once, acquires frozen.
        unsettled = {t.tenant_id for t in report.tenants if not t.settled} - recounted
        recounted |= unsettled
        fixable += [Drift(tenant_id, "counter", "not judged: leases kept moving") for tenant_id in sorted(unsettled)]
        cluster_note = _repair_cluster(report)
        if cluster_note:
            log.warning("audit repair: %s", cluster_note)
            done.append(cluster_note)
        if not fixable and not cluster_note:
            break
        for drift in sorted(fixable, key=lambda d: DRIFT_KINDS.index(d.kind)):
            try:
                note = _repair_one(drift, publish)
            except LeaseContention as exc:  # kept changing under us: next round
                log.info("audit repair of %s deferred: %s", drift.kind, exc)
                continue
            if note:
                log.warning("audit repair: %s", note)
                done.append(note)
        report = audit(wanted, backlog=backlog)
    report.repairs = done
    return report


def _repair_job_counters(tenant_id: str) -> str | None:
    """Set the tenant's ``queued``, ``waiting`` and ``occupied`` to its jobs counted (module
    docstring), on condition none of its counters changed since."""

    def attempt() -> str | None:  # after the in_flight repair (DRIFT_KINDS order): in_flight is the lease count
        count, again = _count_jobs(tenant_id), _count_jobs(tenant_id)
        if count is None or count != again:  # jobs moved between the counts: never write from one
            raise Retryable(("unstable",))
        if not count.drifted(int(count.in_flight or 0)):
            return None
        occupied = int(count.in_flight or 0) + count.queued_jobs
        condition = (_unchanged(TenantItem.queued, count.queued) & _unchanged(TenantItem.waiting, count.waiting)
                     & _unchanged(TenantItem.occupied, count.occupied)
                     & _unchanged(TenantItem.in_flight, count.in_flight))
        try:
            TenantItem(tenant_id).update(
                actions=[TenantItem.queued.set(count.queued_jobs), TenantItem.waiting.set(count.waiting_jobs),
                         TenantItem.occupied.set(occupied), TenantItem.updated_at.set(time.time())],
                condition=condition)
        except UpdateError as exc:
            kind, codes = classify(exc)
            if kind in (RETRY, CANCELLED):  # a job moved meanwhile: count again
                raise Retryable(codes) from exc
            raise
        return (f"{tenant_id}: queued {count.queued} → {count.queued_jobs}, waiting {count.waiting} → "
                f"{count.waiting_jobs}, occupied {count.occupied} → {occupied}")

    return with_conflict_retries(attempt, what=f"repair job counters of tenant {tenant_id}")


def _repair_one(drift: Drift, publish: waiting.Publish) -> str | None:
    """Apply the fix of one drift (module docstring), then wake the tenant's waiting jobs; a note of
    what was done, or None."""
    note = None
    try:
        note = _repair_drift(drift, publish)
    finally:
        if note or drift.kind == "counter":  # a recount froze acquires: a job parked meanwhile may start
            waiting.wake(drift.tenant_id, publish=publish, reason="repair")
    return note


def _repair_drift(drift: Drift, publish: waiting.Publish) -> str | None:
    if drift.kind == "job_counters":
        return _repair_job_counters(drift.tenant_id)
    if drift.kind == "counter":
        return _repair_counter(drift.tenant_id)
    job_id = drift.job_id
    if job_id is None:  # the other kinds are a job's drifts (over_cap is never repaired)
        return None
    if drift.kind == "orphan_lease":
        lease = read_lease(job_id)
        if lease is not None and sweeper.remove_orphan(lease, expired_before=None):
            return f"{drift.tenant_id}: removed orphan lease of job {job_id}"
    elif drift.kind == "stranded_job":
        job = _read_jobs([job_id]).get(job_id)
        if job is not None and job.status == JobStatus.RUNNING.value:
            return _repair_stranded(job, publish)
    elif drift.kind == "lost_job":
        job = _read_jobs([job_id]).get(job_id)
        if job is not None and job.status == JobStatus.QUEUED.value:
            sweeper.republish_lost(job, publish=publish, now=time.time())
            return f"{drift.tenant_id}: re-published lost queued job {job_id}"
    return None
