"""The benchmark's slot-utilisation column (``bench.sched.utilisation``): what the tenants could
use, within their caps and, when they borrow, above the reserve only."""

from types import SimpleNamespace

import pytest

from bench.sched import utilisation

pytestmark = pytest.mark.unit


def _held(n: int, start: float = 0.0, end: float = 1.0) -> list[SimpleNamespace]:
    return [SimpleNamespace(start_at=start, end_at=end) for _ in range(n)]


def _unfinished(n: int, start: float = 0.0, end: float = 1.0) -> list[tuple[float, float]]:
    return [(start, end)] * n


def test_a_tenant_within_its_cap_can_use_its_cap_only():
    demand = {"a": _unfinished(10)}
    assert utilisation(_held(4), demand, {"a": 4}, 8, 0.0, 1.0) == pytest.approx(1.0)
    assert utilisation(_held(3), demand, {"a": 4}, 8, 0.0, 1.0) == pytest.approx(0.75)


def test_a_borrowing_tenant_alone_can_use_every_slot_but_the_reserve():
    demand = {"a": _unfinished(10)}
    borrowing = {"burst_caps": {"a": 7}, "reserve": 1}
    assert utilisation(_held(7), demand, {"a": 4}, 8, 0.0, 1.0, **borrowing) == pytest.approx(1.0)
    assert utilisation(_held(6), demand, {"a": 4}, 8, 0.0, 1.0, **borrowing) == pytest.approx(6 / 7)


def test_the_reserve_counts_only_for_a_tenant_within_its_cap():
    """Tenant a holds 3 of its 3 jobs (within its cap), b 4 (its cap) of 9: b may borrow only while
    busy < slots − reserve = 7, so 7 slots are all they could use; with a fourth job of a's, 8."""
    borrowing = {"burst_caps": {"a": 7, "b": 7}, "reserve": 1}
    caps = {"a": 4, "b": 4}
    assert utilisation(_held(7), {"a": _unfinished(3), "b": _unfinished(9)}, caps, 8, 0.0, 1.0,
                       **borrowing) == pytest.approx(1.0)
    assert utilisation(_held(7), {"a": _unfinished(4), "b": _unfinished(9)}, caps, 8, 0.0, 1.0,
                       **borrowing) == pytest.approx(7 / 8)


def test_without_borrowing_the_cluster_bounds_the_sum_of_the_caps():
    demand = {"a": _unfinished(10), "b": _unfinished(10), "c": _unfinished(1)}
    caps = {"a": 4, "b": 4, "c": 4}
    assert utilisation(_held(8), demand, caps, 8, 0.0, 1.0) == pytest.approx(1.0)
    # sampled every 0.05 s: 11 samples with 6 held, 9 with 8 (the change falls between samples)
    held = _held(6) + _held(2, 0.525, 1.0)
    assert utilisation(held, demand, caps, 8, 0.0, 1.0) == pytest.approx((11 * 6 + 9 * 8) / (20 * 8))
