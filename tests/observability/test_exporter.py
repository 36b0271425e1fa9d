"""The node endpoint's merge of prometheus-client multiprocess files: dead processes drop out of the
live gauges, counters of dead processes stay (prometheus-client's multiprocess semantics)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from imposition.observability.errors import MetricsSetupError
from imposition.observability.exporter import build_registry, mark_dead_processes, start_endpoint

WRITER = textwrap.dedent("""
    import sys, time
    from prometheus_client import Counter, Gauge
    held = Gauge("leases_held", "h", ["tenant"], multiprocess_mode="livesum")
    done = Counter("jobs", "j", ["tenant", "outcome"])
    held.labels("acme").inc(int(sys.argv[1]))
    done.labels("acme", "succeeded").inc()
    print("written", flush=True)
    if sys.argv[2] == "stay":
        time.sleep(60)
""")


def writer(path, held: int, stay: bool) -> subprocess.Popen:
    """A separate process (like a prefork child) writing to the multiprocess directory ``path``."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(held), "stay" if stay else "exit"],
                            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(path)}, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"written"
    return proc


def test_a_child_killed_without_shutdown_drops_out_of_live_gauges_but_its_counts_stay(tmp_path):
    dead = writer(tmp_path, 3, stay=False)
    dead.wait()
    alive = writer(tmp_path, 2, stay=True)
    try:
        registry = build_registry(str(tmp_path))
        assert registry.get_sample_value("leases_held", {"tenant": "acme"}) == 2
        assert registry.get_sample_value("jobs_total", {"tenant": "acme", "outcome": "succeeded"}) == 2
        assert mark_dead_processes(str(tmp_path)) == []  # the scrape already marked the dead one
    finally:
        alive.kill()
        alive.wait()
    assert mark_dead_processes(str(tmp_path)) == [alive.pid]
    assert build_registry(str(tmp_path)).get_sample_value("leases_held", {"tenant": "acme"}) is None


def test_the_endpoint_serves_the_merged_files_and_a_taken_port_is_a_clear_error(tmp_path):
    done = writer(tmp_path, 1, stay=False)
    done.wait()
    server, thread = start_endpoint(0, "127.0.0.1", str(tmp_path))
    try:
        port = server.server_port
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'jobs_total{outcome="succeeded",tenant="acme"} 1.0' in body
        with pytest.raises(MetricsSetupError, match=f"metrics_port={port}"):
            start_endpoint(port, "127.0.0.1", str(tmp_path))
    finally:
        server.shutdown()
        server.server_close()
