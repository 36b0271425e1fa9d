"""PynamoDB models of the service's tables (docs/design.md §5)::

    table (setting)   model            one item per                  indexes
    tenants_table     TenantItem       tenant                        by-pending (sparse)
    leases_table      LeaseItem        held slot, keyed by job id    by-expiry
    jobs_table        JobItem          job                           by-tenant; by-waiting, by-queued,
                                                                     by-webhook-due (sparse)
    cluster_table     ClusterItem      slot counter, live node       nodes-by-expiry (sparse)
    tokens_table      TokenClaimItem   claimed idempotency token     (``expires_at``: DynamoDB TTL)

Each model's docstring says what its items hold and how their indexes are used. Times are UNIX
epoch seconds (float) everywhere, named ``*_at``.

Table names and the region come from :mod:`imposition.common.settings` when a model first talks to DynamoDB
(never at import; :class:`_FromSettings`); the endpoint follows the AWS SDK's environment
(``AWS_ENDPOINT_URL_DYNAMODB`` / ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from pynamodb.attributes import (
    BinaryAttribute,
    BooleanAttribute,
    JSONAttribute,
    ListAttribute,
    NumberAttribute,
    NumberSetAttribute,
    UnicodeAttribute,
)
from pynamodb.expressions.update import Action
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from imposition.common.settings import get_settings

#: The one partition value of the lease expiry index (see module docstring).
LEASE_EXPIRY_PARTITION = "lease"


class JobStatus(StrEnum):
    """Lifecycle of a job item."""

    QUEUED = "queued"
    #: Parked: the tenant was at its cap; brought back by a hand-off (or the sweeper), no message.
    WAITING = "waiting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_pending(self) -> bool:
        """True for ``queued`` and ``waiting``: the job has not started (its wait still grows)."""
        return self in (JobStatus.QUEUED, JobStatus.WAITING)

    @property
    def is_final(self) -> bool:
        """True for ``succeeded`` and ``failed``: no message may run the job again."""
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED)


class _FromSettings:
    """A ``Meta`` attribute read from the current settings each time PynamoDB reads it (so a
    process binds its table names when it first uses a model, and after ``get_settings.cache_clear()``
    and :func:`reset_connections` a model follows the new settings)."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __get__(self, instance: object, owner: type | None = None) -> str:
        return getattr(get_settings(), self.field)


class _Meta:
    # region: set to _FromSettings("aws_region") below, once PynamoDB's metaclass has run (it reads
    # Meta.region while creating each model class, which would read the settings at import)
    billing_mode = "PAY_PER_REQUEST"


#: The one partition value of the tenants' pending-work index.
PENDING_PARTITION = "pending"


class PendingTenantsIndex(GlobalSecondaryIndex["TenantItem"]):
    """Tenants that may have queued or waiting jobs (sparse: ``pending_partition`` is set by every
    transaction that queues or parks a job, and removed by the sweeper once both counters are 0)."""

    class Meta:
        index_name = "by-pending"
        projection = AllProjection()

    pending_partition = UnicodeAttribute(hash_key=True)
    tenant_id = UnicodeAttribute(range_key=True)


