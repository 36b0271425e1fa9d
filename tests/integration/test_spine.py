"""The spine end to end: submission → SQS → a real worker → lease → engine → S3 → job item."""

from __future__ import annotations

import io
from pathlib import Path

import pikepdf
import pytest
from click.testing import CliRunner

from leases.models import JobItem, LeaseItem, TenantItem
from leases.tenants import set_cap
from imposition.common import aws
from imposition.cli.main import main as cli
from imposition.common.settings import get_settings
from imposition.common.tenancy import plate_key
from tasks.submission import submit
from tests.support.inputs import submit_uploaded
from tests.support.processes import wait_for

CASES = Path(__file__).resolve().parents[1] / "data" / "cases"
SADDLE_A4 = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}
N_UP_SRA3 = {"layout": "n_up", "sheet": "SRA3", "orientation": "portrait", "columns": 2, "rows": 2,
             "gutter_mm": 5, "crop_marks": True}
MM = 72 / 25.4


def final_job(job_id: str, timeout_s: float = 60) -> JobItem:
    """Wait until the job is succeeded or failed and return it."""
    def done():
        job = JobItem.get(job_id, consistent_read=True)
        return job if job.status in ("succeeded", "failed") else None
    return wait_for(done, timeout_s, what=f"job {job_id} to finish")


def plate(job: JobItem) -> pikepdf.Pdf:
    body = aws.s3().get_object(Bucket=get_settings().bucket, Key=job.output_key)["Body"].read()
    return pikepdf.open(io.BytesIO(body))


def sheet_size_mm(pdf: pikepdf.Pdf, index: int = 0) -> tuple[float, float]:
    box = pdf.pages[index].mediabox
    return round(float(box[2] - box[0]) / MM), round(float(box[3] - box[1]) / MM)


@pytest.mark.parametrize(
    "case, sample, layout, sides, size_mm",
    [
        ("1: 8 A5 pages, saddle stitch on A4 landscape", "a5_8p.pdf", SADDLE_A4, 4, (297, 210)),
        ("2: 13 pages padded to 16", "a5_13p_odd.pdf", SADDLE_A4, 8, (297, 210)),
        ("3: 2x2 n-up on SRA3 portrait", "a5_8p.pdf", N_UP_SRA3, 2, (320, 450)),
    ],
)
def test_handed_case_through_the_cluster(imposition_worker, tenant_id, case, sample, layout, sides, size_mm):
    job_id = submit(CASES / sample, tenant_id=tenant_id, token=f"tok-{case[:1]}", layout=layout)
    job = final_job(job_id)
    assert job.status == "succeeded", job.error
    assert job.output_key == plate_key(tenant_id, job_id)
    assert (job.attempts, job.sides) == (1, sides)
    assert job.submitted_at <= job.first_received_at <= job.started_at <= job.finished_at
    with plate(job) as pdf:
        assert len(pdf.pages) == sides
        assert all(sheet_size_mm(pdf, i) == size_mm for i in range(sides))
    assert TenantItem.get(tenant_id, consistent_read=True).in_flight == 0
    assert not list(LeaseItem.scan(LeaseItem.tenant_id == tenant_id))


@pytest.mark.parametrize("sample, code", [("not_a_pdf.pdf", "not_a_pdf"), ("zero_pages.pdf", "no_pages"),
                                          ("encrypted_user_pw_8p.pdf", "password_required")])
def test_bad_input_fails_at_once_and_frees_the_slot(imposition_worker, tenant_id, sample, code):
    job_id = submit_uploaded(CASES / sample, tenant_id=tenant_id, token="bad", layout=SADDLE_A4)  # past the door
    job = final_job(job_id)
    assert (job.status, job.error_code, job.attempts) == ("failed", code, 1)
    assert job.error and job.output_key is None
    assert TenantItem.get(tenant_id, consistent_read=True).in_flight == 0
    assert imposition_worker.proc.poll() is None, "the worker must survive bad input"


def test_cap_hit_parks_without_failing_or_counting_an_attempt(imposition_worker, tenant_id):
    set_cap(tenant_id, 0)  # no room: the job is parked at the door, no message is published
    job_id = submit(CASES / "a5_8p.pdf", tenant_id=tenant_id, token="held", layout=SADDLE_A4)
    held = JobItem.get(job_id, consistent_read=True)
    assert (held.status, held.attempts, held.error, held.defer_count) == ("waiting", 0, None, 1)
    result = CliRunner().invoke(cli, ["tenant", "set-cap", tenant_id, "--default"])  # room again: woken at once
    assert result.exit_code == 0, result.output
    job = final_job(job_id)
    assert (job.status, job.attempts, job.woken_by) == ("succeeded", 1, "cap_change")
    assert job.defer_count == 1  # parked once, never polled


def test_warnings_reach_the_job_item_job_show_and_the_webhook_payload(imposition_worker, tenant_id):
    import json

    from click.testing import CliRunner

    from imposition.cli.main import main
    from imposition.webhooks.events import job_event

    # the handed case's pages have no bleed to keep; a sheet printed to its edges (margin_mm and gripper_mm 0)
    # holds every mark, so bleed_reduced is the one warning
    layout = {**N_UP_SRA3, "bleed_mm": 3, "margin_mm": 0, "gripper_mm": 0}
    job = final_job(submit(CASES / "a5_8p.pdf", tenant_id=tenant_id, token="warned", layout=layout))
    assert job.status == "succeeded", job.error
    assert [w["code"] for w in job.warnings] == ["bleed_reduced"] and "bleed_mm=3" in job.warnings[0]["message"]
    assert job_event(job)["warnings"] == job.warnings
    shown = CliRunner().invoke(main, ["job", "show", job.job_id])
    assert shown.exit_code == 0 and json.loads(shown.output)["warnings"] == job.warnings
    strict = final_job(submit(CASES / "a5_8p.pdf", tenant_id=tenant_id, token="strict",
                              layout={**layout, "on_warning": "fail"}))
    assert (strict.status, strict.error_code, strict.attempts) == ("failed", "bleed_reduced", 1)


def test_a_pdf_cut_in_half_fails_damaged_through_the_cluster(imposition_worker, tenant_id, tmp_path):
    data = (CASES / "a5_8p.pdf").read_bytes()
    half = tmp_path / "half.pdf"
    half.write_bytes(data[: len(data) // 2])
    job = final_job(submit_uploaded(half, tenant_id=tenant_id, token="half", layout=SADDLE_A4,
                                    file_name="order 17 – brochure.pdf"))
    assert (job.status, job.error_code, job.attempts) == ("failed", "damaged", 1)
    assert "cannot be read (pages" in job.error and job.output_key is None
    # named by the file the tenant sent, not by the worker's copy of it
    assert job.error.startswith("order 17 – brochure.pdf: ") and "input.pdf" not in job.error
