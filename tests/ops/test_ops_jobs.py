"""``imposition jobs list``, ``job show``, ``job download``, ``job cancel``, ``job retry`` on the real
local stack (moto server, Redis); the audit after each test checks the tenant counters."""

from __future__ import annotations

import time
import uuid

from tests.admission.helpers import LAYOUT, SAMPLE_PDF, queue_messages
from tests.ops.helpers import cli, cli_json, queue_bodies


def _submit(tenant: str, token: str | None = None) -> str:
    from tasks.submission import submit

    return submit(SAMPLE_PDF, tenant_id=tenant, token=token or uuid.uuid4().hex, layout=LAYOUT)


def _job(job_id: str):
    from leases.models import JobItem

    return JobItem.get(job_id, consistent_read=True)


def _tenant(tenant: str):
    from leases.models import TenantItem

    return TenantItem.get(tenant, consistent_read=True)


def test_cancel_of_a_waiting_job_moves_its_counter_confirms_admission_and_queues_its_webhook(new_tenant):
    from imposition import admission
    from leases.tenants import set_cap
    from imposition.common.settings import get_settings

    tenant = new_tenant()
    set_cap(tenant, 0)  # paused: the job is parked at the door, no message
    job_id = _submit(tenant)
    assert _job(job_id).status == "waiting" and int(_tenant(tenant).waiting) == 1
    assert admission.in_flight(tenant) == 1
    before = queue_messages(get_settings().notifications_queue)

    out = cli("job", "cancel", job_id).stdout
    assert f"cancelled job {job_id}" in out
    job = _job(job_id)
    assert (job.status, job.error_code) == ("failed", "cancelled")
    assert job.waiting_tenant is None and job.finished_at is not None
    assert (int(_tenant(tenant).waiting), int(_tenant(tenant).queued or 0)) == (0, 0)
    assert admission.in_flight(tenant) == 0  # confirmed through admission's own path
    assert job.webhook_status == "pending"  # told through job_finished: a delivery round published
    assert queue_messages(get_settings().notifications_queue) == before + 1
    cli("job", "cancel", job_id, expect=2)  # final now: refused, nothing written


def test_cancel_of_a_queued_job_frees_its_room_for_the_oldest_waiting_job(new_tenant):
    from leases.tenants import set_cap
    from imposition.common.settings import get_settings

    tenant = new_tenant()
    set_cap(tenant, 1)
    first = _submit(tenant)  # queued: a message in the imposition queue
    second = _submit(tenant)  # no room left: waiting
    assert (_job(first).status, _job(second).status) == ("queued", "waiting")
    cli("job", "cancel", first)
    assert _job(first).status == "failed"
    woken = _job(second)
    assert (woken.status, woken.woken_by) == ("queued", "cancel")  # the hand-off ran
    kwargs = queue_bodies(get_settings().imposition_queue)
    assert sorted(k["job_id"] for k in kwargs) == sorted([first, second])  # the woken one was published
    # the cancelled job's own message is harmless: its acquire finds it final
    from leases import transactions
    from leases.errors import JobNotQueued

    try:
        transactions.acquire(first, tenant, "w")
        raise AssertionError("a cancelled job was acquired")
    except JobNotQueued as exc:
        assert exc.status == "failed"


def test_cancel_of_a_running_job_is_refused_and_changes_nothing(new_tenant):
    from leases import transactions

    tenant = new_tenant()
    job_id = _submit(tenant)
    lease = transactions.acquire(job_id, tenant, "w")
    result = cli("job", "cancel", job_id, expect=2)
    assert "running" in result.output
    assert _job(job_id).status == "running"
    transactions.commit_success(lease, output_key="k", sheets=1, sides=2)
    cli("job", "cancel", "no-such-job", expect=1)


def test_retry_of_a_failed_job_queues_and_publishes_it_with_a_new_budget_and_its_history(new_tenant):
    from leases import transactions
    from imposition.common.settings import get_settings
    from imposition.webhooks.events import job_event

    tenant = new_tenant()
    job_id = _submit(tenant)
    queue_bodies(get_settings().imposition_queue)  # the first message, consumed
    lease = transactions.acquire(job_id, tenant, "w")
    transactions.fail_job(lease, error="engine said no", error_code="engine_failure")
    first_event = job_event(_job(job_id))["id"]

    assert "queued" in cli("job", "retry", job_id, "--max-attempts", "2").stdout
    job = _job(job_id)
    assert (job.status, int(job.attempts), int(job.max_attempts), int(job.retries)) == ("queued", 1, 3, 1)
    assert job.error is None and job.finished_at is None and job.webhook_status is None
    assert [(h["error_code"], h["attempts"]) for h in job.history] == [("engine_failure", 1)]
    assert [k["job_id"] for k in queue_bodies(get_settings().imposition_queue)] == [job_id]
    lease = transactions.acquire(job_id, tenant, "w")  # the new attempt runs under the budget
    transactions.fail_job(lease, error="again", error_code="engine_failure")
    assert job_event(_job(job_id))["id"] != first_event  # a new event: tenants dedupe on the id
    shown = cli_json("job", "show", job_id)
    assert shown["retries"] == 1 and shown["history"][0]["error"] == "engine said no"
    cli("job", "retry", job_id, "--max-attempts", "0", expect=2)
    assert _job(job_id).status == "failed"


