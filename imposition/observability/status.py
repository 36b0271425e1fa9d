"""``imposition status``: the fairness controls on one screen, read straight from the stores.

It reads DynamoDB (tenants, leases, jobs), SQS (queue attributes), CloudWatch (age of the oldest
message, where it exists) and the recent-event counts in Redis; it needs no worker, no Prometheus
and no Flower. Over the last ``Settings.status_window_s`` seconds (1 h by default):

per tenant   cap (its override or the default), in flight (leases held now), queued (published,
             not started) and waiting (parked until a slot of its tenant frees: the hand-off); cap defers (parks) and lease recoveries,
             p50/p95 queue wait of its jobs submitted in the window (started ones: start −
             submit; waiting ones: so far), the oldest waiting job, failures;
per queue    visible, in flight, delayed, oldest age (CloudWatch; "n/a" without data), the
             depth of its dead-letter queue;
cluster      slots busy (the slot counter) of the live nodes' slots (the slot registry), or of
             ``capacity_nodes × slots_per_node`` while no node is registered; the live nodes;
             per tenant, leases borrowed above its cap.

Every tenant item and the slot counter come from one ``TransactGetItems``
(:func:`leases.tenants.read_tenants_and_slots`); where they still disagree (counter drift, or
over 99 tenants) the screen says so (:class:`Consistency`). Why, and what it adds to Flower:
docs/design.md, "`status` reads tenants and the slot counter in one `TransactGetItems`".
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import click

from leases import nodes
from leases.models import JobStatus, TenantItem
from leases.tenants import TRANSACT_GET_MAX_ITEMS, read_tenants_and_slots
from imposition.observability import recent
from imposition.observability.history import jobs_submitted, percentile, wait_s
from imposition.observability.queues import QueueDepth, read_queues
from imposition.common.settings import get_settings


@dataclass(frozen=True)
class TenantStatus:
    """One tenant's line (waits in seconds, None when there is nothing to measure)."""

    tenant_id: str
    cap: int
    in_flight: int
    queued: int
    waiting: int
    cap_defers: int
    lease_recoveries: int
    wait_p50_s: float | None
    wait_p95_s: float | None
    oldest_waiting_s: float | None
    failed: int
    submitted: int
    #: Leases held above its cap (borrowing; 0 without a burst cap).
    borrowed: int = 0
    burst_cap: int | None = None


@dataclass(frozen=True)
class QueueStatus:
    """One work queue and its dead-letter queue's depth."""

    queue: str
    visible: int
    in_flight: int
    delayed: int
    oldest_age_s: float | None
    dead_letter_queue: str
    dead_letters: int


@dataclass(frozen=True)
class ClusterStatus:
    """Slots busy (live lease items) out of the licensed total."""

    slots_busy: int
    slots_total: int
    #: ``{node name: slots}`` of the live worker nodes (the slot registry).
    nodes: dict = field(default_factory=dict)

    @property
    def utilisation(self) -> float:
        """``slots_busy / slots_total`` (0–1, above 1 only if a cap or the node count is wrong)."""
        return self.slots_busy / self.slots_total if self.slots_total else 0.0


@dataclass(frozen=True)
class Consistency:
    """Whether the tenants' counters and the cluster's slot counter agree.

    Attributes:
        reads: ``TransactGetItems`` calls the tenants and the counter took (1: one moment).
        tenants_in_flight: the sum of the tenants' ``in_flight``.
        slots_busy: the counter's ``busy``.
    """

    reads: int = 1
    tenants_in_flight: int = 0
    slots_busy: int = 0

    @property
    def agree(self) -> bool:
        """True when one read saw the tenants' in flight add up to the busy slots."""
        return self.reads == 1 and self.tenants_in_flight == self.slots_busy

    def note(self) -> str | None:
        """What the screen says when they do not agree, else None."""
        if self.reads > 1:
            per_read = TRANSACT_GET_MAX_ITEMS - get_settings().cluster_slot_shards
            return (f"read in {self.reads} transactions (more than {per_read} tenants): tenants "
                    f"in flight {self.tenants_in_flight}, slots busy {self.slots_busy} may be moments apart")
        if self.tenants_in_flight != self.slots_busy:
            return (f"sources disagree in one read: tenants in flight add up to {self.tenants_in_flight}, "
                    f"the slot counter says {self.slots_busy} busy; run `imposition audit`")
        return None


@dataclass(frozen=True)
class Status:
    """Everything ``imposition status`` shows, taken at ``taken_at`` (epoch s) over ``window_s``."""

    taken_at: float
    window_s: int
    tenants: list[TenantStatus] = field(default_factory=list)
    queues: list[QueueStatus] = field(default_factory=list)
    cluster: ClusterStatus = ClusterStatus(0, 0)
    consistency: Consistency = Consistency()

    def as_dict(self) -> dict:
        """JSON-ready form (``--json``)."""
        out = asdict(self)
        out["cluster"]["utilisation"] = self.cluster.utilisation
        out["consistency"].update(agree=self.consistency.agree, note=self.consistency.note())
        return out


