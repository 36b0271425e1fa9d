"""The fair share of a slot a chain run in place would keep (``leases.policy.yields_slot``): it goes
back to the pool for a tenant that could take it there and holds at least two leases fewer."""

import pytest

from leases.policy import TenantState, yields_slot

pytestmark = pytest.mark.unit
CAP = 4


def _releaser(in_flight: int) -> TenantState:
    return TenantState(in_flight=in_flight, waiting=10, occupied=in_flight + 10)


@pytest.mark.parametrize(("own", "other", "yields"), [
    (4, 0, True),   # a tenant with no slot, its job queued in SQS behind busy children
    (4, 2, True),
    (4, 3, False),  # one lease fewer: passing would only swap the two
    (3, 2, False),
    (2, 0, True),
    (1, 0, False),  # the releaser's one lease: even the poorest claimant gains nothing
])
def test_the_slot_goes_to_a_claimant_two_leases_poorer(own, other, yields):
    claimant = TenantState(in_flight=other, queued=1, occupied=other + 1)
    assert yields_slot(_releaser(own), {"other": claimant}, CAP, now=0.0) is yields


def test_only_a_tenant_that_could_take_the_slot_from_the_pool_counts():
    """Nothing queued (only waiting, which the pool take does not bring), at its own cap, or
    frozen for a repair: the releaser keeps its slot."""
    waiting_only = TenantState(in_flight=0, waiting=3, occupied=3)
    at_cap = TenantState(in_flight=1, queued=2, occupied=3, cap=1)
    frozen = TenantState(in_flight=0, queued=1, occupied=1, repair_until=100.0)
    for other in (waiting_only, at_cap, frozen):
        assert yields_slot(_releaser(4), {"other": other}, CAP, now=50.0) is False
    assert yields_slot(_releaser(4), {}, CAP, now=50.0) is False
    # one claimant among several is enough
    poor = TenantState(in_flight=0, queued=1, occupied=1)
    assert yields_slot(_releaser(4), {"a": at_cap, "b": poor}, CAP, now=50.0) is True