def test_retry_of_a_failed_job_whose_tenant_is_full_parks_it(new_tenant):
    from leases import transactions
    from leases.tenants import set_cap

    tenant = new_tenant()
    job_id = _submit(tenant)
    lease = transactions.acquire(job_id, tenant, "w")
    transactions.fail_job(lease, error="x", error_code="engine_failure")
    set_cap(tenant, 0)
    assert "waiting" in cli("job", "retry", job_id).stdout
    assert _job(job_id).status == "waiting" and int(_tenant(tenant).waiting) == 1
    cli("job", "retry", job_id, expect=2)  # not failed any more
    cli("job", "cancel", job_id)  # leaves the counters exact for the audit


def test_job_show_gives_layout_as_an_object_and_times_in_utc_beside_the_raw_values(new_tenant):
    tenant = new_tenant()
    job_id = _submit(tenant)
    shown = cli_json("job", "show", job_id)
    assert shown["layout"]["layout"] == "saddle_stitch"  # an object, not JSON inside a string
    assert isinstance(shown["submitted_at"], float)
    assert shown["submitted_at_utc"].endswith("Z") and shown["submitted_at_utc"].startswith(
        time.strftime("%Y-%m-%dT", time.gmtime(shown["submitted_at"])))
    assert shown["waited_s"] is None and shown["ran_s"] is None
    cli("job", "show", "no-such-job", expect=1)


def test_job_download_writes_the_plate_and_refuses_a_job_without_one(new_tenant, tmp_path):
    from leases import transactions
    from tasks import storage

    tenant = new_tenant()
    job_id = _submit(tenant)
    cli("job", "download", job_id, "-o", str(tmp_path / "p.pdf"), expect=1)  # queued: no plate yet
    lease = transactions.acquire(job_id, tenant, "w")
    key = f"tenants/{tenant}/jobs/{job_id}/plate.pdf"
    storage.upload(SAMPLE_PDF, key)
    transactions.commit_success(lease, output_key=key, sheets=2, sides=4)
    out = tmp_path / "plate.pdf"
    cli("job", "download", job_id, "-o", str(out))
    assert out.read_bytes() == SAMPLE_PDF.read_bytes()
    missing = tmp_path / "no" / "such" / "x.pdf"
    assert "does not exist" in cli("job", "download", job_id, "-o", str(missing), expect=1).output
    assert not (tmp_path / "no").exists()


def test_job_download_by_token_writes_to_out_tenant_and_says_where(new_tenant, tmp_path, monkeypatch):
    """Issue 42: without -o it wrote ``<id>.pdf`` into the current folder (the repository root in the
    README's flow) and named it by a relative path."""
    from leases import transactions
    from tasks import storage

    tenant = new_tenant()
    job_id = _submit(tenant)
    token = cli_json("job", "show", job_id)["token"]
    lease = transactions.acquire(job_id, tenant, "w")
    key = f"tenants/{tenant}/jobs/{job_id}/plate.pdf"
    storage.upload(SAMPLE_PDF, key)
    transactions.commit_success(lease, output_key=key, sheets=2, sides=4)
    monkeypatch.chdir(tmp_path)
    out = cli("job", "download", token).stdout
    written = tmp_path / "out" / tenant / f"{job_id}.pdf"
    assert written.read_bytes() == SAMPLE_PDF.read_bytes()
    assert out == f"wrote the plate of job {job_id} ({tenant}) to {written} ({written.stat().st_size} bytes)\n"


def test_job_download_of_previews_of_a_job_that_has_none_says_so(new_tenant, tmp_path):
    from leases import transactions
    from tasks import storage

    tenant = new_tenant()
    job_id = _submit(tenant)
    lease = transactions.acquire(job_id, tenant, "w")
    key = f"tenants/{tenant}/jobs/{job_id}/plate.pdf"
    storage.upload(SAMPLE_PDF, key)
    transactions.commit_success(lease, output_key=key, sheets=2, sides=4,
                                warnings=[{"code": "preview_failed", "message": "no preview of the plate"}])
    assert cli_json("job", "show", job_id)["preview_keys"] == []
    result = cli("job", "download", job_id, "-o", str(tmp_path / "p.pdf"), "--previews", str(tmp_path), expect=1)
    assert "has no previews (preview_failed" in result.output and not (tmp_path / "p.pdf").exists()