class TenantItem(Model):
    """A tenant's fairness state and configuration: ``in_flight`` (leases held now), optional
    ``cap`` (tier override of ``Settings.default_cap``), the job counters, admission overrides,
    webhook URL and secret."""

    class Meta(_Meta):
        table_name = _FromSettings("tenants_table")

    tenant_id = UnicodeAttribute(hash_key=True)
    in_flight = NumberAttribute(default=0)
    #: Changes of ``in_flight`` so far; it only grows (:meth:`leases_add`). Equal readings around a
    #: scan of the leases mean no lease moved during it, even an acquire and a release that cancel
    #: out in ``in_flight`` (:mod:`leases.audit`).
    lease_moves = NumberAttribute(null=True)
    #: Jobs of this tenant in status ``queued`` (a message exists or is due) and ``waiting``
    #: (parked, no message); kept exact by the same transactions that change a job's status.
    queued = NumberAttribute(null=True)
    waiting = NumberAttribute(null=True)
    #: ``in_flight + queued``: jobs running or on their way to a slot. Kept by the same transactions
    #: (an acquire leaves it, a release frees one place, a wake takes one), so a wake can be
    #: conditional on ``occupied < cap`` (DynamoDB conditions cannot add two attributes).
    occupied = NumberAttribute(null=True)
    pending_partition = UnicodeAttribute(null=True)
    by_pending = PendingTenantsIndex()
    #: Tier override of ``Settings.default_cap``; absent means the default.
    cap = NumberAttribute(null=True)
    #: Borrowing (opt-in per tier): leases it may hold while the cluster has idle slots beyond its
    #: reserve (``ClusterItem.borrowable``); absent means no borrowing (burst = cap).
    burst_cap = NumberAttribute(null=True)
    rate_limit_per_min = NumberAttribute(null=True)
    admission_in_flight_cap = NumberAttribute(null=True)
    #: Override of ``Settings.idempotency_ttl_s`` (admission); absent means the default.
    idempotency_ttl_s = NumberAttribute(null=True)
    webhook_url = UnicodeAttribute(null=True)
    #: The webhook signing secret encrypted with KMS under the tenant id as encryption context
    #: (:mod:`imposition.webhooks.secrets`); readable only with ``kms:Decrypt`` on the key.
    webhook_secret_ciphertext = BinaryAttribute(null=True, legacy_encoding=False)
    #: Legacy: a secret stored in the clear before encryption; read with a warning until
    #: ``imposition tenant encrypt-webhook-secrets`` replaces it by ``webhook_secret_ciphertext``.
    webhook_secret = UnicodeAttribute(null=True)
    updated_at = NumberAttribute(null=True)
    #: When the cap override last changed (epoch s): leases acquired before it may exceed a lowered
    #: cap legitimately, so :mod:`leases.audit` holds only later leases to the current cap.
    cap_changed_at = NumberAttribute(null=True)
    #: While set and in the future (epoch s), no lease of this tenant is acquired: ``imposition
    #: audit --repair`` is recounting ``in_flight`` (the lease set may then only shrink).
    repair_until = NumberAttribute(null=True)

    @classmethod
    def counted(cls, counter: "NumberAttribute", delta: int) -> list[Action]:
        """Update actions: ``counter += delta`` and, for a job queued or parked, the pending mark."""
        actions: list[Action] = [counter.add(delta)]
        if delta > 0:
            actions.append(cls.pending_partition.set(PENDING_PARTITION))
        return actions

    @classmethod
    def leases_add(cls, delta: int) -> list[Action]:
        """Update actions of a transaction that takes (``delta`` 1) or frees (-1) a lease:
        ``in_flight += delta`` (0 when absent) and one more ``lease_moves``."""
        return [cls.in_flight.set((cls.in_flight | 0) + delta), cls.lease_moves.add(1)]

    def effective_cap(self, default_cap: int) -> int:
        """The cap this tenant's lease transactions enforce (override or default)."""
        return int(self.cap) if self.cap is not None else default_cap


class LeaseExpiryIndex(GlobalSecondaryIndex["LeaseItem"]):
    """Leases by expiry: ``expiry_partition = 'lease' AND expires_at < now``."""

    class Meta:
        index_name = "by-expiry"
        projection = AllProjection()

    expiry_partition = UnicodeAttribute(hash_key=True)
    expires_at = NumberAttribute(range_key=True)


class LeaseItem(Model):
    """One held slot: the right of ``worker`` to run ``job_id`` until ``expires_at``.

    Keyed by job id, so a job can never hold two leases. :class:`LeaseExpiryIndex` (partition
    ``expiry_partition``, sort ``expires_at``) lets the sweeper query expired leases without a scan;
    the table holds at most (nodes × slots) items, so one partition value is enough.
    """

    class Meta(_Meta):
        table_name = _FromSettings("leases_table")

    job_id = UnicodeAttribute(hash_key=True)
    tenant_id = UnicodeAttribute()
    worker = UnicodeAttribute()
    #: Fencing token: every renewal, release and job commit is conditional on it.
    token = UnicodeAttribute()
    #: True for a lease taken above the tenant's cap (borrowing, up to its burst cap).
    borrowed = BooleanAttribute(null=True)
    acquired_at = NumberAttribute()
    heartbeat_at = NumberAttribute()
    expires_at = NumberAttribute()
    expiry_partition = UnicodeAttribute(default=LEASE_EXPIRY_PARTITION)
    by_expiry = LeaseExpiryIndex()


