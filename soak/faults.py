"""The fault soak's faults: what each class does to the running stack, and how long.

Every process of the soak reaches SQS and S3 through one :class:`devstack.fault_proxy.FaultProxy`,
DynamoDB through another and Redis through a third (the soak's own process talks to the endpoints
directly, so its submissions and checks never meet a fault). Each class, at least
``--fault-repeats`` times in a run, in a seeded random order, one at a time:

=================  ==================================================================================
class              what happens
=================  ==================================================================================
``sqs_s3_503``     the SQS/S3 proxy answers every request HTTP 503, for a random 2–20 s
``sqs_s3_reset``   the SQS/S3 proxy resets every connection, for a random 2–20 s
``dynamodb_503``   the DynamoDB proxy answers HTTP 503, for 10 s
``dynamodb_stall`` the DynamoDB proxy stalls 35 s: requests apply, answers come late (past
                   botocore's 30 s read timeout: resends)
``redis_down``     the Redis proxy refuses (first time) or resets (second) connections, for 20 s
``sigstop``        an imposer node (its process group) is SIGSTOPped past its leases' TTL, then SIGCONT
``warm_restart``   every worker gets SIGTERM (a warm shutdown) and is started again
=================  ==================================================================================

After each, :class:`soak.runner.Soak` checks that every process is alive and has polled its queue
since the fault ended, and that a probe job submitted then succeeds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

#: The fault classes, in the order of the table above.
CLASSES = ("sqs_s3_503", "sqs_s3_reset", "dynamodb_503", "dynamodb_stall", "redis_down", "sigstop", "warm_restart")
#: Fault class → the proxy (``aws``, ``dynamodb``, ``redis``) and its failing mode(s), one per occurrence in turn.
PROXY_FAULTS = {
    "sqs_s3_503": ("aws", ("http_503",)),
    "sqs_s3_reset": ("aws", ("reset",)),
    "dynamodb_503": ("dynamodb", ("http_503",)),
    "dynamodb_stall": ("dynamodb", ("stall",)),
    "redis_down": ("redis", ("refuse", "reset")),
}
#: Seconds of the fixed-length proxy faults (the SQS/S3 ones draw theirs from :data:`SQS_S3_RANGE_S`).
FIXED_DURATION_S = {"dynamodb_503": 10.0, "dynamodb_stall": 35.0, "redis_down": 20.0}
SQS_S3_RANGE_S = (2.0, 20.0)


@dataclass
class Fault:
    """One injected fault (times in s since the soak started).

    ``recovered_s``: from the fault's end until its probe job succeeded (None: it did not);
    ``alive`` / ``consuming``: every process was running / had polled its queue after the fault.
    """

    kind: str
    at_s: float
    duration_s: float
    detail: str = ""
    faults_counted: int = 0
    probe_job: str | None = None
    recovered_s: float | None = None
    alive: bool = False
    consuming: bool = False
    not_consuming: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The stack came back: every process alive and consuming, the probe job succeeded."""
        return self.alive and self.consuming and self.recovered_s is not None


def plan(repeats: int, rng: random.Random, classes: tuple[str, ...] = CLASSES) -> list[str]:
    """Every one of ``classes`` ``repeats`` times, shuffled with ``rng``, no class twice in a row
    where avoidable."""
    kinds = [k for k in classes for _ in range(repeats)]
    rng.shuffle(kinds)
    for i in range(1, len(kinds)):
        if kinds[i] == kinds[i - 1]:
            for j in range(i + 1, len(kinds)):
                if kinds[j] != kinds[i] and (j + 1 >= len(kinds) or kinds[j + 1] != kinds[i]):
                    kinds[i], kinds[j] = kinds[j], kinds[i]
                    break
    return kinds


def duration_s(kind: str, rng: random.Random, stop_s: float) -> float:
    """How long fault ``kind`` lasts (``stop_s``: the SIGSTOP's length; 0 for a warm restart)."""
    if kind in FIXED_DURATION_S:
        return FIXED_DURATION_S[kind]
    if kind in ("sqs_s3_503", "sqs_s3_reset"):
        return round(rng.uniform(*SQS_S3_RANGE_S), 1)
    return stop_s if kind == "sigstop" else 0.0
