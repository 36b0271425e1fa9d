"""The engine gate's metrics end to end: a real pdftoolbox worker node (the stand-in executable) whose
licence server is down at its start exports ``engine_ready 0`` and counts the failed check by reason;
once the server is back, its next check opens it and ``engine_ready`` is 1. Read from the node's own
metrics endpoint, as Prometheus scrapes it (the alert ``ImpositionEngineUnavailable`` reads this)."""

from __future__ import annotations

import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import reset_aws
from tests.observability.support import free_port
from tests.support.licence_server import LicenceServer, install_stand_in
from tests.support.processes import start_worker, wait_for


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