class JobsByTenantIndex(GlobalSecondaryIndex["JobItem"]):
    """Jobs of one tenant ordered by submission time."""

    class Meta:
        index_name = "by-tenant"
        projection = AllProjection()

    tenant_id = UnicodeAttribute(hash_key=True)
    submitted_at = NumberAttribute(range_key=True)


class WaitingJobsIndex(GlobalSecondaryIndex["JobItem"]):
    """Parked jobs of one tenant, oldest submission first (sparse: only ``waiting`` jobs have
    ``waiting_tenant``)."""

    class Meta:
        index_name = "by-waiting"
        projection = AllProjection()

    waiting_tenant = UnicodeAttribute(hash_key=True)
    submitted_at = NumberAttribute(range_key=True)


class QueuedJobsIndex(GlobalSecondaryIndex["JobItem"]):
    """Queued jobs of one tenant, oldest submission first (sparse: only ``queued`` jobs have
    ``queued_tenant``)."""

    class Meta:
        index_name = "by-queued"
        projection = AllProjection()

    queued_tenant = UnicodeAttribute(hash_key=True)
    submitted_at = NumberAttribute(range_key=True)


class WebhookOutboxIndex(GlobalSecondaryIndex["JobItem"]):
    """Final jobs whose webhook is not settled yet, by when the outbox drain may send a round
    (sparse: only they have ``outbox_partition``; :mod:`leases.outbox`).

    Keys only (``job_id``, ``outbox_partition``, ``webhook_due_at``): the drain reads each job it
    acts on anyway, and every item of this index shares one partition, whose 1,000 write units a
    second an ``ALL`` projection spent on copies of whole job items (docs/deploy.md, section 9).
    """

    class Meta:
        index_name = "by-webhook-due"
        projection = KeysOnlyProjection()

    outbox_partition = UnicodeAttribute(hash_key=True)
    webhook_due_at = NumberAttribute(range_key=True)