def tenant_status(item: TenantItem, *, now: float, window_s: int, default_cap: int) -> TenantStatus:
    """One tenant's status from its item, its jobs submitted in the window, and the recent counts."""
    jobs = list(jobs_submitted(item.tenant_id, now - window_s, now + 1))
    waits = [w for w in (wait_s(j, now) for j in jobs) if w is not None]
    queued = [j for j in jobs if JobStatus(j.status).is_pending]
    return TenantStatus(
        tenant_id=item.tenant_id,
        cap=item.effective_cap(default_cap),
        in_flight=int(item.in_flight or 0),
        queued=int(item.queued or 0),
        waiting=int(item.waiting or 0),
        cap_defers=recent.window_count("cap_defer", item.tenant_id, window_s=window_s, now=now),
        lease_recoveries=recent.window_count("lease_recovered", item.tenant_id, window_s=window_s, now=now),
        wait_p50_s=percentile(waits, 0.50),
        wait_p95_s=percentile(waits, 0.95),
        oldest_waiting_s=max((now - float(j.submitted_at) for j in queued), default=None),
        failed=sum(1 for j in jobs if j.status == JobStatus.FAILED.value),
        submitted=len(jobs),
        borrowed=max(0, int(item.in_flight or 0) - item.effective_cap(default_cap)),
        burst_cap=None if item.burst_cap is None else int(item.burst_cap),
    )


def queue_status(depths: dict[str, QueueDepth]) -> list[QueueStatus]:
    """Each work queue with its dead-letter queue's depth (visible + in flight + delayed)."""
    s = get_settings()
    out = []
    for queue in s.work_queues:
        d, dlq = depths[queue], depths[s.dead_letter_queue(queue)]
        out.append(QueueStatus(queue, d.visible, d.in_flight, d.delayed, d.oldest_age_s, dlq.queue,
                               dlq.visible + dlq.in_flight + dlq.delayed))
    return out


def collect(now: float | None = None) -> Status:
    """Read every store once and build the :class:`Status`.

    Raises:
        botocore.exceptions.ClientError, pynamodb.exceptions.PynamoDBException: AWS refused a read
            (missing queue or table: run ``imposition provision``).
        redis.RedisError: the events Redis (recent counts) did not answer.
    """
    s = get_settings()
    t = time.time() if now is None else now
    ids = [item.tenant_id for item in TenantItem.scan(attributes_to_get=["tenant_id"])]
    snapshot = read_tenants_and_slots(ids)  # one moment: see the module docstring
    tenants = sorted(snapshot.tenants, key=lambda i: i.tenant_id)
    busy = int(snapshot.slots.busy or 0) if snapshot.slots is not None else 0
    live = nodes.live_nodes(now=t)
    return Status(
        taken_at=t,
        window_s=s.status_window_s,
        tenants=[tenant_status(i, now=t, window_s=s.status_window_s, default_cap=s.default_cap) for i in tenants],
        queues=queue_status(read_queues()),
        cluster=ClusterStatus(busy, nodes.slots_total(live), live),
        consistency=Consistency(snapshot.reads, sum(int(i.in_flight or 0) for i in tenants), busy),
    )


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}s"


def render(status: Status) -> str:
    """The one-screen text form."""
    minutes = status.window_s / 60
    lines = [f"tenants (jobs submitted, defers and recoveries in the last {minutes:g} min)"]
    head = (f"  {'tenant':14} {'cap':>4} {'in flight':>9} {'queued':>7} {'waiting':>8} {'cap defers':>10} {'recovered':>9} "
            f"{'wait p50':>9} {'wait p95':>9} {'oldest wait':>11} {'failed':>6} {'submitted':>9}")
    lines.append(head)
    for t in status.tenants:
        lines.append(f"  {t.tenant_id:14} {t.cap:>4} {t.in_flight:>9} {t.queued:>7} {t.waiting:>8} {t.cap_defers:>10} "
                     f"{t.lease_recoveries:>9} {_s(t.wait_p50_s):>9} {_s(t.wait_p95_s):>9} "
                     f"{_s(t.oldest_waiting_s):>11} {t.failed:>6} {t.submitted:>9}")
    if not status.tenants:
        lines.append("  (no tenants yet)")
    lines.append("")
    lines.append("queues")
    lines.append(f"  {'queue':16} {'visible':>8} {'in flight':>9} {'delayed':>8} {'oldest age':>10} {'DLQ depth':>9}")
    for q in status.queues:
        age = "n/a" if q.oldest_age_s is None else f"{q.oldest_age_s:.0f}s"
        lines.append(f"  {q.queue:16} {q.visible:>8} {q.in_flight:>9} {q.delayed:>8} {age:>10} {q.dead_letters:>9}")
    if any(q.oldest_age_s is None for q in status.queues):
        lines.append("  (oldest age: CloudWatch AWS/SQS ApproximateAgeOfOldestMessage; n/a = no datapoint)")
    c = status.cluster
    lines.append("")
    lines.append(f"cluster: {c.slots_busy} of {c.slots_total} slots busy ({c.utilisation:.0%})")
    note = status.consistency.note()
    lines.append(f"  WARNING: {note}" if note else "  (tenants and slots read at one moment: they agree)")
    lines.append("  live nodes: " + (", ".join(f"{n} ({k} slots)" for n, k in sorted(c.nodes.items()))
                                      or "none registered (slots assumed: capacity_nodes × slots_per_node)"))
    borrowing = [t for t in status.tenants if t.borrowed]
    if borrowing:
        lines.append("  borrowed: " + ", ".join(f"{t.tenant_id} {t.borrowed} (burst {t.burst_cap})" for t in borrowing))
    return "\n".join(lines)


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the screen.")
def status_command(as_json: bool) -> None:
    """Per tenant, per queue and cluster state of the fairness controls (no worker needed)."""
    status = collect()
    click.echo(json.dumps(status.as_dict(), indent=2, sort_keys=True) if as_json else render(status))
