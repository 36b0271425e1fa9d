"""The door (leases.waiting.admit, withdraw) as a submission runs it, on the real local DynamoDB: the job,
its token's claim and its tenant's counter in one transaction; refusals typed by the item refused;
conflicts tried again; the undo deletes only what is the job's."""

from __future__ import annotations

import time

import pytest
from pynamodb.exceptions import DoesNotExist

from imposition.admission.claims import token_claim
from imposition.admission.control import token_hash
from leases import tenants, transactions, waiting
from leases.errors import AdmitRefused, LeaseContention
from leases.models import JobItem, TokenClaimItem
from leases.reads import job_or_none
from tests.leases.helpers import claim_of, counters, new_job
from tests.support.dynamo_faults import DynamoFaults


def _claim_holder(job: JobItem) -> str | None:
    try:
        return TokenClaimItem.get(job.tenant_id, token_hash(job.token), consistent_read=True).job_id
    except DoesNotExist:
        return None


def test_admit_writes_job_claim_and_counter_and_withdraw_undoes_all_three(tenant_id):
    tenants.ensure_tenant(tenant_id)
    job = new_job(tenant_id)
    claim = claim_of(job)
    assert waiting.admit(job, claim, door=False) is True
    assert (job_or_none(job.job_id).status, _claim_holder(job)) == ("queued", job.job_id)
    assert counters(tenant_id) == {"in_flight": 0, "queued": 1, "waiting": 0, "occupied": 1}

    assert waiting.withdraw(job, claim) is True
    assert (job_or_none(job.job_id), _claim_holder(job)) == (None, None)
    assert counters(tenant_id) == {"in_flight": 0, "queued": 0, "waiting": 0, "occupied": 0}
    assert waiting.withdraw(job, claim) is False  # idempotent: nothing left to undo


def test_refusals_name_the_item_refused_and_its_holder(tenant_id):
    tenants.ensure_tenant(tenant_id)
    first = new_job(tenant_id)
    waiting.admit(first, claim_of(first), door=False)

    same_token = new_job(tenant_id)
    same_token.token = first.token
    with pytest.raises(AdmitRefused) as claim_held:
        waiting.admit(same_token, claim_of(same_token), door=False)
    assert (claim_held.value.item, claim_held.value.holder) == (AdmitRefused.CLAIM, first.job_id)

    same_id = new_job("other-" + tenant_id, job_id=first.job_id)
    tenants.ensure_tenant(same_id.tenant_id)
    with pytest.raises(AdmitRefused) as id_taken:
        waiting.admit(same_id, claim_of(same_id), door=False)
    assert (id_taken.value.item, id_taken.value.holder) == (AdmitRefused.JOB, first.job_id)

    assert job_or_none(same_token.job_id) is None and _claim_holder(same_id) is None  # nothing written
    assert job_or_none(first.job_id).tenant_id == tenant_id
    assert counters(tenant_id)["queued"] == 1 and counters(same_id.tenant_id)["queued"] == 0


def test_an_expired_claim_is_taken_and_the_undo_of_its_old_job_leaves_it(tenant_id):
    tenants.ensure_tenant(tenant_id)
    old = new_job(tenant_id)
    old_claim = token_claim(old, ttl_s=1, now=time.time() - 10)  # expired long ago
    waiting.admit(old, old_claim, door=False)
    later = new_job(tenant_id)
    later.token = old.token
    waiting.admit(later, claim_of(later), door=False)  # an expired claim does not hold its token
    assert _claim_holder(later) == later.job_id

    assert waiting.withdraw(old, old_claim) is True  # its job and count go; the claim is the later job's
    assert job_or_none(old.job_id) is None and _claim_holder(later) == later.job_id
    assert counters(tenant_id)["queued"] == 1
    waiting.withdraw(later, claim_of(later))


def test_the_undo_of_a_job_that_moved_on_leaves_the_job_and_its_claim(tenant_id):
    tenants.ensure_tenant(tenant_id)
    job = new_job(tenant_id)
    claim = claim_of(job)
    waiting.admit(job, claim, door=False)
    lease = transactions.acquire(job.job_id, tenant_id, "w/1")  # a worker took it (its publish did go out)

    assert waiting.withdraw(job, claim) is False
    assert job_or_none(job.job_id).status == "running" and _claim_holder(job) == job.job_id
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2)


def test_conflicts_are_tried_again_and_contention_past_the_retries_writes_nothing(tenant_id):
    tenants.ensure_tenant(tenant_id)
    admitted = []
    with DynamoFaults(rate=0.5, seed=11, kinds=("conflict",), operations={"TransactWriteItems"}) as faults:
        for _ in range(4):
            job = new_job(tenant_id)
            waiting.admit(job, claim_of(job), door=False)
            admitted.append(job)
    assert faults.injected["conflict"] >= 1, faults.injected
    assert [_claim_holder(j) for j in admitted] == [j.job_id for j in admitted]
    assert counters(tenant_id)["queued"] == 4

    job = new_job(tenant_id)
    with DynamoFaults(rate=1.0, seed=1, kinds=("conflict",), operations={"TransactWriteItems"}):
        with pytest.raises(LeaseContention):
            waiting.admit(job, claim_of(job), door=False)
    assert (job_or_none(job.job_id), _claim_holder(job)) == (None, None)
    assert counters(tenant_id)["queued"] == 4
    for job in admitted:
        waiting.withdraw(job, claim_of(job))
