"""Tiers: a cap override per tenant, set and shown from the command line, live for the next acquire."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from leases import transactions, renewal
from leases.audit import audit
from leases.errors import CapReached
from imposition.cli.main import main
from tests.leases.helpers import make_job


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_tier_override_of_six_admits_six_never_seven(tenant_id):
    shown = json.loads(_cli("tenant", "set-cap", tenant_id, "6"))
    assert (shown["cap"], shown["cap_source"]) == (6, "override")
    jobs = [make_job(tenant_id) for _ in range(8)]
    leases = [transactions.acquire(job_id, tenant_id, "w") for job_id in jobs[:6]]
    for job_id in jobs[6:]:
        with pytest.raises(CapReached) as caught:
            transactions.acquire(job_id, tenant_id, "w")
        assert (caught.value.in_flight, caught.value.cap) == (6, 6)
    shown = json.loads(_cli("tenant", "show", tenant_id))
    assert (shown["in_flight"], len(shown["leases"])) == (6, 6)
    for lease in leases:
        transactions.fail_job(lease, error="done", error_code="test")
    shown = json.loads(_cli("tenant", "set-cap", tenant_id, "--default"))
    assert (shown["cap"], shown["cap_source"], shown["in_flight"]) == (4, "default", 0)


def test_lowering_a_cap_below_in_flight_kills_nothing_and_admits_nothing_until_below(tenant_id):
    _cli("tenant", "set-cap", tenant_id, "6")
    jobs = [make_job(tenant_id) for _ in range(8)]
    held = [transactions.acquire(job_id, tenant_id, "w") for job_id in jobs[:6]]
    _cli("tenant", "set-cap", tenant_id, "2")
    assert all(renewal.still_held(lease) for lease in held)  # nothing taken away
    assert audit([tenant_id]).clean  # 6 leases over cap 2 are legitimate: they predate the change
    waiting = jobs[6]
    for _ in range(5):  # 6 → 1 in flight: refused while in_flight >= 2
        with pytest.raises(CapReached):
            transactions.acquire(waiting, tenant_id, "w")
        lease = held.pop()
        transactions.fail_job(lease, error="done", error_code="test")
    admitted = transactions.acquire(waiting, tenant_id, "w")  # 1 in flight < 2
    with pytest.raises(CapReached):
        transactions.acquire(jobs[7], tenant_id, "w")
    for lease in [*held, admitted]:
        transactions.fail_job(lease, error="done", error_code="test")