class JobItem(Model):
    """One imposition job and its whole history.

    Status ``queued → running → succeeded | failed``, ``queued ⇄ waiting`` while its tenant is at
    its cap, back to ``queued`` on a retry or a reclaim; attempts and budget, layout, S3 keys,
    timestamps, defer count, error. :class:`JobsByTenantIndex` (partition ``tenant_id``, sort
    ``submitted_at``) serves per-tenant reports; two sparse indexes hold only the jobs of one
    status, per tenant, oldest submission first: :class:`WaitingJobsIndex` (``waiting``: the
    hand-off's FIFO) and :class:`QueuedJobsIndex` (``queued``: the sweeper's lost-message check); a
    third, :class:`WebhookOutboxIndex`, holds the final jobs whose webhook is not settled (the outbox).
    """

    class Meta(_Meta):
        table_name = _FromSettings("jobs_table")

    job_id = UnicodeAttribute(hash_key=True)
    tenant_id = UnicodeAttribute()
    token = UnicodeAttribute()
    status = UnicodeAttribute(default=JobStatus.QUEUED.value)
    attempts = NumberAttribute(default=0)
    max_attempts = NumberAttribute()
    #: Attempt numbers the infrastructure cost: the lease was lost because its holder could not reach
    #: DynamoDB (reported by the holder: ``infra_lost``), or an AWS endpoint or the network failed the
    #: run (``infra_error``); they do not count against ``max_attempts`` (:attr:`charged_attempts`).
    #: A set, so a report written twice counts once.
    infra_lost_attempts = NumberSetAttribute(null=True)
    #: How each attempt that lost its lease ended, oldest first: ``[{"attempt", "cause", "at",
    #: "detail", "token"}, …]`` with cause ``infra_lost`` (its holder, alive, could not reach
    #: DynamoDB: not charged), ``infra_error`` (the run failed on an AWS endpoint or the network, not
    #: on the job: not charged) or ``holder_vanished`` (the sweeper reclaimed it with no such report:
    #: a crash, SIGKILL, OOM, a stopped process; charged). An attempt with both was reported late:
    #: the report decides. A job's own failures are ``error``/``error_code``, charged.
    lost_attempts: ListAttribute[dict[str, Any]] = ListAttribute(null=True)
    layout = JSONAttribute()
    input_key = UnicodeAttribute()
    #: The name of the file the tenant sent (``submit()``: the local file's name; ``submit_job``: its
    #: ``file_name``, else the input key's last segment), for ``imposition jobs list --file``; the
    #: engine's errors and warnings name it. Absent on jobs submitted before it existed.
    file_name = UnicodeAttribute(null=True)
    output_key = UnicodeAttribute(null=True)
    submitted_at = NumberAttribute()
    first_received_at = NumberAttribute(null=True)
    started_at = NumberAttribute(null=True)
    finished_at = NumberAttribute(null=True)
    defer_count = NumberAttribute(default=0)
    #: Set to ``tenant_id`` exactly while the job is ``waiting`` / ``queued`` (the sparse indexes).
    waiting_tenant = UnicodeAttribute(null=True)
    queued_tenant = UnicodeAttribute(null=True)
    #: When the job was last parked, and last woken by a hand-off (epoch s).
    parked_at = NumberAttribute(null=True)
    woken_at = NumberAttribute(null=True)
    #: Who last woke it: ``release`` (a hand-off), ``borrow`` (an idle slot offered to a borrowing
    #: tier), ``door``, ``sweeper`` (the safety net), ``cap_change``,
    #: ``repair`` (``imposition audit --repair``).
    woken_by = UnicodeAttribute(null=True)
    #: While ``queued``: when its latest message becomes visible in SQS (publish time + delay, epoch s).
    #: A queued job still not started ``Clocks.lost_message_after_s`` after it, while its queue shows
    #: no visible message, is re-published by the sweeper.
    due_at = NumberAttribute(null=True)
    #: Fencing token of the lease the job runs under now (absent while queued).
    lease_token = UnicodeAttribute(null=True)
    #: Id of the transaction that last ended a lease on this job (release, commit, fail, reclaim): a
    #: writer whose transaction timed out reads it back to learn whether its write applied.
    release_id = UnicodeAttribute(null=True)
    worker = UnicodeAttribute(null=True)
    error = UnicodeAttribute(null=True)
    error_code = UnicodeAttribute(null=True)
    sheets = NumberAttribute(null=True)
    sides = NumberAttribute(null=True)
    #: The engine's typed warnings of a succeeded job: ``[{"code", "message"}, …]`` (departures from
    #: the layout: scaled to fit, marks, bleed or slug not drawn whole, a repaired input).
    warnings = JSONAttribute(null=True)
    #: S3 keys of a succeeded job's PNG previews, one per side in order
    #: (``tenants/<tenant>/jobs/<job>/preview-<n>.png``); empty when none were made.
    preview_keys = JSONAttribute(null=True)
    #: S3 key of a succeeded job's JDF Layout (``tenants/<tenant>/jobs/<job>/plate.jdf``); None when
    #: the engine writes none (pdfToolbox).
    jdf_key = UnicodeAttribute(null=True)
    #: Webhook delivery (package ``webhooks``): ``pending`` (written with the final status: the outbox)
    #: → ``retrying`` → ``delivered`` | ``gave_up``, or ``no_endpoint`` (the tenant has no webhook URL);
    #: HTTP attempts so far, last error, when delivered.
    webhook_status = UnicodeAttribute(null=True)
    webhook_attempts = NumberAttribute(null=True)
    webhook_error = UnicodeAttribute(null=True)
    webhook_delivered_at = NumberAttribute(null=True)
    #: The webhook outbox (:mod:`leases.outbox`): set by the transaction that writes the final status,
    #: removed when the event is settled (delivered, gave up, no endpoint). ``webhook_due_at``: when the
    #: drain may send a round if nothing settled it by then; ``webhook_drained_at``: the drain's last round.
    outbox_partition = UnicodeAttribute(null=True)
    webhook_due_at = NumberAttribute(null=True)
    webhook_drained_at = NumberAttribute(null=True)
    #: Operator retries of a failed job (``imposition job retry``, :mod:`leases.lifecycle`); absent
    #: means never retried. Also tells the webhook event of each run apart (its event id).
    retries = NumberAttribute(null=True)
    #: The earlier runs of a retried job, oldest first: ``[{"retried_at", "attempts", "max_attempts",
    #: "error_code", "error", "finished_at"}, …]`` (times epoch s), at most
    #: ``Settings.job_history_limit`` entries (the oldest are dropped).
    history = JSONAttribute(null=True)
    #: Epoch seconds (integer) at which DynamoDB's TTL deletes the item (:data:`JOB_TTL_ATTRIBUTE`):
    #: set by every final write (with the outbox intent, :func:`leases.outbox.intent_actions`) to its
    #: time + ``Settings.job_retention_days``; absent while the job is not final.
    expires_at = NumberAttribute(null=True)
    by_tenant = JobsByTenantIndex()
    by_waiting = WaitingJobsIndex()
    by_queued = QueuedJobsIndex()
    by_webhook_due = WebhookOutboxIndex()

    @property
    def charged_attempts(self) -> int:
        """Attempts that count against ``max_attempts``: those started, less those lost to the
        infrastructure (:attr:`infra_lost_attempts`)."""
        return int(self.attempts or 0) - len(self.infra_lost_attempts or ())

    @property
    def attempts_left(self) -> bool:
        """True while another attempt is within the budget (``charged_attempts < max_attempts``)."""
        return self.charged_attempts < int(self.max_attempts)

    @property
    def job_status(self) -> JobStatus:
        """``status`` as a :class:`JobStatus`."""
        return JobStatus(self.status)


