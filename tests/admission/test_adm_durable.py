"""Durable idempotency and tenant isolation of admission, against the session's moto server
(SQS, DynamoDB, S3) and the real Redis (database 13, this session's namespace).

"Redis restarted empty" is simulated by deleting this session's namespace only
(``tests.conftest.forget_redis_keys``), never a whole database.
"""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner
from pynamodb.exceptions import DoesNotExist

from imposition import admission
from imposition.admission import AdmissionRefused, AdmissionUnavailable, DuplicateJobId, DuplicateSubmission
from imposition.admission.claims import read_claim
from imposition.admission.control import in_flight_key, job_key, rate_key, token_hash, token_key
from imposition.admission.limits import set_limits
from leases.models import TOKEN_CLAIM_TTL_ATTRIBUTE, JobItem, TokenClaimItem
from imposition.common import aws
from imposition.cli.main import main as cli
from imposition.common.settings import get_settings
from imposition.common.tenancy import tenant_prefix
from tasks.submission import submit, submit_job
from tests.admission.helpers import LAYOUT, SAMPLE_PDF, jobs_of, queue_messages
from tests.conftest import REDIS_NAMESPACE, forget_redis_keys


def _queue() -> str:
    return get_settings().imposition_queue


def _redis_restarts_empty() -> None:
    """Everything this session's admission knew is gone (its namespace only)."""
    assert forget_redis_keys(get_settings().redis_url) > 0, "nothing to forget: the test is not testing anything"


def _audit_is_clean() -> None:
    result = CliRunner().invoke(cli, ["audit", "--json"])
    assert result.exit_code == 0, result.output


def _snapshot(client, keys) -> dict[str, object]:
    """Type and full content of each Redis key (sorted sets with their scores)."""
    out: dict[str, object] = {}
    for key in keys:
        kind = client.type(key)
        if kind == "zset":
            out[key] = ("zset", client.zrange(key, 0, -1, withscores=True))
        elif kind == "string":
            out[key] = ("string", client.get(key))
        else:
            out[key] = (kind, None)
    return out


# --- 1. durable idempotency ------------------------------------------------------------------------


def test_tokens_submitted_before_redis_restarted_empty_are_refused_with_their_job_ids(redis_db, uploaded, new_tenant):
    tenant = new_tenant()
    key = uploaded(tenant)
    first = {f"order-{i}": submit_job(tenant_id=tenant, token=f"order-{i}", input_key=key, layout=LAYOUT)
             for i in range(4)}
    assert admission.in_flight(tenant) == 4
    _redis_restarts_empty()

    for token, job_id in first.items():
        with pytest.raises(DuplicateSubmission) as refused:
            submit_job(tenant_id=tenant, token=token, input_key=key, layout=LAYOUT)
        assert refused.value.job_id == job_id
        assert submit_job(tenant_id=tenant, token=token, input_key=key, layout=LAYOUT,
                          on_duplicate="return") == job_id
        assert redis_db.get(token_key(tenant, token)) == job_id  # the fast check knows it again
    assert sorted(j.job_id for j in jobs_of(tenant)) == sorted(first.values())
    assert queue_messages(_queue()) == 4
    assert admission.in_flight(tenant) == 0  # the refused attempts left no in-flight entry behind
    assert redis_db.zcard(rate_key(tenant)) == 0
    _audit_is_clean()


def test_submit_after_redis_restarted_empty_uploads_nothing_that_stays(redis_db, fresh_aws, new_tenant):
    tenant = new_tenant()
    job_id = submit(SAMPLE_PDF, tenant_id=tenant, token="booklet-1", layout=LAYOUT)
    _redis_restarts_empty()
    with pytest.raises(DuplicateSubmission) as refused:
        submit(SAMPLE_PDF, tenant_id=tenant, token="booklet-1", layout=LAYOUT)
    assert refused.value.job_id == job_id
    listing = aws.s3().list_objects_v2(Bucket=get_settings().bucket, Prefix=tenant_prefix(tenant))
    assert [o["Key"] for o in listing.get("Contents", [])] == [JobItem.get(job_id).input_key]
    assert [j.job_id for j in jobs_of(tenant)] == [job_id]
    assert queue_messages(_queue()) == 1


