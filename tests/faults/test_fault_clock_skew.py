"""Clock skew is seen before it costs anything (issue 34, item 7), on a real cluster: one imposer
node whose clock is 20 s behind everything else's (libfaketime, ``LD_PRELOAD`` into that worker
process only), against the session's lease TTL of 9 s, as the fault probe shifted it. Before
:mod:`leases.skew`, every lease that node wrote looked expired to the sweeper at once, and the
sweeper re-ran its jobs through the engine.

Shown here: the node reports its clock in its registry heartbeat; the sweeper measures the skew,
warns about it, exports ``imposition_node_clock_skew_seconds{worker}``; the alert fires on that value
(``promtool test rules``) and not on a small one; the sweeper holds the node's leases instead of
reclaiming them; every job ran once through the engine.

And the other way round (issue 42): just after a DynamoDB stall, a reading taken through the stalled
endpoint (a real one: :class:`devstack.fault_proxy.FaultProxy` holding the answer) has an error bound
above the skew bound; it says nothing, so an in-sync node is neither warned about, nor exported,
nor held.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import threading
import time
import urllib.request
import uuid

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devstack.fault_proxy import FaultProxy
from imposition.common import aws
from imposition.common.clocks import get_clocks
from imposition.common.settings import get_settings
from leases import nodes, signals, skew
from leases.models import reset_connections
from tests.conftest import reset_aws
from tests.observability.support import free_port
from tests.support.cluster import Cluster
from tests.support.processes import wait_for

pytestmark = pytest.mark.file_duration_s(45)

#: How far the skewed node's clock is behind, seconds: more than the session's lease TTL (9 s).
SKEW_S = 20.0
PROMTOOL = shutil.which("promtool")
#: How long the endpoint holds the sweeper's reading, seconds: half of it is the reading's error
#: bound, above the skew bound of the session's clocks (lease TTL 9 s / 4 = 2.25 s).
STALL_S = 6.0


def shifted_clock_env(shift_s: float) -> dict[str, str]:
    """The environment that shifts a process's wall clock by ``shift_s`` (libfaketime; the monotonic
    clock is left alone, so timeouts and sleeps are real)."""
    from libfaketime import get_reload_information

    _, env = get_reload_information()
    return {**env, "FAKETIME": f"{shift_s:+g}s", "DONT_FAKE_MONOTONIC": "1", "FAKETIME_DID_REEXEC": "true"}


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    reset_aws()
    assert get_settings().lease_ttl_s < SKEW_S  # the probe's case: the shift is beyond a lease's whole life
    port = free_port()
    cluster = Cluster(tmp_path_factory.mktemp("skew"), nodes=1, concurrency=4,
                      node_env=shifted_clock_env(-SKEW_S), maintenance_env={"IMPOSITION_METRICS_PORT": str(port)})
    # A worker registers its clock before it says ready (before its first message): a lease it takes
    # at once is judged by its clock from the first sweep on.
    reported = skew.measure_skews(skew.endpoint_offset())
    assert [round(s.skew_s) for s in reported.values()] in ([-19], [-20], [-21]), reported
    yield cluster, f"http://127.0.0.1:{port}/metrics"
    cluster.stop()


def test_a_node_behind_by_more_than_the_lease_ttl_is_seen_alerted_and_runs_each_job_once(skewed, tmp_path):
    cluster, metrics_url = skewed
    tenant = f"skew-{uuid.uuid4().hex[:8]}"
    cluster.mark(f"tenant-{tenant}.sleep", "4")  # each job holds its lease 4 s: two sweeps see it
    jobs = [cluster.submit(tenant) for _ in range(6)]  # cap 4: two rounds on the one node
    finished = [cluster.final(job_id, timeout_s=90) for job_id in jobs]

    # no job ran twice through the engine, none was charged an extra attempt
    assert [(j.status, int(j.attempts), j.lost_attempts) for j in finished] == [("succeeded", 1, None)] * len(jobs)
    for job_id in jobs:
        assert len(cluster.events_of(job_id, "acquired")) == 1, cluster.events_of(job_id)
    maintenance_log = cluster.others[0].log()
    held = [int(n) for n in re.findall(r"'held_for_skew': (\d+)", maintenance_log)]
    assert sum(held) > 0, "the sweeper never saw a lease that looked expired: the test proved nothing"
    assert "reclaimed lease of job" not in maintenance_log

    # the node reported its clock; the sweeper warned and exported the skew
    (node,) = nodes.live_nodes()
    assert re.search(rf"node {re.escape(node)}'s clock is -(19|20|21)\.\d s", maintenance_log), maintenance_log[-3000:]
    skew_s = wait_for(lambda: scrape(metrics_url).get(("imposition_node_clock_skew_seconds", frozenset({("worker", node)}))),
                      20, what="the skew on the maintenance node's endpoint")
    assert abs(skew_s + SKEW_S) < 1.5, skew_s
    assert abs(skew_s) > get_clocks().clock_skew_warn_s

    # the alert on that value fires (its for: two sweeps), and a skew within the threshold does not
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package 'prometheus'): the alert was NOT tested")
    from imposition.observability.alerts import render_rules, rule_groups

    rules_path = tmp_path / "alerts.yml"  # the shipped rules as this cluster's clocks give them (TTL 9 s)
    rules_path.write_text(render_rules(get_settings()))

    rule = next(r for g in rule_groups()["groups"] for r in g["rules"] if r.get("alert") == "ImpositionClockSkew")
    small = get_clocks().clock_skew_warn_s / 2
    tests = {"rule_files": [str(rules_path)], "evaluation_interval": "1s", "tests": [{
        "interval": "1s",
        "input_series": [{"series": f'imposition_node_clock_skew_seconds{{worker="{node}"}}', "values": f"{skew_s:.3f}x120"},
                         {"series": 'imposition_node_clock_skew_seconds{worker="in-sync@host"}', "values": f"{small:g}x120"}],
        "alert_rule_test": [{"eval_time": "60s", "alertname": "ImpositionClockSkew", "exp_alerts": [{
            "exp_labels": {"severity": "page", "worker": node},
            "exp_annotations": {k: v.replace("{{ $labels.worker }}", node) for k, v in rule["annotations"].items()},
        }]}],
    }]}
    path = tmp_path / "skew_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    done = subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    cluster.settle()
    assert json.dumps(rule).count("docs/operations.md") >= 1  # the runbook is named


def test_a_reading_through_a_stalled_endpoint_says_nothing(local_aws, monkeypatch, caplog):
    node = f"in-sync-{uuid.uuid4().hex[:8]}@host"
    nodes.register(node, 1, clock=skew.ClockReading(offset_s=0.0, error_s=0.05, at=time.time()))
    nodes.live_nodes()  # this process's table clients exist before the endpoint moves: they stay on moto
    sent: list[dict] = []

    def exported(sender=None, skews=None, **_: object) -> None:
        sent.append(dict(skews or {}))

    signals.node_clock_skew.connect(exported)
    try:
        with FaultProxy(local_aws.dynamodb.url) as proxy:
            monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", proxy.url)  # the sweeper's reading goes through it
            aws.reset()
            proxy.set_mode("stall")
            threading.Timer(STALL_S, proxy.set_mode, args=("forward",)).start()
            now = time.time()
            with caplog.at_level(logging.INFO, logger="leases.skew"):
                kept = skew.refresh(now)
            assert proxy.faults["stall"] == 1
    finally:
        signals.node_clock_skew.disconnect(exported)
        monkeypatch.undo()
        aws.reset()
        reset_connections()
        nodes.deregister(node)

    # it says nothing: no warning, no exported skew (the gauge), no hold of its leases or registration
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and node in r.getMessage()] == []
    assert node not in kept
    assert sent and all(node not in skews for skews in sent), sent
    assert not skew.held_by_skew(now - 1, f"{node}/123", now)
    assert not skew.registration_held(now - 1, node, now)
    # and the reading was the probe's: a skew beyond the bound, with an error bound beyond it too
    bound_s = get_clocks().clock_skew_warn_s
    said = re.search(rf"{re.escape(node)} ([+-][\d.]+) s \(±([\d.]+) s\)", caplog.text)
    assert said, caplog.text
    assert abs(float(said[1])) > bound_s and float(said[2]) > bound_s, said[0]
