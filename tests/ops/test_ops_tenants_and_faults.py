"""``imposition tenant list|show``, and the small CLI faults of issue 14, on the real local stack."""

from __future__ import annotations

import uuid

from tests.admission.helpers import LAYOUT, SAMPLE_PDF
from tests.ops.helpers import cli, cli_json

LAYOUT_TEXT = '{"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}'


def test_tenant_list_and_show_give_limits_webhook_and_counters_but_never_the_secret(new_tenant, monkeypatch):
    from leases.tenants import set_cap
    from tasks.submission import submit

    tenant, other = new_tenant(), new_tenant()
    set_cap(tenant, 0)  # paused (a paused tier cannot borrow)
    set_cap(other, 4, burst_cap=6)
    secret = "s" * 40
    monkeypatch.setenv("OPS_TEST_SECRET", secret)
    cli("tenant", "set-webhook", tenant, "https://127.0.0.1:9/hooks", "--secret-env", "OPS_TEST_SECRET")
    cli("tenant", "set-limits", tenant, "--rate-limit-per-min", "7")
    submit(SAMPLE_PDF, tenant_id=tenant, token=uuid.uuid4().hex, layout=LAYOUT)  # parked: cap 0
    submit(SAMPLE_PDF, tenant_id=other, token=uuid.uuid4().hex, layout=LAYOUT)  # queued
    shown = cli_json("tenant", "show", tenant)
    assert (shown["cap"], shown["burst_cap"], shown["rate_limit_per_min"]) == (0, 0, 7)
    assert (shown["in_flight"], shown["queued"], shown["waiting"], shown["admission_in_flight"]) == (0, 0, 1, 1)
    assert shown["webhook_url"] == "https://127.0.0.1:9/hooks" and shown["webhook_secret_set"] is True
    assert secret not in cli("tenant", "show", tenant).output
    table = cli("tenant", "list").stdout
    assert secret not in table
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert rows[other][1:8] == ["4", "6", "100", "500", "0", "1", "0"]
    listed = {t["tenant_id"]: t for t in cli_json("tenant", "list", "--json")}
    assert listed[tenant]["waiting"] == 1 and "webhook_secret" not in listed[tenant]
    cli("job", "cancel", cli_json("jobs", "list", "--tenant", tenant, "--json")[0]["job_id"])


def test_set_cap_minus_one_says_the_cap_is_out_of_range():
    result = cli("tenant", "set-cap", "acme", "-1", expect=2)
    assert "-1 is not in the range" in result.output and "No such option" not in result.output


def test_impose_refuses_an_output_whose_folder_is_missing_or_a_file(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "x.pdf"
    result = cli("impose", str(SAMPLE_PDF), "--layout", LAYOUT_TEXT, "-o", str(missing), expect=1)
    assert "does not exist" in result.output and not (tmp_path / "no").exists()
    a_file = tmp_path / "hostname"
    a_file.write_text("x")
    result = cli("impose", str(SAMPLE_PDF), "--layout", LAYOUT_TEXT, "-o", str(a_file / "x.pdf"), expect=1)
    assert "is not a folder" in result.output and "cannot read" not in result.output


def test_an_empty_layout_names_the_missing_field(tmp_path):
    result = cli("impose", str(SAMPLE_PDF), "--layout", "{}", "-o", str(tmp_path / "x.pdf"), expect=2)
    assert "layout: missing field" in result.output and "discriminator" not in result.output


def test_slug_without_a_job_id_is_said(tmp_path):
    layout = '{"layout": "saddle_stitch", "sheet": "A3", "orientation": "landscape", "slug": true}'
    result = cli("impose", str(SAMPLE_PDF), "--layout", layout, "-o", str(tmp_path / "x.pdf"))
    assert "slug: true without --job-id" in result.output


def test_submit_takes_layout_json_text_and_refuses_empty_or_non_pdf_files_before_uploading(new_tenant, tmp_path):
    from imposition.common import aws
    from imposition.common.settings import get_settings
    from tests.admission.helpers import jobs_of

    tenant = new_tenant()
    job_id = cli("submit", "--tenant", tenant, "--token", "json-text", "--layout", LAYOUT_TEXT,
                 str(SAMPLE_PDF)).stdout.strip()
    assert [j.job_id for j in jobs_of(tenant)] == [job_id]
    for name, data in (("empty.pdf", b""), ("notes.pdf", b"plain text, not a PDF\n")):
        path = tmp_path / name
        path.write_bytes(data)
        result = cli("submit", "--tenant", tenant, "--token", name, "--layout", LAYOUT_TEXT, str(path), expect=2)
        assert result.output.startswith("Error: not_a_pdf: input PDF ") and str(path) in result.output
    listing = aws.s3().list_objects_v2(Bucket=get_settings().bucket, Prefix=f"tenants/{tenant}/")
    assert len(listing.get("Contents", [])) == 1  # only the good one was uploaded
    assert len(jobs_of(tenant)) == 1
    cli("job", "cancel", job_id)
