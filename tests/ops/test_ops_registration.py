"""Tenants are registered and canonical (issue 14 item 3), and ``submit()`` checks its file at the
door (item 4), on the real local stack (moto server, Redis, the engine's real child process)."""

from __future__ import annotations

import uuid

import pytest

from tests.admission.helpers import LAYOUT, SAMPLE_PDF, jobs_of
from tests.ops.helpers import cli, cli_json

LAYOUT_TEXT = '{"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}'


def _objects(prefix: str) -> list:
    from imposition.common import aws
    from imposition.common.settings import get_settings

    return aws.s3().list_objects_v2(Bucket=get_settings().bucket, Prefix=prefix).get("Contents", [])


def test_tenant_create_registers_the_whole_configuration_once_and_never_shows_the_secret(monkeypatch):
    from leases.models import ClusterItem
    from leases.conditions import slots_item

    tenant = f"shop-{uuid.uuid4().hex[:8]}"
    secret = "k" * 40
    monkeypatch.setenv("OPS_CREATE_SECRET", secret)
    def borrowers() -> int:
        items = list(ClusterItem.query(slots_item().key, consistent_read=True))
        return int(items[0].borrowers or 0) if items else 0

    borrowers_before = borrowers()
    result = cli("tenant", "create", tenant, "--cap", "3", "--burst", "5", "--rate-limit-per-min", "9",
                 "--in-flight-cap", "11", "--webhook", "https://127.0.0.1:9/h", "--secret-env", "OPS_CREATE_SECRET")
    assert secret not in result.output
    shown = cli_json("tenant", "show", tenant)
    assert (shown["cap"], shown["cap_source"], shown["burst_cap"]) == (3, "override", 5)
    assert (shown["rate_limit_per_min"], shown["admission_in_flight_cap"]) == (9, 11)
    assert (shown["webhook_url"], shown["webhook_secret_set"]) == ("https://127.0.0.1:9/h", True)
    assert (shown["in_flight"], shown["queued"], shown["waiting"], shown["known"]) == (0, 0, 0, True)
    assert borrowers() == borrowers_before + 1  # a borrowing tier is counted, in the same transaction
    again = cli("tenant", "create", tenant, "--cap", "1", expect=2)
    assert "registered already" in again.output
    assert cli_json("tenant", "show", tenant)["cap"] == 3  # nothing changed
    never = f"never-{uuid.uuid4().hex[:8]}"
    unknown = cli("tenant", "show", never, expect=2)  # a mistyped tenant is refused, not an empty JSON
    assert f"unknown_tenant: tenant '{never}' is not registered" in unknown.output
    plain = f"plain-{uuid.uuid4().hex[:8]}"
    cli("tenant", "create", plain)
    assert (cli_json("tenant", "show", plain)["cap_source"], cli_json("tenant", "show", plain)["webhook_url"]) == (
        "default", None)
    assert "secret-env" in cli("tenant", "create", f"x-{uuid.uuid4().hex[:6]}", "--webhook", "https://127.0.0.1:9/h",
                               expect=2).output
    assert "from the cap" in cli("tenant", "create", f"y-{uuid.uuid4().hex[:6]}", "--cap", "4", "--burst", "2",
                                 expect=2).output


def test_a_tenant_id_in_another_spelling_is_refused_with_the_canonical_one_named(new_tenant, tmp_path):
    from imposition.common.tenancy import NonCanonicalTenantId, validate_tenant_id
    from tasks.submission import submit

    result = cli("tenant", "create", "ACME", expect=2)
    assert "'acme'" in result.output and "lower case" in result.output
    tenant = new_tenant()
    shouted = tenant.upper()
    result = cli("submit", "--tenant", shouted, "--token", "t1", "--layout", LAYOUT_TEXT, str(SAMPLE_PDF), expect=2)
    assert f"'{tenant}'" in result.output
    with pytest.raises(NonCanonicalTenantId) as refused:
        submit(SAMPLE_PDF, tenant_id=shouted, token="t2", layout=LAYOUT)
    assert refused.value.canonical == tenant
    assert validate_tenant_id("a.b_c-9") == "a.b_c-9"
    assert cli("tenant", "show", "Acme", expect=2).output.count("'acme'") == 1
    assert _objects(f"tenants/{tenant}/") == [] and jobs_of(tenant) == []