def test_claim_is_written_with_the_job_and_expires_after_the_idempotency_ttl(redis_db, uploaded, new_tenant):
    tenant = new_tenant()
    key = uploaded(tenant)
    before = time.time()
    job_id = submit_job(tenant_id=tenant, token="order-ttl", input_key=key, layout=LAYOUT)
    claim = TokenClaimItem.get(tenant, token_hash("order-ttl"), consistent_read=True)
    assert claim.job_id == job_id
    ttl_s = get_settings().idempotency_ttl_s
    assert before + ttl_s <= claim.expires_at <= time.time() + ttl_s + 1
    assert isinstance(claim.expires_at, int)  # DynamoDB TTL: integer epoch seconds
    described = aws.client("dynamodb").describe_time_to_live(TableName=get_settings().tokens_table)
    assert described["TimeToLiveDescription"] == {"TimeToLiveStatus": "ENABLED",
                                                  "AttributeName": TOKEN_CLAIM_TTL_ATTRIBUTE}


def test_an_expired_claim_does_not_block_its_token_even_before_ttl_deletion(redis_db, uploaded, new_tenant):
    tenant = new_tenant()
    key = uploaded(tenant)
    set_limits(tenant, idempotency_ttl_s=1)
    first = submit_job(tenant_id=tenant, token="short-lived", input_key=key, layout=LAYOUT)
    deadline = time.time() + 10
    while read_claim(tenant, "short-lived") is not None:  # expires_at is a whole second, ≤ 2 s away
        assert time.time() < deadline, "the claim never expired"
        time.sleep(0.2)
    time.sleep(1.1)  # past expires_at by the condition's own clock as well
    _redis_restarts_empty()
    stale = TokenClaimItem.get(tenant, token_hash("short-lived"), consistent_read=True)
    assert stale.job_id == first  # still in the table: DynamoDB's TTL deletion has not run
    second = submit_job(tenant_id=tenant, token="short-lived", input_key=key, layout=LAYOUT)
    assert second != first
    assert TokenClaimItem.get(tenant, token_hash("short-lived"), consistent_read=True).job_id == second
    assert sorted(j.job_id for j in jobs_of(tenant)) == sorted([first, second])


def test_a_lost_answer_to_the_claim_transaction_is_read_back_one_job(redis_db, uploaded, new_tenant):
    from tests.support.dynamo_faults import LostResponses

    tenant = new_tenant()
    key = uploaded(tenant)
    with LostResponses("TransactWriteItems") as lost:
        job_id = submit_job(tenant_id=tenant, token="ambiguous", input_key=key, layout=LAYOUT)
    assert lost.lost == 1
    assert read_claim(tenant, "ambiguous").job_id == job_id
    assert [j.job_id for j in jobs_of(tenant)] == [job_id]
    assert queue_messages(_queue()) == 1


def test_contention_past_the_retries_fails_closed_and_leaves_nothing(redis_db, uploaded, new_tenant):
    from tests.support.dynamo_faults import DynamoFaults

    tenant = new_tenant()
    key = uploaded(tenant)
    with DynamoFaults(rate=1.0, seed=1, kinds=("conflict",), operations={"TransactWriteItems"}) as faults:
        with pytest.raises(AdmissionUnavailable) as unavailable:
            submit_job(tenant_id=tenant, token="busy", input_key=key, layout=LAYOUT)
    assert faults.injected["conflict"] == get_settings().lease_conflict_attempts
    assert "nothing published" in str(unavailable.value)
    assert jobs_of(tenant) == [] and read_claim(tenant, "busy") is None
    assert admission.in_flight(tenant) == 0 and redis_db.get(token_key(tenant, "busy")) is None
    assert queue_messages(_queue()) == 0
    job_id = submit_job(tenant_id=tenant, token="busy", input_key=key, layout=LAYOUT)  # the same token, later
    assert [j.job_id for j in jobs_of(tenant)] == [job_id]


def test_failed_publish_undoes_the_claim_with_the_job(redis_db, uploaded, new_tenant):
    from imposition.cli.provision import provision

    tenant = new_tenant()
    key = uploaded(tenant)
    aws.sqs().delete_queue(QueueUrl=aws.queue_url(_queue()))  # a real failure of the real publish
    try:
        with pytest.raises(Exception) as failed:
            submit_job(tenant_id=tenant, token="retry-me", input_key=key, layout=LAYOUT)
        assert any(entry.name == "publish_job" for entry in failed.traceback), "failed elsewhere than the publish"
        with pytest.raises(DoesNotExist):
            TokenClaimItem.get(tenant, token_hash("retry-me"), consistent_read=True)
        assert jobs_of(tenant) == []
    finally:
        provision()
    job_id = submit_job(tenant_id=tenant, token="retry-me", input_key=key, layout=LAYOUT)
    assert [j.job_id for j in jobs_of(tenant)] == [job_id]


# --- 2. keys that cannot collide -------------------------------------------------------------------


