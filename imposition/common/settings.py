"""The one typed settings object of the service.

Every number of the design lives here with its default and its unit in its name; nothing else in
the code types one of them again. Values come from the environment, each field from
``IMPOSITION_<FIELD NAME IN CAPITALS>`` (for example ``IMPOSITION_LEASE_TTL_S=10``), except the AWS
endpoint and region, which follow the AWS SDK's own conventions (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_<SERVICE>``, ``AWS_DEFAULT_REGION``) so that boto3, PynamoDB and kombu all agree
without being told twice. With ``AWS_ENDPOINT_URL`` unset, the service talks to real AWS.

Derived values (the SQS visibility timeout, the self-declared lease-loss deadline) are computed in
:mod:`imposition.common.clocks`, never set here.

Use :func:`get_settings` (cached per process); tests that change the environment call
``get_settings.cache_clear()``.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from imposition.common.aws_quotas import DYNAMODB_ITEM

#: SQS limit on a per-message ``DelaySeconds`` (AWS SQS developer guide, "Message timers").
SQS_MAX_DELAY_S = 900
#: SQS limit on a queue's or a message's visibility timeout: 12 hours (AWS SQS quotas).
SQS_MAX_VISIBILITY_TIMEOUT_S = 43_200
#: SQS limit on ``maxReceiveCount`` in a redrive policy (AWS SQS developer guide, "Dead-letter queues").
SQS_MAX_RECEIVE_COUNT = 1000
#: DynamoDB's limit on one item's size, bytes (names and values; its home: imposition.common.aws_quotas).
DYNAMODB_MAX_ITEM_BYTES = DYNAMODB_ITEM.value
#: Room for a job item's attributes other than the free-form fields at submission (names, ids,
#: numbers, status), bytes: a few hundred bytes; kept generous.
JOB_ITEM_FIXED_BYTES = 4096
#: An IAM principal the operator role may trust: a role, a user or an account's root.
_IAM_PRINCIPAL = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(root|(role|user)/[\w+=,.@/-]{1,512})$")
#: Tags on one resource (IAM, SQS, DynamoDB, S3, KMS and CloudWatch alike).
MAX_RESOURCE_TAGS = 50
#: S3's limit on an object key, UTF-8 bytes (Amazon S3 User Guide, "Naming Amazon S3 objects").
S3_KEY_MAX_BYTES = 1024


class Settings(BaseSettings):
    """Configuration of every process of the service (workers, beat, CLI, submitters).

    Units are in the field names: ``_s`` seconds, ``_bytes`` bytes, ``_mm`` millimetres.

    Raises:
        pydantic.ValidationError: a value is malformed or breaks a limit below (the message names the
            field, the value and the limit).
    """

    model_config = SettingsConfigDict(env_prefix="IMPOSITION_", extra="ignore", frozen=True)

    # --- AWS -------------------------------------------------------------------------------------
    aws_endpoint_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("AWS_ENDPOINT_URL", "IMPOSITION_AWS_ENDPOINT_URL"),
        description="Endpoint for every AWS service (the SDK's AWS_ENDPOINT_URL); None = real AWS.",
    )
    aws_region: str = Field(
        default="us-east-1",
        validation_alias=AliasChoices("AWS_DEFAULT_REGION", "AWS_REGION", "IMPOSITION_AWS_REGION"),
    )
    imposition_queue: str = "imposition"
    maintenance_queue: str = "maintenance"
    notifications_queue: str = "notifications"
    dead_letter_suffix: str = "-dlq"
    max_receive_count: int = Field(default=5, ge=1, le=SQS_MAX_RECEIVE_COUNT)
    tenants_table: str = "imposition-tenants"
    leases_table: str = "imposition-leases"
    jobs_table: str = "imposition-jobs"
    cluster_table: str = Field(default="imposition-cluster", description="Slot counter and live worker nodes.")
    tokens_table: str = Field(
        default="imposition-tokens",
        description="DynamoDB table of the durable idempotency-token claims (one item per tenant and token, "
                    "DynamoDB TTL on expires_at).",
    )
    bucket: str = "imposition-plates"
    stack_name: str = Field(
        default="imposition", pattern=r"^[A-Za-z][A-Za-z0-9-]{0,50}$",
        description="CloudFormation stack of the service's AWS resources (imposition render-template | deploy); "
                    "also the prefix of its IAM role names (<stack_name>-imposer, ...) and its tag 'service'.",
    )
    # --- the stack's roles, tags, alarms and deploy (imposition render-template | deploy; docs/deploy.md) ---
    compute_platform: Literal["ec2", "ecs"] = Field(
        default="ec2",
        description="What runs the processes on AWS: 'ec2' (instances; each role trusts ec2.amazonaws.com and "
                    "has an instance profile of its name) or 'ecs' (tasks; each role trusts ecs-tasks.amazonaws.com "
                    "from this account: a task role).",
    )
    operator_principals: tuple[str, ...] = Field(
        default=(),
        description="IAM role or user ARNs that may assume the operator role besides the compute (a JSON list); "
                    "no other role trusts a principal. An account's root ARN (arn:aws:iam::<account>:root) lets "
                    "every principal of that account whose own policy allows it assume the role: name it only "
                    "deliberately.",
    )
    permissions_boundary_arn: str = Field(
        default="", pattern=r"^$|^arn:aws[a-z-]*:iam::(\d{12}|aws):policy/[A-Za-z0-9_+=,.@/-]{1,128}$",
        description="A managed policy's ARN set as the permissions boundary of every role of the stack; '' = none.",
    )
    resource_tags: dict[str, str] = Field(
        default_factory=dict,
        description="Tags (a JSON object) on every role and every taggable resource of the stack, beside "
                    "'service' = stack_name.",
    )
    alarm_topic_arn: str = Field(
        default="", pattern=r"^$|^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$",
        description="SNS topic the stack's CloudWatch alarms notify (the template's AlarmTopicArn parameter, "
                    "which imposition deploy passes); '' = the alarms change state and notify no one.",
    )
    alarm_oldest_message_age_s: int = Field(
        default=3600, ge=60,
        description="CloudWatch alarm: a work queue's oldest message older than this (s), for alert_for_s.",
    )
    deploy_template_bucket: str = Field(
        default="",
        description="S3 bucket imposition deploy uploads the template to when its compact JSON is over "
                    "CloudFormation's inline limit (51,200 bytes), to pass it by TemplateURL; '' = none (such a "
                    "deploy fails naming this setting). Not the stack's own bucket, which a first deploy creates.",
    )
    sqs_wait_time_s: int = Field(default=10, ge=0, le=20, description="SQS long-poll wait (max 20 s).")
    sqs_polling_interval_s: float = Field(
        default=0.0, ge=0,
        description="kombu's pause after a receive before it polls again; 0 = long polling alone paces them "
                    "(kombu SQS docs: the two delays add up).",
    )
    sqs_prefetch_recheck_s: float = Field(
        default=0.02, ge=0,
        description="Worker: while its prefetch is full (every slot holds an unacked message), how often its SQS "
                    "poll loop checks for room again, so a freed slot's next receive is sent within about this (tasks.sqs_transport: "
                    "kombu's own re-check could wait up to a second after the ack that made room). 0 = kombu's.",
    )
    sqs_receive_backoff_initial_s: float = Field(
        default=0.5, gt=0,
        description="Worker: pause before the next receive after the first failed one (SQS answering 408/5xx, "
                    "a reset or refused connection); doubled per failure in a row up to sqs_receive_backoff_max_s, "
                    "each pause drawn between half of it and all of it (tasks.sqs_transport).",
    )
    sqs_receive_backoff_max_s: float = Field(
        default=10.0, gt=0,
        description="Worker: longest pause between receives while SQS keeps failing; it bounds how long after the "
                    "endpoint is back a worker may take to notice.",
    )
    poll_stamp_path: str = Field(
        default="",
        description="Worker: a file whose modification time its SQS poll loop sets (at most once a second), for "
                    "a supervisor to tell a worker that stopped consuming from an idle one; '' = none. make run "
                    "sets one per worker.",
    )
    supervise_max_restarts: int = Field(
        default=3, ge=0,
        description="make run: restarts of one process (it died, or stopped polling) before the run fails with "
                    "its last log lines.",
    )
    supervise_interval_s: float = Field(default=2.0, gt=0, description="make run: seconds between supervisor checks.")
    sqs_shutdown_receive_margin_s: float = Field(
        default=5.0, ge=0,
        description="Worker stopping: how much longer than sqs_wait_time_s it waits for its open long polls to "
                    "answer, so that what they bring is released (visibility 0) rather than hidden for the "
                    "visibility timeout (tasks.sqs_transport).",
    )

    # --- Redis (admission control, monitoring-event side channel) ---------------------------------
    redis_url: str = "redis://127.0.0.1:6379/0"
    events_url: str = "redis://127.0.0.1:6379/1"
    beat_schedule_path: str = Field(
        default="/var/lib/imposition/beat-schedule",
        description="beat's schedule file (`imposition process run beat`; the image and the units create its "
                    "folder); `make run` puts it in .run/",
    )
    beat_max_loop_interval_s: float = Field(
        default=30.0, gt=0,
        description="Longest beat sleeps between two turns of its scheduler loop (Celery's "
                    "beat_max_loop_interval); beat's /healthz says stalled after twice this without a turn.",
    )
    redis_key_namespace: str = Field(
        default="imposition", pattern=r"^[A-Za-z0-9._-]{1,64}$",
        description="1–64 characters from A–Z a–z 0–9 . _ -: the first segment of every Redis key the service "
                    "writes (admission, recent-event counts); `make run`, `make test` and `make soak` give each "
                    "run its own, so runs sharing a Redis never see each other's state.",
    )

    # --- fairness: slots and caps (docs/design.md §2) ----------------------------------------------
    slots_per_node: int = Field(default=8, ge=1, description="Licensed press-tool slots per node.")
    worker_process_start_timeout_s: float = Field(
        default=30.0, gt=0, description="Celery's worker_proc_alive_timeout: how long a new pool child may take "
        "to come up (each warms its AWS clients and broker channel) before the pool kills and replaces it. "
        "Celery's 4 s default made a loaded 2-core machine kill every new child before it was up, and no job ran.",
    )
    default_cap: int = Field(default=4, ge=1, description="Leases one tenant may hold at once.")
    reserve_slots: int = Field(
        default=1, ge=0,
        description="Borrowing: slots of the cluster kept free for tenants below their cap; a tenant above its "
        "cap (up to its burst cap) may take a slot only while busy slots < live slots - reserve_slots.",
    )
    cluster_slot_shards: int = Field(
        default=1, ge=1, le=64,
        description="Items the cluster's slot counter is split into (docs/deploy.md, the scale envelope): a "
        "lease counts on shard crc32(job_id) mod this, so acquires and releases spread their transaction "
        "conflicts. One item carries about 38 nodes of 8 slots with 30 s jobs; 16 carry 100 and more. "
        "Borrowing is conditioned per shard on an equal share of the borrowable slots, so a borrow may be refused "
        "while other shards have room: hence 1 by default. Every process must agree; change it only when "
        "imposition audit shows no live lease. At most 64: a node's "
        "registration writes every shard in one transaction.",
    )
    node_ttl_s: float = Field(
        default=180.0, gt=0,
        description="A worker node that has not beaten for this long drops out of the slot registry (its slots "
        "no longer count for borrowing). Must be >= 2 x heartbeat_interval_s.",
    )
    auto_register_tenants: bool = Field(
        default=False,
        description="A submission for a tenant with no item in the tenants table registers it (default cap and "
        "limits) instead of being refused as unknown_tenant; off in production (`imposition tenant create` "
        "registers tenants), on in `make run`.",
    )
    max_cap: int = Field(
        default=1000, ge=1,
        description="Largest cap override `imposition tenant set-cap` accepts (a bound far above any node's "
        "slots; DynamoDB numbers hold at most 38 digits). A cap of 0 pauses a tenant until it is raised.",
    )

    # --- clocks (docs/design.md §4; derived ones in imposition.common.clocks) -------------------------------
    lease_ttl_s: float = Field(default=600.0, gt=0)
    heartbeat_interval_s: float = Field(default=60.0, gt=0)
    sweep_interval_s: float = Field(default=60.0, gt=0)
    defer_delay_s: int = Field(
        default=30, ge=0, le=SQS_MAX_DELAY_S,
        description="SQS DelaySeconds of a cap-hit copy under waiting_policy=timer (the baseline), and of the "
        "rare deferrals outside the cap (lease contention, a copy that arrived before its re-queue).",
    )
    waiting_policy: Literal["handoff", "timer"] = Field(
        default="handoff",
        description="What a cap hit does: 'handoff' parks the job (status waiting, no message) until a release "
        "of its tenant wakes it (docs/design.md §3); 'timer' publishes a copy delayed by defer_delay_s (the "
        "source design's baseline, kept for make bench-sched).",
    )
    handoff_scan_limit: int = Field(
        default=8, ge=1, le=100,
        description="Waiting jobs read per index page when a release looks for the tenant's oldest one "
        "(a release hands its place to the first of them still waiting).",
    )
    index_settle_s: float = Field(
        default=1.5, ge=0,
        description="A release whose read of the waiting index found none, while the tenant's (strongly "
        "consistent) waiting counter says one waits, reads the index again for this long before freeing the "
        "place and leaving the job to the sweep: real DynamoDB's indexes are eventually consistent.",
    )
    index_poll_s: float = Field(
        default=0.1, gt=0,
        description="Between two such reads of the waiting index (seconds).",
    )
    visibility_margin_s: float = Field(default=60.0, ge=0)

    # --- lease transactions: bounded retries of conflicts and throttling ------------------------------
    lease_conflict_attempts: int = Field(default=5, ge=1)
    lease_conflict_backoff_s: float = Field(default=0.05, gt=0, description="tenacity jitter multiplier")
    lease_conflict_backoff_max_s: float = Field(default=1.0, gt=0)
    audit_confirm_snapshots: int = Field(
        default=3, ge=1, description="imposition audit: a drift counts only if seen in this many snapshots in a row"
    )
    audit_stable_read_tries: int = Field(
        default=5, ge=1, description="imposition audit: reads of a tenant until lease_moves is the same before and after its leases"
    )
    audit_repair_freeze_s: float = Field(
        default=30.0, gt=0,
        description="imposition audit --repair: longest a tenant's acquires stay frozen while its in_flight is recounted",
    )
    audit_repair_rounds: int = Field(
        default=5, ge=1, description="imposition audit --repair: re-read-and-repair rounds before giving up"
    )

    # --- retries (docs/design.md §3) -----------------------------------------------------------------
    max_attempts: int = Field(default=3, ge=1)
    max_attempts_limit: int = Field(
        default=10, ge=1, description="Largest attempt budget a submission may ask for (max_attempts=...)."
    )
    infra_retry_limit: int = Field(
        default=20, ge=0,
        description="Attempts of one job that an AWS endpoint or the network failed (5xx, throttling, resets, "
                    "timeouts: not the job) which are retried without being charged; beyond, they count against "
                    "max_attempts like any failure.",
    )
    retry_backoff_base_s: int = Field(default=30, ge=0, le=SQS_MAX_DELAY_S)
    retry_backoff_max_s: int = Field(default=SQS_MAX_DELAY_S, ge=0, le=SQS_MAX_DELAY_S)
    # kombu's retry_policy of one publish (job messages, webhook rounds): imposition.common.sqs.publish_retry_policy
    publish_retry_max_retries: int = Field(default=3, ge=0, description="Publish retries on a connection error.")
    publish_retry_interval_start_s: float = Field(default=0.2, ge=0)
    publish_retry_interval_step_s: float = Field(default=0.5, ge=0)
    publish_retry_interval_max_s: float = Field(default=2.0, ge=0)

    # --- admission (docs/design.md §2, layer 3) ----------------------------------------------------
    job_history_limit: int = Field(
        default=20, ge=1, le=1000,
        description="Earlier runs kept in a retried job's history (JobItem.history), entries; the oldest go first.",
    )
    jobs_list_limit: int = Field(
        default=50, ge=1, description="Rows `imposition jobs list` prints unless --limit says otherwise.")
    jobs_list_page_size: int = Field(
        default=100, ge=1, le=1000, description="Job items per DynamoDB Query page of `imposition jobs list`.")
    dlq_receive_visibility_s: int = Field(
        default=30, ge=1, le=43200,
        description="Seconds a message `imposition dlq list|redrive` received stays hidden from other "
                    "readers (list makes it visible again when done; redrive deletes it after the send).")
    dlq_scan_max_messages: int = Field(
        default=10_000, ge=1, description="Most messages one `imposition dlq list|redrive` reads from one queue.")
    idempotency_ttl_s: int = Field(
        default=48 * 3600, gt=0,
        description="How long a tenant's idempotency token stays taken after its submission, seconds: in Redis "
                    "(the fast check) and in its DynamoDB claim (the durable one). Overridable per tenant.",
    )
    rate_limit_per_min: int = Field(default=100, ge=1)
    admission_in_flight_cap: int = Field(default=500, ge=1)
    idempotency_token_max_len: int = Field(default=255, ge=1, description="Longest idempotency token, characters.")
    file_name_max_bytes: int = Field(
        default=255, ge=1, le=1024,
        description="Longest file name kept with a job (JobItem.file_name), UTF-8 bytes: a file system's NAME_MAX.")
    max_layout_bytes: int = Field(
        default=64 * 1024, ge=1024,
        description="Largest layout specification accepted at submission, UTF-8 bytes of its JSON as stored "
                    "(the layouts' own limits, e.g. 10,000 step-and-repeat pages, fit in it).")
    max_job_item_bytes: int = Field(
        default=128 * 1024, ge=8 * 1024, le=DYNAMODB_MAX_ITEM_BYTES // 2,
        description="Largest job item a submission may write (its DynamoDB size, bytes); at most half of "
                    "DynamoDB's 400 KB item limit, the rest kept for the job's history, warnings and lost attempts. "
                    "Must hold max_layout_bytes and the other fields at their limits.")
    admission_redis_timeout_s: float = Field(
        default=2.0, gt=0, description="Connect and read timeout of admission's Redis calls; past it, fail closed."
    )
    admission_redis_retries: int = Field(
        default=1, ge=0, description="Immediate retries of a Redis call after a connection error (a stale pooled "
        "connection after a Redis restart), then fail closed."
    )
    admission_in_flight_expiry_s: int = Field(
        default=24 * 3600, gt=0,
        description="An unconfirmed job stops counting as in flight this long after admission (lost confirms).",
    )
    admission_limits_cache_s: float = Field(
        default=30.0, ge=0, description="How long a process keeps a tenant's admission overrides (0: no cache)."
    )

    # --- webhooks (docs/design.md §1: signed event to the tenant, who confirms) ----------------------
    webhook_connect_timeout_s: float = Field(default=5.0, gt=0)
    webhook_read_timeout_s: float = Field(default=10.0, gt=0)
    webhook_attempt_budget_s: float = Field(
        default=30.0, gt=0, description="Time one delivery message spends retrying POSTs (tenacity) before "
        "it hands the wait to SQS. Keep the round's hard time limit (it plus both timeouts, the round "
        "overhead and the grace; imposition.webhooks.delivery.round_time_limits) well below the visibility timeout "
        "(720 s by default), or SQS may hand the same message to a second worker mid-round (a duplicate "
        "the tenant drops by event id)."
    )
    webhook_backoff_initial_s: float = Field(default=0.5, gt=0, description="tenacity exponential backoff start")
    webhook_backoff_max_s: float = Field(default=8.0, gt=0, description="tenacity backoff cap")
    webhook_redelivery_delay_s: int = Field(
        default=60, ge=0, le=SQS_MAX_DELAY_S,
        description="SQS DelaySeconds before the second round of a delivery; doubled per round, <= 900 s.",
    )
    webhook_give_up_after_s: float = Field(
        default=6 * 3600, gt=0, description="Overall deadline of one event's delivery, from its first round."
    )
    webhook_tolerance_s: int = Field(
        default=300, gt=0, description="Verifier: largest accepted |now - signature timestamp| (Stripe's default)."
    )
    webhook_round_overhead_s: float = Field(
        default=10.0, gt=0, description="Time one delivery round may spend outside its POSTs (reading the job "
        "and the endpoint); part of the round's Celery soft time limit (imposition.webhooks.delivery.round_time_limits)."
    )
    webhook_hard_limit_grace_s: float = Field(
        default=30.0, gt=0, description="After the soft time limit, time a round has to record itself as failed "
        "and publish the next round before Celery kills the pool child (hard time limit)."
    )
    webhook_outbox_grace_s: float = Field(
        default=300.0, gt=0, description="The outbox (leases.outbox): how long after a job's end, or after the "
        "next round of a failed delivery should have ended, the drain sends a round itself. Keep it above the "
        "round's hard time limit (imposition.webhooks.delivery.round_time_limits), or the drain duplicates a running round.",
    )
    webhook_outbox_drain_interval_s: float = Field(
        default=60.0, gt=0, description="Beat period of the outbox drain (imposition.drain_webhook_outbox)."
    )
    webhook_outbox_drain_batch: int = Field(
        default=500, ge=1, description="Most overdue events one drain sends rounds for; the rest wait for the next."
    )
    webhook_tenant_concurrency: int = Field(
        default=1, ge=1, description="Webhook rounds of one tenant that may POST at once, across every "
        "notifications worker (a Redis semaphore, imposition.webhooks.fairness); keep it below the notifications "
        "workers' total concurrency, so one tenant's hanging endpoint leaves slots to the others.",
    )
    webhook_tenant_busy_delay_s: int = Field(
        default=1, ge=1, le=SQS_MAX_DELAY_S, description="SQS DelaySeconds of a round put back because its tenant "
        "had webhook_tenant_concurrency rounds running; doubled per put-back of the same round, up to "
        "webhook_tenant_busy_delay_max_s.",
    )
    webhook_tenant_busy_delay_max_s: int = Field(
        default=15, ge=1, le=SQS_MAX_DELAY_S, description="Longest SQS delay of a round put back for its tenant's "
        "running rounds (a tenant whose endpoint hangs costs at most one receive per pending event this often).",
    )
    webhook_replay_store: Literal["redis", "memory"] = Field(
        default="redis", description="Where webhooks.verify_webhook remembers accepted requests when the caller "
        "passes no replay store: redis (redis_url, shared by every receiving process, so a replay sent to "
        "another process is refused) or memory (this process only).",
    )
    webhook_secret_kms_key_id: str = Field(
        default="alias/imposition-webhooks",
        description="KMS key (id, ARN or alias) that encrypts tenants' webhook signing secrets; the tenants "
        "table holds only the ciphertext (imposition.webhooks.secrets). imposition provision creates the alias's "
        "key on the local stack.",
    )
    webhook_allow_private_addresses: bool = Field(
        default=False, description="Allow webhook URLs whose host is or resolves to a loopback, private, "
        "link-local or other non-public address (local runs and tests only: otherwise an SSRF hole)."
    )

    # --- retention (docs/deploy-processes.md "Retention") ----------------------------------------------
    job_retention_days: int = Field(
        default=35, ge=1,
        description="A final job's item expires (DynamoDB TTL, JobItem.expires_at) this many days after it "
        "became final, and its objects (input, plate, previews: the bucket's lifecycle rule under tenants/) "
        "this many days after they were written; >= capacity_weeks x 7 (the capacity report reads the jobs).",
    )
    s3_abort_incomplete_upload_days: int = Field(
        default=1, ge=1,
        description="The bucket's lifecycle rule aborts a multipart upload left unfinished this many days.",
    )
    notifier_concurrency: int = Field(
        default=2, ge=1, description="Pool processes of a notifications worker (imposition process run notifier).",
    )
    stop_margin_s: float = Field(
        default=30.0, gt=0,
        description="Worker stopping: time beyond a job's engine and preview limits for its upload, commit and "
        "the pool's exit; part of each process's stop timeout (imposition.common.clocks.Clocks.stop_timeout_s).",
    )

    # --- engine (docs/design.md §6) ------------------------------------------------------------------
    engine: Literal["pikepdf", "pdftoolbox"] = "pikepdf"
    engine_time_limit_s: float = Field(default=300.0, gt=0)
    engine_memory_limit_bytes: int = Field(default=2 * 1024**3, gt=0)
    max_input_bytes: int = Field(default=512 * 1024**2, gt=0)
    max_pages: int = Field(default=10_000, ge=1)
    max_cells_per_sheet: int = Field(
        default=10_000, ge=1,
        description="Most cells (page copies) one side of a sheet may hold; step and repeat of a tiny page "
        "fails as too_many_cells before any is laid out.",
    )
    max_cells_per_job: int = Field(
        default=1_000_000, ge=1,
        description="Most cells all sides of one job may hold (step and repeat multiplies pages by copies): "
        "about 5 s and 300 MiB of the engine's budget; more fails as too_many_cells before any is laid out.",
    )
    # the sheet's non-printing edges when a layout names no press (docs/engine.md "Marks and the printable
    # area"): marks, targets, the colour bar and the slug keep out of them; pages may use them. Sources: a
    # sheet-fed offset gripper is about 10 mm (tillmann-druck.de, "Greiferrand": "in der Regel 10 mm");
    # tail and sides 5 mm, at least the Speedmaster presets' side lays (imposition.engine.presses).
    default_gripper_mm: float = Field(
        default=10.0, ge=0, le=100,
        description="With no press named and no gripper_mm: the strip at the sheet's lead edge (the foot of the "
        "front; head and foot for work and tumble) that marks keep out of.",
    )
    default_tail_mm: float = Field(
        default=5.0, ge=0, le=100,
        description="With no press named and no margin_mm: the strip at the sheet's trailing edge (the head of "
        "the front) that marks keep out of.",
    )
    default_side_mm: float = Field(
        default=5.0, ge=0, le=100,
        description="With no press named and no margin_mm: the strip at each side edge that marks keep out of.",
    )
    # binding limits of a saddle stitch (docs/engine.md "Binding limits"): past either the job fails as
    # binding_limit. A stitching head secures up to about 30 sheets (colorvisionprinting.com, "What is the
    # best page count for saddle stitch binding?": 30 sheets, 120 pages); 30 sheets of 0.1 mm paper are 6 mm.
    saddle_stitch_max_sheets: int = Field(
        default=30, ge=1, le=10_000,
        description="Most sheets a saddle stitch nests (4 pages each: a sheet folding N pages counts N / 4).",
    )
    saddle_stitch_max_thickness_mm: float = Field(
        default=6.0, gt=0, le=10_000,
        description="Thickest saddle-stitched booklet at the spine: sheets × 2 leaves × the layout's paper_caliper_mm.",
    )
    # the content budget (imposition.engine.budget; docs/design.md "Bomb-proof input"): checked while decoding,
    # before anything is drawn; past it the job fails as content_too_large
    max_decoded_bytes_per_stream: int = Field(
        default=256 * 1024**2, gt=0,
        description="Most bytes one stream the plate can carry may decode to (a page's content: its streams "
        "together; an image: its samples as declared). A flate bomb stops here after about 0.2 s of inflating.",
    )
    max_decoded_bytes_per_job: int = Field(
        default=8 * 1024**3, gt=0,
        description="Most bytes all streams the plate can carry may decode to, each counted once: about 10 times "
        "max_input_bytes of JPEG photographs, and at most about 6 s of inflating.",
    )
    max_content_operators_per_stream: int = Field(
        default=10_000_000, gt=0,
        description="Most operators one content stream (a page's content, a form, an appearance, a pattern) may hold.",
    )
    max_content_operators_per_job: int = Field(
        default=50_000_000, gt=0, description="Most operators all content streams of the input may hold together."
    )
    engine_warm_child: bool = Field(
        default=True,
        description="Keep one pre-started engine child per imposition worker process, reused from job to job "
        "(imposition.engine.isolation.keep_warm); `imposition impose` starts its child before its own start-up work. "
        "False: every job starts its child when it needs it (the former behaviour, ~0.1 s a job).",
    )
    engine_child_max_jobs: int = Field(
        default=200, ge=1, description="Jobs one warm engine child serves before it is replaced by a fresh one.",
    )
    engine_child_max_rss_bytes: int = Field(
        default=512 * 1024**2, gt=0,
        description="A warm engine child whose resident set is above this after a job is replaced (a fresh "
        "child is ~35 MiB; freed heap is not always returned to the system).",
    )
    job_previews: bool = Field(
        default=True, description="Every job writes a PNG preview of each side beside its plate (preview-<n>.png).",
    )
    preview_max_px: int = Field(
        default=1024, ge=16, le=8192,
        description="Longer side of a preview PNG, pixels (an SRA3 side at 1024 px is ~2.3 px per mm).",
    )
    preview_max_sides: int = Field(
        default=500, ge=1, le=1500,
        description="Most sides a plate's previews are rendered for; a larger plate ships without previews "
        "and with the warning preview_failed (the preview keys live on the job item, which DynamoDB "
        "caps at 400 KB: 1,500 keys of a 121-character tenant id fill about 280 KB).",
    )
    preview_time_limit_s: float = Field(
        default=60.0, gt=0,
        description="Wall-clock limit of rendering one plate's previews; past it the plate ships with the "
        "warning preview_failed.",
    )
    # --- pdfToolbox (docs/engine.md "pdfToolbox") ---------------------------------------------------
    pdftoolbox_path: str = Field(default="pdfToolbox", description="The pdfToolbox CLI executable (a name on PATH or a path).")
    pdftoolbox_process_plan: str = Field(
        default="", description="The process plan (.kfpx) whose Impose step runs the shipped runlist "
        "(imposition/engine/backends/pdftoolbox_impose.js); it reads the variables the engine passes.",
    )
    pdftoolbox_variables: dict[str, str] = Field(
        default_factory=dict, description="Site variables passed to every run (--setvariable=key:value); the "
        "layout's variables win over them.",
    )
    pdftoolbox_licence_servers: list[str] = Field(
        default_factory=list,
        description="callas License Servers as host or host:port (port 1400 by default), each passed as "
        "--licenseserver=...; several give pdfToolbox's failover. Empty: the node's local licence.",
    )
    pdftoolbox_licence_wait_s: float = Field(
        default=120.0, gt=0,
        description="The licence outage one run rides out: how long pdfToolbox keeps asking the licence servers "
        "for a licence before it gives up with exit code 100 (its --timeout_licenseserver). Must be below "
        "engine_time_limit_s: the wait is part of the run.",
    )
    pdftoolbox_licence_processes: int | None = Field(
        default=None, ge=1,
        description="Parallel processes the node's licence (a process cartridge) allows; with the pdftoolbox "
        "engine, slots_per_node (the worker's concurrency) must not exceed it, and a worker whose pool does "
        "takes no jobs. None: not checked (a credit cartridge or a local licence without a process limit).",
    )
    pdftoolbox_check_interval_s: float = Field(
        default=300.0, gt=0,
        description="How often an imposition worker of the pdftoolbox engine checks its engine and licence "
        "with a canary run, which spends a licence run (a process of the cartridge for its length, or its "
        "credits): never more often than this. A node that fails the check takes no jobs until one passes.",
    )
    pdftoolbox_closed_check_interval_s: float = Field(
        default=30.0, gt=0,
        description="How soon a node closed by a check that spent no licence run (the licence was refused, "
        "or more slots than the licence allows) checks again, so that it reopens "
        "soon after the licence is back; at most pdftoolbox_check_interval_s. A check that ran pdfToolbox "
        "and failed waits the full pdftoolbox_check_interval_s.",
    )
    pdftoolbox_check_time_limit_s: float = Field(
        default=30.0, gt=0,
        description="Wall-clock limit of one engine check; its licence wait is half of it.",
    )

    # --- observability (docs/design.md §8; package observability) -----------------------------------
    metrics_port: int = Field(
        default=0, ge=0, le=65_535,
        description="HTTP port of this worker node's Prometheus endpoint; 0 = no endpoint. One port per "
        "worker node: two workers on one host need two ports.",
    )
    metrics_address: str = Field(default="0.0.0.0", description="Address the metrics endpoint binds.")
    flower_address: str = Field(
        default="127.0.0.1",
        description="Address Flower binds (`imposition process run flower`): loopback, so only this host reaches "
        "it (an SSH tunnel, a reverse proxy); 0.0.0.0 publishes it (a container's port). It always asks for "
        "its login (imposition.observability.flower).",
    )
    flower_port: int = Field(default=5555, ge=1, le=65_535, description="Port Flower listens on.")
    flower_login_ciphertext: str = Field(
        default="", repr=False,
        description="Flower's HTTP basic-auth login (user:password) sealed with KMS under "
        "webhook_secret_kms_key_id, base64; `imposition process flower-login USER` makes it. Flower does "
        "not start without it.",
    )
    metrics_dir: str = Field(
        default_factory=lambda: os.path.join(tempfile.gettempdir(), "imposition-metrics"),
        description="Parent of each worker node's prometheus-client multiprocess directory (one "
        "sub-directory per node name, emptied when that worker starts).",
    )
    queue_wait_buckets_s: tuple[float, ...] = Field(
        default=(1, 5, 15, 30, 60, 120, 180, 300, 600, 1800, 3600),
        description="Histogram buckets of imposition_queue_wait_seconds; keep capacity_long_wait_s among them.",
    )
    job_duration_buckets_s: tuple[float, ...] = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
    sample_interval_s: float = Field(default=60.0, gt=0, description="Beat period of the queue sampler.")
    sqs_age_period_s: int = Field(
        default=60, ge=60,
        description="CloudWatch period of AWS/SQS ApproximateAgeOfOldestMessage (SQS publishes 1-minute data).",
    )
    sqs_age_lookback_s: int = Field(
        default=600, ge=60, description="How far back the sampler looks for the latest age datapoint."
    )
    events_redis_timeout_s: float = Field(
        default=2.0, gt=0, description="Connect/read timeout of the events Redis (side channel, recent counts)."
    )
    events_connect_retries: int = Field(
        default=2, ge=0, description="Connection retries to the events Redis before a worker runs without events."
    )
    events_retry_after_s: float = Field(
        default=30.0, gt=0, description="After a failed task-sent event, a publisher skips events this long."
    )
    recent_bucket_s: int = Field(
        default=60, ge=1, description="Width of the time buckets of the recent-event counts in Redis."
    )
    status_window_s: int = Field(
        default=3600, gt=0,
        description="imposition status: jobs submitted, defers and recoveries counted over this window.",
    )
    alert_starving_wait_p95_s: float = Field(
        default=180.0, gt=0,
        description="Alert ImpositionTenantStarving: a tenant's p95 queue wait over this while slots are free; "
        "keep it among queue_wait_buckets_s (imposition.observability.alerts).",
    )
    alert_rate_window_s: int = Field(
        default=900, ge=60, description="Alerts: the window of rate() and histogram quantiles (s).")
    alert_for_s: int = Field(
        default=600, ge=0, description="Alerts: how long a condition must hold before it fires (s).")
    alert_lease_recovered_per_hour: int = Field(
        default=3, ge=1,
        description="Alert ImpositionLeaseRecoveredSustained: more expired leases than this reclaimed for one "
        "tenant within an hour, for alert_for_s.",
    )
    alert_dlq_for_s: int = Field(
        default=300, ge=0, description="Alert ImpositionDeadLetterQueueNotEmpty: a DLQ non-empty this long (s).")
    alert_workers_down_for_s: int = Field(
        default=300, ge=0,
        description="Alert ImpositionWorkersDown: no imposition worker endpoint scraped up this long (s).")
    alert_capacity_window_days: int = Field(
        default=14, ge=1,
        description="Alert ImpositionSecondLicenceWarranted: the window it reads (days); less than "
        "prometheus_retention_days, so the data is there. `imposition capacity-report` reads capacity_weeks.",
    )
    prometheus_retention_days: int = Field(
        default=15, ge=1,
        description="The Prometheus retention the alert rules assume (days; Prometheus' default "
        "--storage.tsdb.retention.time is 15d).",
    )
    runbook_base_url: str = Field(
        default="https://imposition.example.com/docs", pattern=r"^https?://[^\s#?]*[^\s#?/]$",
        description="Where this repository's docs/ directory is published, an absolute http(s) URL without a "
        "trailing slash (e.g. https://git.example.com/press/imposition/-/blob/main/docs): each alert's runbook_url "
        "and each CloudWatch alarm's description link <this>/operations.md#<alert name in lower case>, so a page "
        "links its runbook. The default is a placeholder: set it, and regenerate the rules.",
    )
    prometheus_scrape_interval_s: int = Field(
        default=15, ge=1, description="make run: how often the local Prometheus scrapes each worker node (s).")
    capacity_weeks: int = Field(default=4, ge=1, description="Window of the capacity report, in weeks.")
    capacity_nodes: int = Field(
        default=1, ge=1, description="Worker nodes licensed now; slots total = nodes × slots_per_node."
    )
    capacity_utilisation_threshold: float = Field(
        default=0.8, gt=0, le=1, description="A working day is busy when slot utilisation exceeds this."
    )
    capacity_busy_day_share_threshold: float = Field(
        default=0.5, ge=0, lt=1, description="Second licence needs busy days on more than this share of days."
    )
    capacity_long_wait_s: float = Field(default=180.0, gt=0, description="A wait longer than this is long.")
    capacity_long_wait_share_threshold: float = Field(
        default=0.2, ge=0, lt=1, description="Second licence needs long waits on more than this share of jobs."
    )
    capacity_day_start_hour: int | None = Field(
        default=None, ge=0, le=23,
        description="The shop's working day starts at this hour (report tz). Unset (with the end): inferred "
        "from the arrivals, and the capacity report says so.")
    capacity_day_end_hour: int | None = Field(
        default=None, ge=1, le=24,
        description="The shop's working day ends at this hour (report tz); set with the start, or neither.")
    capacity_inferred_hours_share: float = Field(
        default=0.95, gt=0, le=1,
        description="Working hours left unset are the shortest span of whole hours holding this share of the "
        "working days' arrivals (capacity report, simulate).")
    capacity_timezone: str = Field(default="UTC", description="IANA zone the report's days are counted in.")
    # --- the simulator (imposition simulate; calibrated by make bench-sched) -----------------------
    sim_poll_latency_s: float = Field(
        default=0.15, ge=0,
        description="Simulator: from a message becoming due to its acquire (an idle worker's SQS receive and the "
        "acquire transaction). Default: make bench-sched's hand-off runs on the local stack (moto, 2 quiet cores, "
        "2026-12-01/02: 0.08-0.19 s); measure your own cluster's with bench/sim_check.py's calibration.",
    )
    sim_wake_latency_s: float = Field(
        default=0.01, ge=0,
        description="Simulator: from a release to the woken job's publish (the hand-off is in the release's own "
        "transaction; measured 0.005-0.015 s); measured as sim_poll_latency_s.",
    )
    sim_park_s: float = Field(
        default=0.2, ge=0, description="Simulator: worker time of a delivery that parks or defers its job "
        "(measured 0.2-0.3 s for the timer's deferrals on the local stack)."
    )
    sim_delayed_recheck_s: float = Field(
        default=1.0, ge=0,
        description="Simulator: how often a long poll already waiting rechecks for delayed copies (timer "
        "deferrals, retry backoffs) that became due; a send to the queue makes it recheck at once. moto (the local "
        "stack) rechecks once a second (measured 1.0 s by make bench-sched's timer runs), AWS SQS: 0 (a copy is "
        "seen when due); measured as sim_poll_latency_s.",
    )
    sim_job_overhead_s: float = Field(
        default=0.1, ge=0,
        description="Simulator: lease time of a job beyond its engine duration (job read, fenced commit); added "
        "to the durations of a workload file (history and bench durations are lease times already).",
    )
    sim_delivery_order: Literal["arrival", "fair"] = Field(
        default="arrival",
        description="Simulator: SQS delivery order: 'arrival' (moto's) or 'fair' (round-robin over tenants, an "
        "approximation of SQS fair queues).",
    )
    sim_borrow_burst_cap: int = Field(
        default=8, ge=1,
        description="imposition simulate --policy borrow: burst cap of tenants whose tier names none.",
    )

    @model_validator(mode="after")
    def _stack_principals_and_tags_are_valid(self) -> "Settings":
        """Reject an operator principal that is not an IAM role, user or account root ARN, and a tag
        IAM or the tagged services would refuse (AWS's tag rules: key 1-128 characters, value up to
        256, no 'aws:' prefix, 50 tags a resource)."""
        for principal in self.operator_principals:
            if not _IAM_PRINCIPAL.match(principal):
                raise ValueError(f"operator_principals: {principal!r} is not an IAM role, user or root ARN "
                                 "(arn:aws:iam::<12 digits>:role/NAME, :user/NAME or :root)")
        if len(self.resource_tags) > MAX_RESOURCE_TAGS - 1:
            raise ValueError(f"resource_tags: {len(self.resource_tags)} tags; at most {MAX_RESOURCE_TAGS - 1} "
                             f"beside 'service' ({MAX_RESOURCE_TAGS} a resource)")
        for key, value in self.resource_tags.items():
            if not 1 <= len(key) <= 128 or key.lower().startswith("aws:") or key == "service" or len(value) > 256:
                raise ValueError(f"resource_tags: {key!r}={value!r}: a key is 1-128 characters, not 'service' "
                                 "(the stack name's) nor starting 'aws:'; a value at most 256 characters")
        return self

    @model_validator(mode="after")
    def _clocks_agree(self) -> "Settings":
        """Reject clocks that break the rules of docs/design.md §4 (checked by :meth:`imposition.common.clocks.Clocks.check`,
        their one home), and bounds in the wrong order."""
        from imposition.common.clocks import Clocks  # noqa: PLC0415 - clocks is built on this module; its rules live there

        Clocks.from_settings(self)  # ClockError is a ValueError: pydantic reports it as this setting's error
        if self.sqs_receive_backoff_initial_s > self.sqs_receive_backoff_max_s:
            raise ValueError(
                f"sqs_receive_backoff_initial_s={self.sqs_receive_backoff_initial_s:g} must be <= "
                f"sqs_receive_backoff_max_s={self.sqs_receive_backoff_max_s:g}"
            )
        if self.node_ttl_s < 2 * self.heartbeat_interval_s:
            raise ValueError(
                f"node_ttl_s={self.node_ttl_s:g} must be >= 2 x heartbeat_interval_s={self.heartbeat_interval_s:g} "
                "(a node survives one missed beat)"
            )
        if self.retry_backoff_base_s > self.retry_backoff_max_s:
            raise ValueError(
                f"retry_backoff_base_s={self.retry_backoff_base_s} must be <= "
                f"retry_backoff_max_s={self.retry_backoff_max_s}"
            )
        if self.admission_in_flight_expiry_s < self.webhook_give_up_after_s:
            raise ValueError(
                f"admission_in_flight_expiry_s={self.admission_in_flight_expiry_s} must be >= "
                f"webhook_give_up_after_s={self.webhook_give_up_after_s:g} (a job must not stop counting "
                "as in flight while its webhook is still being delivered)"
            )
        return self

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> "Settings":
        """Reject a default that its own limit would refuse (attempt budget, cap)."""
        if self.max_attempts > self.max_attempts_limit:
            raise ValueError(
                f"max_attempts={self.max_attempts} must be <= max_attempts_limit={self.max_attempts_limit}"
            )
        if self.default_cap > self.max_cap:
            raise ValueError(f"default_cap={self.default_cap} must be <= max_cap={self.max_cap}")
        return self

    @model_validator(mode="after")
    def _licence_fits(self) -> "Settings":
        """With the pdftoolbox engine: the licence wait fits in a run's time limit, and the node runs no
        more jobs at once than its licence allows processes."""
        if self.engine != "pdftoolbox":
            return self
        if self.pdftoolbox_licence_wait_s >= self.engine_time_limit_s:
            raise ValueError(
                f"pdftoolbox_licence_wait_s={self.pdftoolbox_licence_wait_s:g} must be < "
                f"engine_time_limit_s={self.engine_time_limit_s:g} (the wait for a licence is part of a run)"
            )
        processes = self.pdftoolbox_licence_processes
        if processes is not None and self.slots_per_node > processes:
            raise ValueError(
                f"slots_per_node={self.slots_per_node} must be <= pdftoolbox_licence_processes={processes} "
                "(each slot runs one pdfToolbox process; the licence allows no more at once)"
            )
        return self

    @model_validator(mode="after")
    def _prefetch_recheck_is_a_timer(self) -> "Settings":
        """Reject a look for room more often than every millisecond: kombu's event loop runs at most
        ten timers a turn and then sleeps up to 1 s, so a near-zero timer would do worse than 0."""
        if 0 < self.sqs_prefetch_recheck_s < 0.001:
            raise ValueError(
                f"sqs_prefetch_recheck_s={self.sqs_prefetch_recheck_s} must be 0 (kombu's own re-check) or >= 0.001"
            )
        return self

    @model_validator(mode="after")
    def _job_item_holds_its_fields(self) -> "Settings":
        """Reject a job-item bound that a submission with every field at its limit would break
        (the bounds of docs/operations.md, "Submission fields")."""
        need = submission_fields_max_bytes(self)
        if need > self.max_job_item_bytes:
            raise ValueError(f"max_job_item_bytes={self.max_job_item_bytes} must be >= {need}, the largest "
                             "submission (max_layout_bytes, token, input_key and file name at their limits)")
        return self

    @model_validator(mode="after")
    def _capacity_day_is_sane(self) -> "Settings":
        """Reject a working day that ends before it starts, or half set (observability's capacity report)."""
        if (self.capacity_day_start_hour is None) != (self.capacity_day_end_hour is None):
            raise ValueError(
                f"capacity_day_start_hour={self.capacity_day_start_hour} and capacity_day_end_hour="
                f"{self.capacity_day_end_hour}: set both (the shop's hours) or neither (inferred from the arrivals)"
            )
        if self.capacity_day_start_hour is not None and self.capacity_day_end_hour is not None \
                and self.capacity_day_start_hour >= self.capacity_day_end_hour:
            raise ValueError(
                f"capacity_day_start_hour={self.capacity_day_start_hour} must be < "
                f"capacity_day_end_hour={self.capacity_day_end_hour}"
            )
        return self

    @model_validator(mode="after")
    def _retention_holds_what_is_read(self) -> "Settings":
        """Reject a retention shorter than the windows that read it: the capacity report reads
        capacity_weeks of jobs; the second-licence alert reads alert_capacity_window_days of metrics."""
        if self.job_retention_days < self.capacity_weeks * 7:
            raise ValueError(
                f"job_retention_days={self.job_retention_days} must be >= capacity_weeks x 7="
                f"{self.capacity_weeks * 7} (imposition capacity-report reads that many days of jobs)"
            )
        if self.alert_capacity_window_days >= self.prometheus_retention_days:
            raise ValueError(
                f"alert_capacity_window_days={self.alert_capacity_window_days} must be < prometheus_retention_days="
                f"{self.prometheus_retention_days} (the alert would read data Prometheus no longer keeps)"
            )
        return self

    def dead_letter_queue(self, queue: str) -> str:
        """Name of the dead-letter queue of ``queue`` (one DLQ per work queue, docs/design.md §3)."""
        return f"{queue}{self.dead_letter_suffix}"

    @property
    def work_queues(self) -> tuple[str, ...]:
        """The SQS standard queues workers consume, each provisioned with its own DLQ."""
        return (self.imposition_queue, self.maintenance_queue, self.notifications_queue)




def submission_fields_max_bytes(settings: "Settings") -> int:
    """The largest job item a submission can write under ``settings``, bytes: the layout, the token
    (4 bytes a character at most), the input key and the file name at their limits, plus
    :data:`JOB_ITEM_FIXED_BYTES`."""
    return (settings.max_layout_bytes + 4 * settings.idempotency_token_max_len + S3_KEY_MAX_BYTES
            + settings.file_name_max_bytes + JOB_ITEM_FIXED_BYTES)


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once from the environment."""
    return Settings()
