"""The lease-event log's intervals on their own: a lease passed in a commit starts when that commit
returned (its ``released`` event names it), not when its worker got round to logging ``acquired``."""

from __future__ import annotations

from leases.eventlog import EventLog, busy_intervals, held_intervals, max_concurrent, read_events


def _event(event: str, t: float, token: str, job: str, **fields: object) -> dict:
    return {"event": event, "t": t, "tenant": "acme", "job": job, "token": token, "pid": 1, **fields}


def test_a_lease_passed_in_a_commit_is_held_from_the_commit_not_from_its_acquired_event(tmp_path):
    log = EventLog(tmp_path)
    for e in [
        _event("acquired", 0.0, "A", "ja"),
        _event("releasing", 1.0, "A", "ja", outcome="succeeded"),
        # the commit passed A's slot to jb's new lease B; its report went out before B's run began
        _event("released", 1.05, "A", "ja", outcome="succeeded", passed_token="B", passed_job="jb"),
        _event("acquired", 1.07, "B", "jb"),
        _event("releasing", 2.0, "B", "jb", outcome="succeeded"),
        _event("released", 2.04, "B", "jb", outcome="succeeded", passed_token="C", passed_job="jc"),
        # the worker died before C's run: the sweeper reclaimed C, which was never logged acquired
        _event("reclaimed", 9.0, "C", "jc", swept_at=8.5, requeued=True),
    ]:
        log.write(**{"t": e.pop("t"), "event": e.pop("event"), **{k: v for k, v in e.items() if k != "pid"}})
    events = read_events(tmp_path)
    held = {iv.token: (iv.job_id, iv.start_at, iv.end_at) for iv in held_intervals(events)}
    assert held == {"A": ("ja", 0.0, 1.0), "B": ("jb", 1.05, 2.0), "C": ("jc", 2.04, 8.5)}
    busy = {iv.token: (iv.start_at, iv.end_at) for iv in busy_intervals(events)}
    assert busy == {"A": (0.0, 1.05), "B": (1.05, 2.04), "C": (2.04, 8.5)}
    # the release of A ended before B began: never two leases at once
    assert max_concurrent(events)["acme"].leases == 1


def test_a_slot_passed_to_another_tenants_job_counts_for_that_tenant_from_the_commit(tmp_path):
    """A commit that passed its slot to another tenant's claimed job (``HandOff.claim``) names that
    tenant (``passed_tenant``): the passed lease counts against its cap from the commit on, not
    against the releasing tenant's (which an old event without the field still gets)."""
    log = EventLog(tmp_path)
    for e in [
        _event("acquired", 0.0, "A", "ja"),
        _event("releasing", 1.0, "A", "ja", outcome="succeeded"),
        _event("released", 1.05, "A", "ja", outcome="succeeded", passed_token="P", passed_job="jp",
               passed_tenant="poor"),
        _event("acquired", 1.5, "P", "jp", tenant="poor"),
        _event("releasing", 2.0, "P", "jp", outcome="succeeded", tenant="poor"),
    ]:
        log.write(**{"t": e.pop("t"), "event": e.pop("event"), **{k: v for k, v in e.items() if k != "pid"}})
    events = read_events(tmp_path)
    held = {iv.token: (iv.tenant_id, iv.start_at, iv.end_at) for iv in held_intervals(events)}
    assert held == {"A": ("acme", 0.0, 1.0), "P": ("poor", 1.05, 2.0)}
    peaks = max_concurrent(events)
    assert peaks["acme"].leases == 1 and peaks["poor"].leases == 1