def test_key_shaped_job_ids_of_one_tenant_change_nothing_of_another(redis_db, uploaded, new_tenant):
    from leases.tenants import create_tenant

    victim, other = "job", new_tenant("other")  # a tenant literally named like the old job-key segment
    victim_key, other_key = uploaded(victim), uploaded(other)
    create_tenant(victim)
    victim_jobs = [submit_job(tenant_id=victim, token=f"v-{i}", input_key=victim_key, layout=LAYOUT) for i in range(2)]
    victim_keys = sorted(redis_db.keys(f"{REDIS_NAMESPACE}:*"))
    assert in_flight_key(victim) in victim_keys and rate_key(victim) in victim_keys
    before = _snapshot(redis_db, victim_keys)
    in_flight_before = admission.in_flight(victim)

    shaped = ["rate", "in_flight", "tokens", "token", "job", "admission", "recent", "cap_defer", "_", "-",
              REDIS_NAMESPACE, token_hash("v-0"), "job-rate", "_-_"]
    taken = []
    for i, job_id in enumerate(shaped + victim_jobs):
        try:
            assert submit_job(tenant_id=other, token=f"o-{i}", input_key=other_key, layout=LAYOUT,
                              job_id=job_id) == job_id
        except DuplicateJobId as refused:
            assert refused.job_id == job_id and refused.tenant_id == other
            taken.append(job_id)
    assert taken == victim_jobs

    assert _snapshot(redis_db, victim_keys) == before
    assert admission.in_flight(victim) == in_flight_before == 2
    assert all(JobItem.get(j).tenant_id == victim for j in victim_jobs)
    assert submit_job(tenant_id=victim, token="v-after", input_key=victim_key, layout=LAYOUT)
    assert admission.confirm(victim_jobs[0]) is True  # its job → tenant mapping survived
    assert admission.in_flight(victim) == 2
    assert admission.in_flight(other) == len(shaped)
    _audit_is_clean()


@pytest.mark.parametrize("redis_forgot", [False, True], ids=["redis-knows-it", "redis-forgot-it"])
def test_a_job_id_of_another_tenant_is_refused_and_changes_nothing_of_it(redis_db, uploaded, new_tenant, redis_forgot):
    owner, other = new_tenant("owner"), new_tenant("other")
    owner_key, other_key = uploaded(owner), uploaded(other)
    submit_job(tenant_id=owner, token="mine", input_key=owner_key, layout=LAYOUT, job_id="shared-1")
    if redis_forgot:
        _redis_restarts_empty()
    owner_job = JobItem.get("shared-1", consistent_read=True).attribute_values
    mapping = redis_db.get(job_key("shared-1"))

    with pytest.raises(DuplicateJobId) as refused:
        submit_job(tenant_id=other, token="theirs", input_key=other_key, layout=LAYOUT, job_id="shared-1")
    assert isinstance(refused.value, AdmissionRefused)  # the CLI's exit 2
    assert "shared-1" in str(refused.value) and owner not in str(refused.value)

    assert JobItem.get("shared-1", consistent_read=True).attribute_values == owner_job
    assert redis_db.get(job_key("shared-1")) == mapping
    assert jobs_of(other) == []
    assert admission.in_flight(other) == 0 and redis_db.zcard(rate_key(other)) == 0
    assert read_claim(other, "theirs") is None and redis_db.get(token_key(other, "theirs")) is None
    assert queue_messages(_queue()) == 1
    # the refused tenant's token is free for another id
    assert submit_job(tenant_id=other, token="theirs", input_key=other_key, layout=LAYOUT, job_id="shared-2")
    if not redis_forgot:
        assert admission.confirm("shared-1") is True and admission.in_flight(owner) == 0
    _audit_is_clean()


# --- 3. bounded messages ---------------------------------------------------------------------------

HUGE = 5_000_000


@pytest.mark.parametrize("case", ["foreign input_key", "on_duplicate", "webhook url"])
def test_errors_echo_only_a_short_prefix_of_a_huge_value(redis_db, fresh_aws, new_tenant, case):
    from imposition.webhooks.endpoints import check_url

    tenant = new_tenant()
    with pytest.raises(Exception) as caught:
        if case == "foreign input_key":
            submit_job(tenant_id=tenant, token="t", input_key="tenants/someone-else/" + "x" * HUGE, layout=LAYOUT)
        elif case == "on_duplicate":
            submit_job(tenant_id=tenant, token="t", input_key=f"tenants/{tenant}/in.pdf", layout=LAYOUT,
                       on_duplicate="r" * HUGE)
        else:
            check_url("ftp://" + "h" * HUGE)
    assert len(str(caught.value)) < 1_000, (type(caught.value).__name__, len(str(caught.value)))
