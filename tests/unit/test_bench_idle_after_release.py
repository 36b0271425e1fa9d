"""The benchmark's "idle after release" column (``bench.sched.idle_after_release_s``): how long a
freed slot stayed idle while its tenant had a job waiting for one."""

from types import SimpleNamespace

import pytest

from bench.sched import idle_after_release_s

pytestmark = pytest.mark.unit


def _job(tenant: str, submitted: float, started: float, finished: float) -> SimpleNamespace:
    return SimpleNamespace(tenant_id=tenant, submitted_at=submitted, started_at=started, finished_at=finished)


def test_the_gap_is_from_a_release_to_the_next_start_while_its_tenant_waited():
    jobs = [_job("a", 0, 0, 5), _job("a", 0, 5.4, 10), _job("a", 0, 11.5, 15)]
    assert idle_after_release_s(jobs) == pytest.approx(1.5)


def test_a_release_with_nobody_of_its_tenant_waiting_counts_nothing():
    # b's job ends at 5 with none of b's waiting; a's job was submitted after it ended.
    jobs = [_job("b", 0, 0, 5), _job("a", 6, 6, 8)]
    assert idle_after_release_s(jobs) is None


def test_another_tenants_start_ends_the_gap():
    # a's second job waits behind its cap; the freed slot goes to c at once (a gave way).
    jobs = [_job("a", 0, 0, 5), _job("a", 0, 9, 12), _job("c", 4, 5.2, 9)]
    assert idle_after_release_s(jobs) == pytest.approx(0.2)
