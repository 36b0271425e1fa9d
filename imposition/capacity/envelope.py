"""How far one deployment goes: each shared DynamoDB partition and SQS quota against the job rate of
N nodes at full use, from AWS's published limits (docs/deploy.md, "How far one deployment goes").

At full use N nodes of ``slots_per_node`` slots with jobs of ``job_s`` seconds run
J = N × slots / job_s jobs a second. Each :class:`Limit` says what one job (or one node) costs a
shared resource, the most that resource serves, and so the job rate and node count at which it
binds. Writes per job are counted from the lease transactions (``leases/transactions.py``), the
outbox (``leases/outbox.py``) and the submission; the transaction time is an input, since AWS
publishes none for this service. The slot counter's writes and conflicts spread over its
``cluster_slot_shards`` items (a job's acquire and release meet one of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import click

from imposition.common.settings import get_settings

#: Write units one DynamoDB partition serves per second, a GSI partition likewise (AWS: "Understanding
#: DynamoDB warm throughput"; partition key design best practices).
PARTITION_WCU_PER_S = 1_000
#: A transactional write of an item up to 1 KB costs two write units ("Amazon DynamoDB Transactions:
#: How it works", capacity management).
TRANSACTIONAL_WCU_PER_KB = 2
#: Read units one DynamoDB partition serves per second, a GSI partition likewise (as above).
PARTITION_RCU_PER_S = 3_000
#: A Query reads its items' total size in 4 KB units, half a unit each when eventually consistent
#: ("Read consistency", "Query operations: capacity unit consumption").
QUERY_KB_PER_RCU = 8
#: In-flight messages of a standard SQS queue ("Amazon SQS standard queue quotas": approximately).
SQS_IN_FLIGHT_MAX = 120_000
#: Lease and tenant items stay under 1 KB: one write unit per write.
SMALL_ITEM_KB = 1


@dataclass(frozen=True)
class Limit:
    """One shared resource: ``jobs_per_s`` and ``nodes`` at which it binds (``math.inf``: never)."""

    name: str
    cost: str
    jobs_per_s: float
    nodes: float


def envelope(*, slots_per_node: int, job_s: float, heartbeat_interval_s: float, transaction_s: float,
             slot_shards: int = 1, pending_tenants: int = 200) -> list[Limit]:
    """Every limit, the one that binds first (fewest nodes) first.

    Args:
        slots_per_node: licensed slots of a node.
        job_s: a job's lease time, seconds.
        heartbeat_interval_s: lease renewal and node heartbeat period, seconds.
        transaction_s: how long a ``TransactWriteItems`` holds its items (measure it in your region).
        slot_shards: items of the slot counter (``Settings.cluster_slot_shards``); each is its own
            item for conflicts, and DynamoDB's adaptive capacity isolates hot items on partitions.
        pending_tenants: tenants with queued or waiting jobs at once; each delivery reads them all
            from the ``by-pending`` index to decide whether to give way (``leases.waiting.gives_way``).

    Raises:
        ValueError: a value is not positive (its name and value in the message).
    """
    for name, value in (("slots_per_node", slots_per_node), ("job_s", job_s),
                        ("heartbeat_interval_s", heartbeat_interval_s), ("transaction_s", transaction_s),
                        ("slot_shards", slot_shards), ("pending_tenants", pending_tenants)):
        if not value > 0:
            raise ValueError(f"{name}={value!r}: must be > 0")

    def nodes_at(jobs_per_s: float) -> float:
        return jobs_per_s * job_s / slots_per_node

    renewals = job_s / heartbeat_interval_s
    per_job = {
        # put at acquire, delete at release, a key change (2 index writes) per renewal
        "by-expiry GSI 'lease'": (2 + 2 * renewals) * SMALL_ITEM_KB,
        # the tenant item, written at submission, acquire and release while it has pending jobs
        "by-pending GSI 'pending'": 3 * SMALL_ITEM_KB,
        # keys only: put at the final status, a key change per delivery round it outlives (one, usually),
        # delete when settled; the job item's size does not count (leases.models.WebhookOutboxIndex)
        "by-webhook-due GSI 'outbox'": 4 * SMALL_ITEM_KB,
        # acquire and release, each a transactional write of the counter
        "cluster item 'slots' (write units)": 2 * TRANSACTIONAL_WCU_PER_KB * SMALL_ITEM_KB,
    }
    items = {name: slot_shards if name.startswith("cluster item") else 1 for name in per_job}
    limits = [Limit(name, f"{wcu:g} WCU a job", items[name] * PARTITION_WCU_PER_S / wcu,
                    nodes_at(items[name] * PARTITION_WCU_PER_S / wcu))
              for name, wcu in per_job.items()]
    # two transactions a job on one of the counter's items; with w-second transactions arriving at
    # random on an item, a share 1 - exp(-2 λ w) conflicts, and retries add load: the useful rate of
    # an item tops out near 2 λ w = 1
    conflicts_jobs_per_s = slot_shards / (4 * transaction_s)
    limits.append(Limit("cluster item 'slots' (transaction conflicts)", f"2 tx a job, {slot_shards} items",
                        conflicts_jobs_per_s, nodes_at(conflicts_jobs_per_s)))
    # one eventually consistent Query of every pending tenant per delivery (give way)
    give_way_rcu = math.ceil(pending_tenants * SMALL_ITEM_KB / QUERY_KB_PER_RCU * 2) / 2
    limits.append(Limit("by-pending GSI 'pending' (reads)", f"{give_way_rcu:g} RCU a job",
                        PARTITION_RCU_PER_S / give_way_rcu, nodes_at(PARTITION_RCU_PER_S / give_way_rcu)))
    node_wcu_per_s = 2 * SMALL_ITEM_KB / heartbeat_interval_s  # a key change per node heartbeat
    limits.append(Limit("nodes-by-expiry GSI 'node'", f"{node_wcu_per_s:.3g} WCU/s a node", math.inf,
                        PARTITION_WCU_PER_S / node_wcu_per_s))
    limits.append(Limit("SQS in flight, imposition queue", "1 message a slot", math.inf,
                        SQS_IN_FLIGHT_MAX / slots_per_node))
    return sorted(limits, key=lambda limit: limit.nodes)


def _shown(value: float, digits: int) -> str:
    return "-" if math.isinf(value) else f"{value:,.{digits}f}"


@click.command("capacity-envelope")
@click.option("--job-s", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="A job's lease time, seconds.")
@click.option("--transaction-ms", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="How long a TransactWriteItems holds its items, ms (measure it in your region).")
@click.option("--slot-shards", type=click.IntRange(min=1), default=None,
              help="Items of the slot counter [default: IMPOSITION_CLUSTER_SLOT_SHARDS].")
@click.option("--pending-tenants", type=click.IntRange(min=1), default=200, show_default=True,
              help="Tenants with queued or waiting jobs at once (each delivery reads them all).")
def capacity_envelope_command(job_s: float, transaction_ms: float, slot_shards: int | None,
                              pending_tenants: int) -> None:
    """Print each shared limit of one deployment and the nodes (IMPOSITION_SLOTS_PER_NODE slots each)
    at which it binds; the first line binds first."""
    s = get_settings()
    limits = envelope(slots_per_node=s.slots_per_node, job_s=job_s, heartbeat_interval_s=s.heartbeat_interval_s,
                      transaction_s=transaction_ms / 1000, slot_shards=slot_shards or s.cluster_slot_shards,
                      pending_tenants=pending_tenants)
    click.echo(f"{'limit':46} {'cost':22} {'jobs/s':>10} {'nodes':>10}")
    for limit in limits:
        click.echo(f"{limit.name:46} {limit.cost:22} {_shown(limit.jobs_per_s, 1):>10} {_shown(limit.nodes, 0):>10}")
