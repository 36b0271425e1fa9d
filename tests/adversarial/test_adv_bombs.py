"""Decompression bombs as real jobs: one real imposition worker, a real notifications worker and a real
webhook receiver. Each bomb fails its own job once as ``content_too_large`` (never retried), the
tenant's webhook reports it, the worker stays up and the slot comes back: the tenant's next job runs.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.adversarial.support import a5_pdf, bomb_pdf, module_worker, submit_bytes
from tests.support.cluster import Cluster
from tests.support.processes import start_worker, wait_for


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """The imposition worker (2 slots) and a notifications worker."""
    from imposition.common.settings import get_settings

    with module_worker(tmp_path_factory, "adv-bomb-imposer") as imposer:
        notifier = start_worker(tmp_path_factory.mktemp("adv-bomb-notifier"), queue=get_settings().notifications_queue,
                                concurrency=1, name="adv-bomb-notifier")
        try:
            yield imposer, notifier
        finally:
            notifier.stop()


@pytest.fixture
def receiver(tmp_path):
    from devstack.stack import ReceiverProcess

    process = ReceiverProcess(tmp_path / "receiver.log")
    yield process
    process.stop()


def test_bombs_fail_their_own_jobs_and_the_tenant_is_told(workers, receiver, tmp_path):
    from leases.audit import audit
    from leases.models import JobItem, TenantItem
    from leases.tenants import set_cap
    from imposition.webhooks import delivery
    from imposition.webhooks.endpoints import set_webhook
    from imposition.webhooks.events import job_event

    imposer, notifier = workers
    tenant = f"adv-{uuid.uuid4().hex[:10]}"
    set_cap(tenant, 1)  # one slot: the good job after the bombs runs only if every bomb gave its slot back
    set_webhook(tenant, receiver.url(tenant), "s" * 40)
    bombs = {where: submit_bytes(tenant, bomb_pdf(tmp_path / f"{where}.pdf", where).read_bytes(), max_attempts=3)
             for where in ("content", "form", "appearance", "image")}
    good = submit_bytes(tenant, a5_pdf())
    for where, job_id in bombs.items():
        job = Cluster.final(job_id, timeout_s=180)
        assert (job.status, job.error_code, int(job.attempts)) == ("failed", "content_too_large", 1), (where, job.error)
        assert "max_decoded_bytes_per_stream=" in job.error and "Traceback" not in job.error, job.error
        print(f"\n[bomb] worker job, {where}: failed as {job.error_code} after {job.finished_at - job.started_at:.2f} s "
              f"of its lease ({job.error})")
    assert Cluster.final(good, timeout_s=180).status == "succeeded"  # the slot came back, the worker runs

    def told(job_id: str) -> bool:
        return JobItem.get(job_id, consistent_read=True).webhook_status == delivery.DELIVERED

    for where, job_id in bombs.items():
        wait_for(lambda: told(job_id), 60,  # noqa: B023 - waited for within this iteration
                 what=f"the webhook of the {where} bomb's job")
        event = job_event(JobItem.get(job_id, consistent_read=True))  # the body the receiver was sent
        assert (event["status"], event["error_code"]) == ("failed", "content_too_large")
    assert set(bombs.values()) <= set(receiver.tenant_counts(tenant)["jobs"])
    assert imposer.proc.poll() is None and notifier.proc.poll() is None
    assert "Traceback" not in imposer.log()
    assert int(TenantItem.get(tenant, consistent_read=True).in_flight) == 0
    deadline = time.monotonic() + 30
    while not audit([tenant]).clean and time.monotonic() < deadline:  # the audit confirms over snapshots
        time.sleep(1)
    assert audit([tenant]).clean