def test_a_submission_for_an_unknown_tenant_is_refused_and_leaves_nothing(new_tenant):
    from imposition import admission
    from leases.waiting import read_tenant
    from tasks.submission import submit, submit_job

    stranger = new_tenant("stranger", register=False)
    with pytest.raises(admission.UnknownTenant) as refused:
        submit(SAMPLE_PDF, tenant_id=stranger, token="a", layout=LAYOUT)
    assert refused.value.code == "unknown_tenant" and refused.value.tenant_id == stranger
    with pytest.raises(admission.UnknownTenant):
        submit_job(tenant_id=stranger, token="b", input_key=f"tenants/{stranger}/x.pdf", layout=LAYOUT)
    result = cli("submit", "--tenant", stranger, "--token", "c", "--layout", LAYOUT_TEXT, str(SAMPLE_PDF), expect=2)
    assert "unknown_tenant" in result.output and f"imposition tenant create {stranger}" in result.output
    assert read_tenant(stranger) is None  # not registered by the refusal
    assert _objects(f"tenants/{stranger}/") == [] and jobs_of(stranger) == []
    assert admission.in_flight(stranger) == 0  # never admitted
    cli("tenant", "create", stranger)  # registered: admitted at once (a refusal is never cached)
    job_id = submit(SAMPLE_PDF, tenant_id=stranger, token="a", layout=LAYOUT)
    assert [j.job_id for j in jobs_of(stranger)] == [job_id]
    cli("job", "cancel", job_id)


def test_commands_that_change_a_tenant_refuse_an_unknown_one_and_register_nothing(new_tenant, monkeypatch):
    from leases.waiting import read_tenant

    stranger = new_tenant("unset", register=False)
    monkeypatch.setenv("OPS_UNSET_SECRET", "s" * 40)
    for args in (("tenant", "set-cap", stranger, "3"),
                 ("tenant", "set-limits", stranger, "--rate-limit-per-min", "5"),
                 ("tenant", "set-webhook", stranger, "https://127.0.0.1:9/h", "--secret-env", "OPS_UNSET_SECRET")):
        result = cli(*args, expect=2)
        assert "unknown_tenant" in result.output and f"imposition tenant create {stranger}" in result.output, args
    assert read_tenant(stranger) is None  # none of them registered it
    assert "unknown_tenant" in cli("audit", "--tenant", stranger, expect=2).output
    assert "canonical form is 'acme'" in cli("audit", "--tenant", "ACME", expect=2).output
    cli("tenant", "create", stranger)
    assert cli_json("tenant", "set-cap", stranger, "3")["cap"] == 3


def test_auto_register_tenants_registers_a_tenant_on_its_first_submission(new_tenant, monkeypatch):
    from leases.waiting import read_tenant
    from imposition.common.settings import get_settings
    from tasks.submission import submit

    monkeypatch.setenv("IMPOSITION_AUTO_REGISTER_TENANTS", "true")
    get_settings.cache_clear()
    newcomer = new_tenant("newcomer", register=False)
    job_id = submit(SAMPLE_PDF, tenant_id=newcomer, token="first", layout=LAYOUT)
    item = read_tenant(newcomer)
    assert item is not None and item.cap is None  # the default tier
    assert int(item.queued) == 1
    cli("job", "cancel", job_id)


@pytest.mark.parametrize("name, make, code", [
    ("empty.pdf", lambda path: path.write_bytes(b""), "not_a_pdf"),
    ("letter.pdf", lambda path: path.write_text("Dear customer,\n"), "not_a_pdf"),
    ("no-pages.pdf", lambda path: __import__("pikepdf").new().save(path), "no_pages"),
    ("cut.pdf", lambda path: path.write_bytes(SAMPLE_PDF.read_bytes()[:400]), "damaged"),
])
def test_submit_refuses_a_file_that_is_no_readable_pdf_with_pages_before_anything_is_uploaded(
        new_tenant, tmp_path, name, make, code):
    from imposition import admission
    from imposition.engine.errors import InputError
    from imposition.common.settings import get_settings
    from tasks.submission import submit
    from tests.admission.helpers import queue_messages

    tenant = new_tenant()
    path = tmp_path / name
    make(path)
    before = queue_messages(get_settings().imposition_queue)
    with pytest.raises(InputError) as refused:
        submit(path, tenant_id=tenant, token=name, layout=LAYOUT)
    assert refused.value.code == code and name in str(refused.value), str(refused.value)
    assert "input.pdf" not in str(refused.value)
    assert _objects(f"tenants/{tenant}/") == [] and jobs_of(tenant) == []
    assert admission.in_flight(tenant) == 0 and queue_messages(get_settings().imposition_queue) == before
    result = cli("submit", "--tenant", tenant, "--token", name, "--layout", LAYOUT_TEXT, str(path), expect=2)
    assert name in result.output