#: The key of the cluster's slot counter in the cluster table: shard 0, which also holds ``total``
#: and ``borrowers`` (the key of the unsharded counter, so an existing table keeps them).
CLUSTER_SLOTS_KEY = "slots"


def slot_shard_key(shard: int) -> str:
    """The cluster-table key of slot-counter shard ``shard``: ``slots``, ``slots#1``, ``slots#2``, …"""
    return CLUSTER_SLOTS_KEY if shard == 0 else f"{CLUSTER_SLOTS_KEY}#{shard}"


def slot_shard_of(job_id: str, shards: int) -> int:
    """The shard a lease of ``job_id`` counts on, out of ``shards``: ``crc32(job_id) mod shards``
    (stable across processes, so a release meets its acquire's shard)."""
    return zlib.crc32(job_id.encode()) % shards


def summed_slots(shards: Iterable[ClusterItem]) -> ClusterItem | None:
    """One slot counter of ``shards`` (keyed :data:`CLUSTER_SLOTS_KEY`): their ``busy``, ``total``,
    ``borrowable`` and ``borrowers`` added up (absent counts 0); None for no shard."""
    items = list(shards)
    if not items:
        return None

    def total(name: str) -> int:
        return sum(int(getattr(item, name) or 0) for item in items)

    return ClusterItem(CLUSTER_SLOTS_KEY, busy=total("busy"), total=total("total"), borrowable=total("borrowable"),
                       borrowers=total("borrowers"))