def test_jobs_list_for_one_tenant_reads_only_its_items_through_the_index(new_tenant):
    from leases.models import JobItem, JobStatus, TenantItem
    from tests.support.dynamo_faults import dynamodb_clients

    tenants = [new_tenant(f"l{i}") for i in range(10)]
    t0 = time.time() - 3600
    with JobItem.batch_write() as batch:
        for n in range(2000):
            tenant = tenants[n % 10]
            batch.save(JobItem(uuid.uuid4().hex, tenant_id=tenant, token=f"t{n}", max_attempts=3, layout=LAYOUT,
                               input_key=f"tenants/{tenant}/x.pdf", submitted_at=t0 + n,
                               status=(JobStatus.FAILED if n % 20 == 3 else JobStatus.SUCCEEDED).value,
                               error_code="engine_failure" if n % 20 == 3 else None, sheets=2,
                               started_at=t0 + n + 1, finished_at=t0 + n + 3))
    for tenant in tenants:
        TenantItem(tenant, in_flight=0).save()
    target = tenants[3]
    operations: list[str] = []
    foreign: list[str] = []

    def count(event_name: str, parsed=None, **_: object) -> None:
        operations.append(event_name.rsplit(".", 1)[-1])
        for item in (parsed or {}).get("Items", []):
            if item.get("tenant_id", {}).get("S") != target:
                foreign.append(item["tenant_id"]["S"])

    clients = dynamodb_clients()
    for client in clients:
        client.meta.events.register("after-call.dynamodb", count, unique_id="count-jobs-list")
    try:
        started = time.monotonic()
        out = cli("jobs", "list", "--tenant", target, "--limit", "1000").stdout
        elapsed_s = time.monotonic() - started
    finally:
        for client in clients:
            client.meta.events.unregister("after-call.dynamodb", unique_id="count-jobs-list")
    lines = out.splitlines()
    assert len(lines) == 1 + 200 and lines[0].split()[:3] == ["job", "tenant", "status"]
    assert operations[0] == "GetItem", operations  # the tenant's registration (an unknown one is refused)
    assert set(operations[1:]) == {"Query"} and len(operations) >= 3, operations  # paginated, never a scan
    assert foreign == []  # no other tenant's item was read
    submitted = [line.split()[3] for line in lines[1:]]
    assert submitted == sorted(submitted, reverse=True)  # newest first
    print(f"\njobs list --tenant over 2,000 jobs of 10 tenants: {elapsed_s:.2f} s, {len(operations)} Query requests")
    failed = cli_json("jobs", "list", "--tenant", target, "--status", "failed", "--json", "--limit", "1000")
    assert len(failed) == 100 and {(j["status"], j["error_code"]) for j in failed} == {("failed", "engine_failure")}
    assert len(cli_json("jobs", "list", "--tenant", target, "--json")) == 50  # Settings.jobs_list_limit
    before = time.time()
    recent = cli_json("jobs", "list", "--tenant", target, "--since", "30m", "--json", "--limit", "1000")
    after = time.time()

    def submitted_since(t: float) -> int:  # the target's jobs are n = 3, 13, … 1993
        return sum(1 for n in range(3, 2000, 10) if t0 + n >= t - 1800)

    assert submitted_since(after) <= len(recent) <= submitted_since(before) and len(recent) >= 15
    assert all(j["submitted_at"] >= before - 1800 - 1 for j in recent)
    everyone = cli_json("jobs", "list", "--limit", "25", "--json")
    assert len(everyone) == 25 and everyone[0]["submitted_at"] == t0 + 1999
    cli("jobs", "list", "--since", "soon", expect=2)


def test_retry_goes_through_admission_rate_limit_and_in_flight_cap_with_a_typed_refusal(new_tenant):
    from imposition import admission
    from leases import transactions

    tenant = new_tenant()
    admission.set_limits(tenant, rate_limit_per_min=1)
    first = _submit(tenant)
    transactions.fail_job(transactions.acquire(first, tenant, "w"), error="x", error_code="engine_failure")
    refused = cli("job", "retry", first, expect=2).output
    assert "RateLimited" not in refused and "rate limit of 1 jobs per minute" in refused
    assert _job(first).status == "failed" and admission.in_flight(tenant) == 1  # nothing written or lost

    admission.set_limits(tenant, rate_limit_per_min=100, in_flight_cap=1)
    assert admission.confirm(first) is True  # the tenant was told of the failure
    second = _submit(tenant)  # holds the tenant's one in-flight place
    refused = cli("job", "retry", first, expect=2).output
    assert "in_flight=1" in refused and "cap of 1" in refused
    assert _job(first).status == "failed" and admission.in_flight(tenant) == 1
    cli("job", "cancel", second)  # confirmed: the place is free again
    assert "queued" in cli("job", "retry", first).stdout
    assert admission.in_flight(tenant) == 1  # the retried job is counted once, until confirmed
    assert admission.confirm(first) is True and admission.in_flight(tenant) == 0
    cli("job", "cancel", first)
