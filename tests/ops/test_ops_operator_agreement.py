"""What a new operator tripped on (issue 34), driven through ``imposition`` as an operator types it
and through the submission API as a caller calls it, on the real local stack (moto server, Redis):
one refusal line for an unknown tenant everywhere, usage errors with the line that matters first,
jobs found by token and file name, and every submission field bounded at the door."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.admission.helpers import LAYOUT, SAMPLE_PDF, jobs_of
from tests.ops.helpers import cli, cli_json

LAYOUT_TEXT = json.dumps(LAYOUT)


def _unknown_line(tenant: str) -> str:
    from imposition.admission import UnknownTenant

    return f"Error: {UnknownTenant(tenant)}\n"


def test_an_unknown_tenant_is_the_same_one_line_refusal_exit_2_in_every_command(new_tenant, registration_required,
                                                                                 monkeypatch):
    stranger = new_tenant("acmee", register=False)
    monkeypatch.setenv("OPS_AGREE_SECRET", "s" * 40)
    commands = [
        ("jobs", "list", "--tenant", stranger),
        ("job", "show", "some-token", "--tenant", stranger),
        ("tenant", "show", stranger),
        ("tenant", "set-cap", stranger, "3"),
        ("tenant", "set-limits", stranger, "--rate-limit-per-min", "5"),
        ("tenant", "set-webhook", stranger, "https://127.0.0.1:9/h", "--secret-env", "OPS_AGREE_SECRET"),
        ("audit", "--tenant", stranger),
        ("submit", "--tenant", stranger, "--token", "t1", "--layout", LAYOUT_TEXT, str(SAMPLE_PDF)),
    ]
    for args in commands:
        result = cli(*args, expect=2)
        assert result.stdout == "", args
        assert result.stderr == _unknown_line(stranger), (args, result.stderr)
    from leases.waiting import read_tenant

    assert read_tenant(stranger) is None and jobs_of(stranger) == []  # nothing registered or written


def test_a_usage_error_prints_the_line_that_matters_first():
    for args, expected in ((("tenant", "set-cap", "acme", "-1"), "Error: Invalid value for '[CAP]'"),
                           (("jobs", "list", "--status", "lost"), "Error: Invalid value for '--status'"),
                           (("jobs", "lst"), "Error: No such command 'lst'"),
                           (("--bogus",), "Error: No such option '--bogus'"),
                           (("tenant", "show", "Acme"), "Error: Invalid value for 'TENANT_ID': tenant_id='Acme'")):
        lines = cli(*args, expect=2).stderr.splitlines()
        assert lines[0].startswith(expected), (args, lines)
        assert all(not line.startswith("Error") for line in lines[1:]), lines  # the usage lines come after


def test_jobs_are_found_by_token_and_by_file_name_and_job_show_takes_a_token(new_tenant, registration_required,
                                                                            tmp_path):
    from leases.tenants import set_cap

    tenant, other = new_tenant("shop"), new_tenant("other")
    set_cap(tenant, 0)  # paused: the jobs wait, nothing runs
    set_cap(other, 0)
    brochure = tmp_path / "brochure spring.pdf"
    shutil.copy(SAMPLE_PDF, brochure)
    first = cli("submit", "--tenant", tenant, "--token", "order-17", "--layout", LAYOUT_TEXT, str(brochure)).stdout.strip()
    second = cli("submit", "--tenant", tenant, "--token", "order-18", "--layout", LAYOUT_TEXT, str(SAMPLE_PDF)).stdout.strip()
    elsewhere = cli("submit", "--tenant", other, "--token", "order-17", "--layout", LAYOUT_TEXT,
                    str(SAMPLE_PDF)).stdout.strip()

    assert [j["job_id"] for j in cli_json("jobs", "list", "--tenant", tenant, "--token", "order-17", "--json")] == [first]
    assert sorted(j["job_id"] for j in cli_json("jobs", "list", "--token", "order-17", "--json")) == sorted([first, elsewhere])
    by_file = cli_json("jobs", "list", "--file", "brochure spring.pdf", "--json")
    assert [(j["job_id"], j["file_name"]) for j in by_file] == [(first, "brochure spring.pdf")]
    assert cli_json("jobs", "list", "--tenant", tenant, "--file", SAMPLE_PDF.name, "--json")[0]["job_id"] == second
    assert "brochure spring.pdf" in cli("jobs", "list", "--tenant", tenant).stdout  # the table's file column
    assert cli("jobs", "list", "--token", "order-99").stdout.strip().startswith("no jobs of any of the ")

    assert cli_json("job", "show", "order-18")["job_id"] == second  # a token named by one job
    assert cli_json("job", "show", "order-17", "--tenant", other)["job_id"] == elsewhere
    ambiguous = cli("job", "show", "order-17", expect=2).stderr
    assert first in ambiguous and elsewhere in ambiguous  # two tenants' jobs: both named, pick one
    assert cli_json("job", "show", first)["token"] == "order-17"  # a job id as before
    assert cli("job", "show", "order-99", expect=1).stderr == "Error: no job with id or token 'order-99'\n"
    for job_id in (first, second, elsewhere):
        cli("job", "cancel", job_id)


@pytest.mark.parametrize("key_chars", [1_100, 2_000, 300_000, 1_000_000, 5 * 1024**2])
def test_an_oversized_input_key_is_refused_naming_the_field_and_s3s_limit_and_nothing_is_written(
        new_tenant, registration_required, key_chars):
    from imposition import admission
    from imposition.common.tenancy import InvalidKey, tenant_prefix
    from tasks.imposition_task import impose

    tenant = new_tenant()
    prefix = tenant_prefix(tenant)
    key = prefix + "k" * (key_chars - len(prefix))
    with pytest.raises(InvalidKey) as refused:
        impose.delay(tenant_id=tenant, token="t-key", input_key=key, layout=LAYOUT)
    assert str(refused.value).startswith("input_key: ") and "1024 bytes" in str(refused.value)
    assert len(str(refused.value)) < 200  # the value itself is never echoed
    assert jobs_of(tenant) == [] and admission.in_flight(tenant) == 0


def test_a_key_within_s3s_limit_but_outside_the_tenants_prefix_or_with_a_control_character_is_refused(
        new_tenant, registration_required):
    from imposition.common.tenancy import ForeignKeyRefused, InvalidKey, tenant_prefix
    from tasks.submission import submit_job

    tenant, other = new_tenant(), new_tenant()
    for key, error in ((tenant_prefix(other) + "in.pdf", ForeignKeyRefused),
                       (tenant_prefix(tenant) + "../x.pdf", ForeignKeyRefused),
                       (tenant_prefix(tenant) + "a\x00.pdf", InvalidKey),
                       (tenant_prefix(tenant) + "é" * 600, InvalidKey)):  # 600 characters, 1,200 bytes
        with pytest.raises(error):
            submit_job(tenant_id=tenant, token="t", input_key=key, layout=LAYOUT)
    assert jobs_of(tenant) == []


def test_every_free_form_field_is_bounded_at_the_door_and_the_largest_job_item_is_far_below_dynamodbs(
        new_tenant, registration_required):
    from imposition import admission
    from imposition.common.settings import DYNAMODB_MAX_ITEM_BYTES, get_settings, submission_fields_max_bytes
    from imposition.common.tenancy import tenant_prefix
    from leases.models import JobItem
    from tasks.submission import SubmissionFieldError, submit_job

    s = get_settings()
    tenant = new_tenant()
    key = tenant_prefix(tenant) + "k" * (1024 - len(tenant_prefix(tenant)))
    refusals = {
        "token": dict(token="t" * (s.idempotency_token_max_len + 1)),
        "file_name": dict(file_name="f" * (s.file_name_max_bytes + 1)),
        "layout": dict(layout=json.dumps({**LAYOUT, "pad": " " * s.max_layout_bytes})),
    }
    for field, change in refusals.items():
        with pytest.raises(SubmissionFieldError) as refused:
            submit_job(**{"tenant_id": tenant, "token": "t", "input_key": key, "layout": LAYOUT, **change})
        assert refused.value.field == field and str(refused.value).startswith(f"{field}: ")
        assert str(refused.value.limit) in str(refused.value)
    with pytest.raises(SubmissionFieldError, match="file_name: a file name only"):
        submit_job(tenant_id=tenant, token="t", input_key=key, layout=LAYOUT, file_name="../etc/passwd")
    assert jobs_of(tenant) == [] and admission.in_flight(tenant) == 0

    # Every field at its limit: accepted, and the item written is within the bound, itself at most
    # half of DynamoDB's item limit.
    from leases.tenants import set_cap

    set_cap(tenant, 0)
    pages = list(range(1, 10_001))  # the layouts' own longest list (step and repeat's pages)
    big_layout = {"layout": "step_and_repeat", "sheet": "SRA3", "pages": pages}
    job_id = submit_job(tenant_id=tenant, token="ü" * s.idempotency_token_max_len, input_key=key,
                        layout=big_layout, file_name="ü" * (s.file_name_max_bytes // 2))
    item = JobItem.get(job_id, consistent_read=True)
    size_bytes = len(json.dumps(item.serialize()).encode("utf-8"))
    assert size_bytes <= s.max_job_item_bytes <= DYNAMODB_MAX_ITEM_BYTES // 2
    assert submission_fields_max_bytes(s) <= s.max_job_item_bytes
    cli("job", "cancel", job_id)


def test_a_job_item_bound_too_small_for_its_fields_is_refused_at_start_naming_both(monkeypatch):
    from pydantic import ValidationError

    from imposition.common.settings import Settings

    monkeypatch.setenv("IMPOSITION_MAX_LAYOUT_BYTES", str(200 * 1024))
    with pytest.raises(ValidationError, match="max_job_item_bytes=131072 must be >= "):
        Settings()


def test_every_failure_is_one_error_line_naming_the_field_and_the_limit(new_tenant, registration_required):
    """Issue 42: a bad margin leaked pydantic's member tags, --max-attempts 1000 said ``refused:
    ValueError: …``, and prefixes mixed ``Error:``, ``refused:`` and none. One style now
    (imposition.cli.failures): ``Error: <field>=<value>: <rule or limit>``, the status by kind."""
    from imposition.common.settings import get_settings

    tenant = new_tenant("shop")
    limit = get_settings().max_attempts_limit
    margin = json.dumps({**LAYOUT, "margin_mm": -3})
    cases = [
        (("submit", "--tenant", tenant, "--token", "m1", "--layout", margin, str(SAMPLE_PDF)), 2,
         "Error: invalid layout: margin_mm=-3: Input should be greater than or equal to 0"),
        (("submit", "--tenant", tenant, "--token", "m2", "--layout", LAYOUT_TEXT, "--max-attempts", "1000",
          str(SAMPLE_PDF)), 2, f"Error: max_attempts=1000: must be an integer from 1 to max_attempts_limit={limit}"),
        (("job", "show", "nope"), 1, "Error: no job with id or token 'nope'"),
        (("job", "cancel", "nope"), 1, "Error: no job with id or token 'nope'"),
        (("job", "download", "nope"), 1, "Error: no job with id or token 'nope'"),
        (("job", "retry", "nope"), 1, "Error: no job with id or token 'nope'"),
    ]
    for args, status, line in cases:
        result = cli(*args, expect=status)
        assert result.stderr == line + "\n", (args, result.stderr)
        assert result.stdout == ""
    assert jobs_of(tenant) == []


def test_a_foreign_input_key_names_the_prefix_and_the_tenant_in_plain_words(new_tenant, registration_required):
    from imposition.common.tenancy import ForeignKeyRefused, tenant_prefix
    from tasks.submission import submit_job

    tenant, other = new_tenant("globex"), new_tenant("acme")
    with pytest.raises(ForeignKeyRefused) as refused:
        submit_job(tenant_id=tenant, token="t", input_key=tenant_prefix(other) + "in.pdf", layout=LAYOUT)
    assert str(refused.value) == (f"input_key='{tenant_prefix(other)}in.pdf': outside the prefix "
                                  f"'{tenant_prefix(tenant)}' of tenant '{tenant}'")


def test_an_empty_listing_says_what_it_searched(new_tenant, registration_required):
    tenant = new_tenant("shop")
    out = cli("jobs", "list", "--tenant", tenant, "--token", "no-such-token", "--since", "2h").stdout.strip()
    assert out == f"no jobs of tenant {tenant}, with token 'no-such-token', submitted in the last 2h"
    out = cli("jobs", "list", "--file", "a5_8p", "--status", "failed").stdout.strip()
    assert out.startswith("no jobs of any of the ") and f"{tenant}" in out
    assert ("in status failed, with file name 'a5_8p' (names match exactly as submitted, extension included: "
            "'a5_8p.pdf'?), submitted at any time") in out


def test_a_cap_above_the_live_slots_is_set_with_a_warning_naming_them(new_tenant, registration_required):
    from imposition.common.settings import get_settings

    s = get_settings()
    slots = s.capacity_nodes * s.slots_per_node  # no node registered on this stack
    tenant = new_tenant("big")
    result = cli("tenant", "set-cap", tenant, "1000")
    assert json.loads(result.stdout)["cap"] == 1000  # accepted: nodes may join; the slots bind until then
    assert result.stderr == (f"Warning: cap 1000 of {tenant} is above the cluster's {slots} live slots (no node "
                             f"registered: capacity_nodes × slots_per_node): {tenant} holds at most {slots} leases "
                             "until nodes join\n")
    assert cli("tenant", "set-cap", tenant, "4").stderr == ""  # within the slots: no warning


def test_submit_wait_says_when_the_job_has_not_ended(new_tenant, registration_required):
    from leases.tenants import set_cap

    tenant = new_tenant("paused")
    set_cap(tenant, 0)  # its jobs wait: --wait gives up after its timeout, saying where the job is
    result = cli("submit", "--tenant", tenant, "--token", "w1", "--layout", LAYOUT_TEXT, str(SAMPLE_PDF), "--wait",
                 "--wait-timeout", "1", expect=1)
    job_id = result.stdout.strip()
    assert result.stderr == (f"Error: job {job_id} had not ended after --wait-timeout=1 s: it is waiting; "
                             f"`imposition job show {job_id}`\n")
    cli("job", "cancel", "w1")