def borrowable_shares(borrowable: int, shards: int) -> list[int]:
    """``borrowable`` split over ``shards`` items: equal shares, the first ``borrowable mod shards``
    one more; they sum to ``borrowable`` (negative too: a reserve above the live slots)."""
    return [(borrowable - k + shards - 1) // shards for k in range(shards)]


#: Key prefix of the live worker nodes in the cluster table.
NODE_KEY_PREFIX = "node/"


#: The one partition value of the nodes' expiry index.
NODE_PARTITION = "node"


class NodeExpiryIndex(GlobalSecondaryIndex["ClusterItem"]):
    """Node items by expiry (sparse: only node items have ``node_partition``)."""

    class Meta:
        index_name = "nodes-by-expiry"
        projection = AllProjection()

    node_partition = UnicodeAttribute(hash_key=True)
    expires_at = NumberAttribute(range_key=True)


class ClusterItem(Model):
    """The cluster table: the slot counter, in ``Settings.cluster_slot_shards`` items (keys
    :func:`slot_shard_key`), and one item per live worker node (key ``node/<node name>``).

    Each shard holds ``busy`` (leases of its jobs held now, :func:`slot_shard_of`, kept in the same
    transactions as each tenant's ``in_flight``) and ``borrowable`` (its share of ``total −
    Settings.reserve_slots``, :func:`borrowable_shares`: a lease may be borrowed only while its
    shard's ``busy < borrowable``). Shard 0 also holds ``total`` (slots of the live nodes) and
    ``borrowers`` (tenants whose tier borrows). Summed over the shards, the four are the cluster's
    (:func:`leases.nodes.slots`). A node item holds its ``slots`` and ``expires_at``; a node that
    stops beating is dropped by the sweeper.
    """

    class Meta(_Meta):
        table_name = _FromSettings("cluster_table")

    @classmethod
    def busy_add(cls, delta: int) -> list[Action]:
        """Update actions of a transaction that takes (``delta`` 1) or frees (-1) a lease on a shard:
        ``busy += delta`` and one more ``lease_moves``."""
        return [cls.busy.add(delta), cls.lease_moves.add(1)]

    key = UnicodeAttribute(hash_key=True)
    busy = NumberAttribute(null=True)
    #: A shard's changes of ``busy`` so far; it only grows (:meth:`busy_add`), as ``TenantItem.lease_moves``.
    lease_moves = NumberAttribute(null=True)
    total = NumberAttribute(null=True)
    borrowable = NumberAttribute(null=True)
    #: Tenants whose tier has a burst cap (kept by ``leases.tenants.set_cap``): 0 = no borrowing, and
    #: a release offers nobody a slot (one read, no query).
    borrowers = NumberAttribute(null=True)
    slots = NumberAttribute(null=True)
    heartbeat_at = NumberAttribute(null=True)
    expires_at = NumberAttribute(null=True)
    #: A node's clock against the DynamoDB endpoint's at its last beat (local − endpoint, s) and the
    #: reading's error bound (s): :mod:`leases.skew`.
    clock_offset_s = NumberAttribute(null=True)
    clock_error_s = NumberAttribute(null=True)
    node_partition = UnicodeAttribute(null=True)
    nodes_by_expiry = NodeExpiryIndex()



class TokenClaimItem(Model):
    """The durable claim of one tenant's idempotency token: the job that holds it, until when; one
    item per (tenant, token) submitted within the idempotency TTL (:mod:`imposition.admission.claims`), written
    in one transaction with the job item it names. ``expires_at`` is the table's DynamoDB TTL attribute.

    Keyed by (``tenant_id``, ``token_sha256``: SHA-256 hex of the UTF-8 token, so the key is 64
    characters whatever the caller's token). A claim whose ``expires_at`` has passed no longer
    holds its token, even before DynamoDB's TTL deletion (which can lag by days) removes it.
    """

    class Meta(_Meta):
        table_name = _FromSettings("tokens_table")

    tenant_id = UnicodeAttribute(hash_key=True)
    token_sha256 = UnicodeAttribute(range_key=True)
    job_id = UnicodeAttribute()
    claimed_at = NumberAttribute()
    #: Epoch seconds (integer: the DynamoDB TTL attribute, see :data:`TOKEN_CLAIM_TTL_ATTRIBUTE`).
    expires_at = NumberAttribute()


#: The attribute DynamoDB's TTL deletes ``TokenClaimItem`` items by (enabled by ``imposition provision``).
TOKEN_CLAIM_TTL_ATTRIBUTE = "expires_at"
#: The attribute DynamoDB's TTL deletes final ``JobItem`` items by (enabled by ``imposition provision``).
JOB_TTL_ATTRIBUTE = "expires_at"

ALL_MODELS: tuple[type[Model], ...] = (TenantItem, LeaseItem, JobItem, ClusterItem, TokenClaimItem)
#: The DynamoDB TTL attribute of each table that has one (epoch seconds; the template and
#: ``imposition provision`` enable it): model → attribute name.
TTL_ATTRIBUTES: dict[type[Model], str] = {TokenClaimItem: TOKEN_CLAIM_TTL_ATTRIBUTE, JobItem: JOB_TTL_ATTRIBUTE}
# PynamoDB types ``Model.Meta`` as an instance protocol (``region: str``); it is a class, and a
# descriptor set on it is read per use.
for _model in ALL_MODELS:
    _model.Meta.region = _FromSettings("aws_region")  # type: ignore[assignment]  # PynamoDB's stub: Meta is a class


def reset_connections() -> None:
    """Drop every model's cached DynamoDB client.

    Call in a freshly forked process (Celery's ``worker_process_init``): a botocore client and its
    connection pool must not be shared across ``fork()``.
    """
    for model in ALL_MODELS:
        model._connection = None


def lost_attempt_entry(attempt: int, cause: str, detail: str, now: float, token: str | None = None) -> dict:
    """One entry of ``JobItem.lost_attempts`` (``cause``: ``infra_lost``, ``infra_error`` or
    ``holder_vanished``; ``token``: the lease's fencing token, where known)."""
    entry = {"attempt": int(attempt), "cause": cause, "at": now, "detail": detail[:500]}
    if token is not None:
        entry["token"] = token
    return entry
