"""``python -m soak`` (``make soak``): many jobs, two worker nodes, SIGKILLs and faults, short clocks.

Runs its own embedded stack (two moto servers), two imposer nodes (``-c 4`` each), a maintenance
worker, a notifications worker, beat and a webhook receiver (every other tenant has a webhook), all
with the lease-event log on (:mod:`soak.app`). Every process reaches SQS/S3, DynamoDB and Redis
through fault proxies. Submits ``--jobs`` real jobs over ``--tenants`` tenants (weighted 4:3:2:1…, so
the biggest keeps running into its cap), at most ``--backlog`` unfinished, while SIGKILLing
``--kills`` random pool children and injecting every fault class of :mod:`soak.faults` (SQS/S3 503
and resets, DynamoDB 503 and a 35 s stall, Redis down, a node SIGSTOPped past its leases, a warm
restart of every worker) ``--fault-repeats`` times; after each fault, every process must be alive
and polling and a probe job must succeed. Then the total-queue rule, from sources that do not
trust the counters: every job ``succeeded`` exactly once (event log, plate objects), every final
job's webhook delivered or ``no_endpoint``, no cap violation (the lease-event log replayed), no
attempt charged that a SIGKILL/SIGSTOP or the success does not explain, audit clean, no process
found dead. Writes ``out/soak/summary.json``; exits 1 if any check fails. Clocks: lease TTL 10 s,
heartbeat 2 s, sweep 2 s.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m soak", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1200)
    p.add_argument("--tenants", type=int, default=4)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=4, help="pool size of each node")
    p.add_argument("--backlog", type=int, default=48, help="most unfinished jobs at any time")
    p.add_argument("--ttl", type=float, default=10.0, help="lease TTL (s)")
    p.add_argument("--heartbeat", type=float, default=2.0, help="heartbeat interval (s)")
    p.add_argument("--sweep", type=float, default=2.0, help="sweep interval (s)")
    p.add_argument("--hold", type=float, default=1.5,
                   help="each run holds its lease a random 0..HOLD s more (longer jobs, caps that bind)")
    p.add_argument("--fault-repeats", type=int, default=2, help="injections of each fault class (0: none)")
    p.add_argument("--fault-gap", type=float, default=25.0,
                   help="mean seconds between one fault's recovery and the next fault")
    p.add_argument("--fault-classes", type=lambda v: tuple(v.split(",")), default=None,
                   help="comma-separated subset of the fault classes (default: all; the verdict then asks "
                        "only for these)")
    p.add_argument("--fault-warmup", type=float, default=20.0, help="seconds before the first fault")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "out" / "soak")
    args = p.parse_args(argv)
    from soak.faults import CLASSES  # noqa: PLC0415 - a plain module: no settings read
    args.fault_classes = args.fault_classes or CLASSES
    unknown = set(args.fault_classes) - set(CLASSES)
    if unknown:
        p.error(f"--fault-classes: unknown {sorted(unknown)}; choose among {', '.join(CLASSES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # The environment every process of the soak reads its settings from (set before any import).
    os.environ.update({
        "IMPOSITION_LEASE_TTL_S": str(args.ttl),
        "IMPOSITION_HEARTBEAT_INTERVAL_S": str(args.heartbeat),
        "IMPOSITION_SWEEP_INTERVAL_S": str(args.sweep),
        "IMPOSITION_DEFER_DELAY_S": "1",
        "IMPOSITION_VISIBILITY_MARGIN_S": "3",
        "IMPOSITION_RETRY_BACKOFF_BASE_S": "1",
        "IMPOSITION_SQS_WAIT_TIME_S": "1",
        "IMPOSITION_SQS_POLLING_INTERVAL_S": "0.2",
        "IMPOSITION_REDIS_URL": "redis://127.0.0.1:6379/10",
        "IMPOSITION_AUTO_REGISTER_TENANTS": "true",  # the soak's tenants register on first submission
        "IMPOSITION_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true",  # the soak's receiver is on 127.0.0.1
        # Shorter than production's 300 s / 60 s, not much: a drain that re-sends rounds the notifications
        # worker is merely behind on floods its queue (5 s / 2 s did: 1,700 rounds queued, sweeps late).
        "IMPOSITION_WEBHOOK_OUTBOX_GRACE_S": "60",
        "IMPOSITION_WEBHOOK_OUTBOX_DRAIN_INTERVAL_S": "10",
        "IMPOSITION_EVENTS_URL": "redis://127.0.0.1:6379/9",
        # this soak's own Redis keys, deleted at the end (imposition.common.redis_namespace)
        "IMPOSITION_REDIS_KEY_NAMESPACE": f"imposition-soak-{uuid.uuid4().hex[:12]}",
        "IMPOSITION_RATE_LIMIT_PER_MIN": "1000000",
        "IMPOSITION_ADMISSION_IN_FLIGHT_CAP": "1000000",
        "IMPOSITION_ENGINE_TIME_LIMIT_S": "60",
        "IMPOSITION_METRICS_DIR": str(args.out / "metrics"),  # this soak's own multiprocess files
        "SOAK_EVENT_LOG_DIR": str(args.out / "events"),
        "SOAK_HOLD_MAX_S": str(args.hold),
    })
    import shutil  # noqa: PLC0415 - after the environment is set

    from devstack.fault_proxy import FaultProxy  # noqa: PLC0415 - after the environment is set
    from devstack.localaws import LocalAws  # noqa: PLC0415 (settings are read at import)

    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    # The embedded AWS endpoint first: importing ``tasks`` looks the queues up.
    with LocalAws(log_path=args.out / "moto.log") as local:
        os.environ.update(local.env)
        from imposition.cli.provision import provision  # noqa: PLC0415 - after the environment is set

        provision()
        from soak.runner import Soak  # noqa: PLC0415 - after the environment is set

        # The stack's processes reach every endpoint through a proxy of its own; this process, directly.
        with FaultProxy(local.main.url) as aws_proxy, FaultProxy(local.dynamodb.url) as dynamo_proxy, \
                FaultProxy("redis://127.0.0.1:6379") as redis_proxy:
            summary = Soak(args, {"aws": aws_proxy, "dynamodb": dynamo_proxy, "redis": redis_proxy}).run()
    print(summary.describe())
    return 0 if summary.passed else 1


if __name__ == "__main__":
    sys.exit(main())
