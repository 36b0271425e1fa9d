"""The whole loop on real processes: submit → imposition worker → job_finished → notifications worker →
signed webhook → demo receiver → confirm → the tenant's in-flight count drops."""

from __future__ import annotations

import pytest

from imposition import admission
from tasks.submission import submit
from tests.admission.helpers import LAYOUT, SAMPLE_PDF
from tests.support.inputs import submit_uploaded
from tests.support.processes import start_worker, wait_for
from tests.webhooks.conftest import job_item
from imposition.webhooks import delivery
from imposition.webhooks.endpoints import set_webhook

@pytest.fixture(scope="module")
def imposer(tmp_path_factory):
    """A real imposition worker with two slots."""
    worker = start_worker(tmp_path_factory.mktemp("imposer"), queue="imposition", concurrency=2, name="imposer-wh")
    yield worker
    worker.stop()


def test_finished_jobs_are_signed_delivered_and_confirmed(imposer, notifier, redis_db, new_tenant, webhook_secret,
                                                          start_receiver, tmp_path):
    not_a_pdf = tmp_path / "not_a_pdf.pdf"
    not_a_pdf.write_bytes(b"this is plain text, not a PDF\n")  # bad input: fails at once, no retry
    receiver = start_receiver()
    tenant = new_tenant()
    set_webhook(tenant, receiver.url(tenant), webhook_secret)
    ok = submit(SAMPLE_PDF, tenant_id=tenant, token="e2e-ok", layout=LAYOUT)
    bad = submit_uploaded(not_a_pdf, tenant_id=tenant, token="e2e-bad", layout=LAYOUT)  # past the door
    assert admission.in_flight(tenant) == 2

    def delivered() -> bool:
        return all(job_item(j).webhook_status == delivery.DELIVERED for j in (ok, bad))

    wait_for(delivered, 90, what="both jobs' webhooks delivered")
    assert job_item(ok).status == "succeeded" and job_item(bad).status == "failed"
    counts = receiver.tenant_counts(tenant)
    assert counts["jobs"] == {ok: 1, bad: 1} and counts["confirmed"] == 2 and counts["rejected"] == 0
    assert admission.in_flight(tenant) == 0
    assert "Received task: imposition.deliver_webhook" not in imposer.log()  # never in an imposition slot
