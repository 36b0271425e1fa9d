"""The engine gate end to end: a real pdftoolbox worker node (the stand-in executable) whose licence
server is down at its start exports ``engine_ready 0`` and counts the failed check by reason; once the
server is back, its next check opens it and ``engine_ready`` is 1. Read from the node's own metrics
endpoint, as Prometheus scrapes it (the alert ``ImpositionEngineUnavailable`` reads this). And the
checks' cost: a check that gets a licence spends a licence run, so an open node runs one at most every
``pdftoolbox_check_interval_s``, while a node closed by a refused licence checks again soon."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from imposition.common.settings import Settings
from tests.conftest import reset_aws
from tests.observability.support import free_port
from tests.support.licence_server import LicenceServer, install_stand_in
from tests.support.processes import start_worker, wait_for

pytestmark = pytest.mark.file_duration_s(45)  # the long files run first (tests/conftest.py)


def _samples(port: int) -> dict[tuple[str, frozenset], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_node_without_a_licence_exports_engine_ready_0_until_its_check_passes(local_aws, tmp_path):
    reset_aws()
    executable, plan = install_stand_in(tmp_path / "bin")
    port = free_port()
    server = LicenceServer()  # down
    worker = start_worker(tmp_path, concurrency=1, env={
        "IMPOSITION_ENGINE": "pdftoolbox", "IMPOSITION_PDFTOOLBOX_PATH": str(executable),
        "IMPOSITION_PDFTOOLBOX_PROCESS_PLAN": str(plan),
        "IMPOSITION_PDFTOOLBOX_LICENCE_SERVERS": json.dumps([server.address]),
        "IMPOSITION_PDFTOOLBOX_LICENCE_WAIT_S": "1", "IMPOSITION_PDFTOOLBOX_CHECK_INTERVAL_S": "1",
        "IMPOSITION_PDFTOOLBOX_CHECK_TIME_LIMIT_S": "10",
        "IMPOSITION_METRICS_PORT": str(port), "IMPOSITION_METRICS_DIR": str(tmp_path / "multiproc"),
    })
    ready = ("imposition_engine_ready", frozenset({("engine", "pdftoolbox")}))
    failures = ("imposition_engine_check_failures_total", frozenset({("engine", "pdftoolbox"), ("reason", "licence")}))
    try:
        closed = wait_for(lambda: (s := _samples(port)).get(ready) == 0 and s, 30, what="engine_ready 0")
        assert closed[failures] >= 1
        assert "engine check failed (licence)" in worker.log()
        server.up()
        wait_for(lambda: _samples(port).get(ready) == 1, 30, what="engine_ready 1 once the licence is back")
        assert "takes jobs from" in worker.log()  # the node consumes again before it says it is ready
    finally:
        worker.stop()
        server.down()


#: The open node's check interval and the closed node's, short for the test (s).
CHECK_INTERVAL_S = 4.0
CLOSED_CHECK_INTERVAL_S = 0.5


def _runs(log) -> list[dict]:
    """The stand-in's runs so far (complete lines only: one may be being written)."""
    return [json.loads(line) for line in log.read_text().split("\n")[:-1]] if log.exists() else []


def test_an_open_node_spends_a_licence_run_at_most_every_check_interval(local_aws, tmp_path):
    """The stand-in logs every run it makes. Closed by a refused licence (exit 100: no licence run
    spent), the node checks again after the closed interval; open, the next canary run that gets a
    licence comes no sooner than ``pdftoolbox_check_interval_s`` after the last one ended."""
    assert Settings().pdftoolbox_check_interval_s >= 180  # the default: every few minutes, not 30 s
    reset_aws()
    executable, plan = install_stand_in(tmp_path / "bin")
    runs = tmp_path / "runs.jsonl"
    server = LicenceServer()  # down
    worker = start_worker(tmp_path, concurrency=1, env={
        "IMPOSITION_ENGINE": "pdftoolbox", "IMPOSITION_PDFTOOLBOX_PATH": str(executable),
        "IMPOSITION_PDFTOOLBOX_PROCESS_PLAN": str(plan),
        "IMPOSITION_PDFTOOLBOX_VARIABLES": json.dumps({"standin_run_log": str(runs)}),
        "IMPOSITION_PDFTOOLBOX_LICENCE_SERVERS": json.dumps([server.address]),
        # a check's licence wait is half its time limit; room for a slow start under load, so that no
        # check is killed (reason engine, which waits the full interval)
        "IMPOSITION_PDFTOOLBOX_LICENCE_WAIT_S": "1", "IMPOSITION_PDFTOOLBOX_CHECK_TIME_LIMIT_S": "6",
        "IMPOSITION_PDFTOOLBOX_CHECK_INTERVAL_S": str(CHECK_INTERVAL_S),
        "IMPOSITION_PDFTOOLBOX_CLOSED_CHECK_INTERVAL_S": str(CLOSED_CHECK_INTERVAL_S),
    })
    try:
        refused = wait_for(lambda: len(r := _runs(runs)) >= 3 and r, 60, what="three refused checks")
        assert {r["exit"] for r in refused} == {100}
        # closed and spending nothing: checked again well before the open node's interval
        assert min(b["start"] - a["end"] for a, b in zip(refused, refused[1:])) < CHECK_INTERVAL_S
        server.up()
        wait_for(lambda: "takes jobs from" in worker.log(), 30, what="the node to open")
        time.sleep(2 * CHECK_INTERVAL_S + 1)
        licensed = [r for r in _runs(runs) if r["exit"] != 100]
        assert licensed and {r["exit"] for r in licensed} == {0}, licensed
        gaps = [b["start"] - a["end"] for a, b in zip(licensed, licensed[1:])]
        assert len(licensed) >= 2 and all(gap >= CHECK_INTERVAL_S for gap in gaps), gaps
        assert len(licensed) <= 1 + (licensed[-1]["end"] - licensed[0]["start"]) / CHECK_INTERVAL_S
    finally:
        worker.stop()
        server.down()
