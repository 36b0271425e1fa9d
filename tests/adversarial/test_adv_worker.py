"""Adversarial jobs and messages against one real imposition worker (shared by the module).

* Damaged PDFs that crash the engine's child with an untyped exception must fail their own job
  once as ``damaged`` (bad input is never retried), not three times as ``engine_crashed``.
* A message whose ``tenant_id`` is not the job's tenant must not run the job under the other
  tenant's cap.
"""

from __future__ import annotations

import uuid

import pytest

from tests.adversarial.support import a5_pdf, module_worker, submit_bytes
from tests.admission.helpers import queue_messages as queue_depth
from tests.support.cluster import Cluster


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    with module_worker(tmp_path_factory, "adv-imposer") as process:
        yield process


@pytest.fixture
def tenant() -> str:
    return f"adv-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("pdf", [
    pytest.param(a5_pdf(page_entries=b"/Contents 7"), id="contents-is-an-integer"),
    pytest.param(a5_pdf(count=999_999_999), id="page-tree-count-lies"),
])
def test_malformed_pdf_fails_once_as_damaged_not_retried_as_engine_crash(worker, tenant, pdf):
    """Both files open and plan; drawing raised AttributeError / QpdfRuntimeError in the child,
    which ``imposition.engine.child`` does not map, so the job was retried as ``engine_crashed`` until out
    of attempts, with a Python traceback (worker paths) as the tenant-facing error."""
    from leases.models import TenantItem

    job = Cluster.final(submit_bytes(tenant, pdf, max_attempts=3))
    assert (job.status, job.error_code, int(job.attempts)) == ("failed", "damaged", 1), job.error
    assert "Traceback" not in job.error and 'File "' not in job.error
    assert int(TenantItem.get(tenant, consistent_read=True).in_flight) == 0


def test_message_naming_another_tenant_does_not_run_the_job_under_that_tenants_cap(worker, tenant):
    """The acquire transaction checks the cap of the tenant the *message* names and never compares
    it with the job item's tenant: a copy of a message with another tenant id ran a job whose own
    tenant was paused (cap 0)."""
    from leases.models import JobItem, TenantItem
    from leases.tenants import set_cap
    from imposition.common.settings import get_settings
    from devstack.stack import wait_for
    from tasks.imposition_task import impose

    set_cap(tenant, 0)  # paused: its jobs are parked until the cap is raised
    job_id = submit_bytes(tenant, a5_pdf())
    parked = JobItem.get(job_id, consistent_read=True).status  # "waiting": parked at the door
    other = f"{tenant}-other"
    dlq = get_settings().dead_letter_queue(get_settings().imposition_queue)
    dlq_before = queue_depth(dlq)
    impose.apply_async(kwargs={"tenant_id": other, "job_id": job_id}, task_id=job_id,
                       queue=get_settings().imposition_queue, MessageGroupId=f"tenant-{other}")

    def job_left_queued_or_copy_refused():
        status = JobItem.get(job_id, consistent_read=True).status
        return status != parked or queue_depth(dlq) > dlq_before

    wait_for(job_left_queued_or_copy_refused, 90, what="the forged copy to reach the dead-letter queue")
    assert JobItem.get(job_id, consistent_read=True).status == parked == "waiting"  # never ran
    assert queue_depth(dlq) == dlq_before + 1  # refused as poison, not dropped quietly
    assert "refusing message" in worker.log() and other in worker.log()
    assert TenantItem.count(other) == 0 or int(TenantItem.get(other, consistent_read=True).in_flight) == 0
