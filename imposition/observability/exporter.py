"""The per-node Prometheus endpoint of a Celery worker (prometheus-client multiprocess mode).

A prefork worker is one main process and N children; each child counts its own jobs. In
prometheus-client's multiprocess mode every process writes its values to memory-mapped files in one
directory and the endpoint merges them on each scrape (prometheus-client docs, "Multiprocess Mode").
The worker's lifecycle, through Celery's signals:

==========================  ===================  ===================================================
signal                      process              what happens
==========================  ===================  ===================================================
``celeryd_init``            main, before fork    with ``metrics_port`` > 0: the node's directory
                                                 ``<metrics_dir>/<node name>`` is emptied and set as
                                                 ``PROMETHEUS_MULTIPROC_DIR`` (children inherit it)
``worker_ready``            main, pool started   ``/metrics`` and ``/healthz`` (:mod:`.health`) start
                                                 on ``metrics_address:metrics_port``; the node's
                                                 slots are set on an imposition node
``worker_process_shutdown`` each child, at exit  its live gauges are dropped (``mark_process_dead``)
``beat_init``               beat, before its loop  beat's ``/healthz`` (``check_beat``) and ``/metrics``
scrape                      main (HTTP thread)   children that died without shutting down (SIGKILL)
                                                 are marked dead before the merge, so the leases
                                                 held and slots busy never count a dead process
==========================  ===================  ===================================================

One port per worker node: run the imposition and maintenance workers of one host with different
``IMPOSITION_METRICS_PORT`` values. ``metrics_port = 0`` (the default) starts nothing.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import sys
import threading
from typing import Any

from wsgiref.simple_server import WSGIRequestHandler, make_server

from celery.signals import beat_init, celeryd_init, worker_process_shutdown, worker_ready

from imposition.common.clocks import Clocks, get_clocks
from imposition.common.settings import Settings, get_settings
from imposition.observability import health
from imposition.observability.errors import MetricsSetupError
from imposition.observability.metrics import get_metrics

log = logging.getLogger(__name__)

ENV_VAR = "PROMETHEUS_MULTIPROC_DIR"
_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db$")


def node_metrics_dir(settings: Settings, node_name: str) -> str:
    """The multiprocess directory of worker node ``node_name`` (``name@host``, made file-name safe)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", node_name)
    return os.path.join(settings.metrics_dir, safe)


def prepare_multiprocess_dir(path: str) -> str:
    """Create ``path`` empty and point ``PROMETHEUS_MULTIPROC_DIR`` at it; return ``path``.

    prometheus-client picks its value storage (in memory or multiprocess files) from the
    environment when ``prometheus_client.values`` is first imported, and every metric reads that
    choice when it is constructed. In a worker it is already imported by then: the ``celery`` command
    loads its plugins' commands at start, and Flower's imports prometheus-client. No metric exists
    yet at ``celeryd_init`` (ours are made on first use, Flower's only inside Flower), so the
    choice is made again here, after the variable is set.

    Raises:
        MetricsSetupError: a metric was already constructed in this process (it would keep writing
            to memory, invisible to the endpoint).
    """
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    os.environ[ENV_VAR] = path
    values: Any = sys.modules.get("prometheus_client.values")  # its ValueClass is replaced below
    if values is not None and not getattr(values.ValueClass, "_multiprocess", False):
        from prometheus_client import REGISTRY  # noqa: PLC0415 - prometheus-client only after PROMETHEUS_MULTIPROC_DIR is set
        from prometheus_client.metrics import MetricWrapperBase  # noqa: PLC0415 - prometheus-client only after PROMETHEUS_MULTIPROC_DIR is set

        made = [c for c in list(REGISTRY._collector_to_names) if isinstance(c, MetricWrapperBase)]
        if made:
            raise MetricsSetupError(
                f"{ENV_VAR} set after metrics were constructed ({made[0]!r}); they would not reach the endpoint"
            )
        values.ValueClass = values.get_value_class()
    return path


def mark_dead_processes(path: str) -> list[int]:
    """Drop the live-gauge files of processes that no longer exist; return their pids.

    A child killed with SIGKILL never runs ``worker_process_shutdown``; without this its
    ``leases_held`` would stay counted until the node restarts.
    """
    from prometheus_client import multiprocess  # noqa: PLC0415 - prometheus-client only after PROMETHEUS_MULTIPROC_DIR is set

    dead = set()
    for file in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        match = _LIVE_GAUGE_FILE.search(os.path.basename(file))
        if not match:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            dead.add(pid)
        except PermissionError:
            pass  # exists, owned by someone else
    for pid in dead:
        multiprocess.mark_process_dead(pid, path)
    return sorted(dead)


def build_registry(path: str):
    """A registry whose collection merges the files of ``path`` (dead processes dropped first)."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415 - prometheus-client only after PROMETHEUS_MULTIPROC_DIR is set
    from prometheus_client.multiprocess import MultiProcessCollector  # noqa: PLC0415 - prometheus-client only after PROMETHEUS_MULTIPROC_DIR is set

    class _LiveCollector(MultiProcessCollector):
        def collect(self):
            mark_dead_processes(path)
            return super().collect()

    registry = CollectorRegistry()
    _LiveCollector(registry, path=path)
    return registry


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No access log: every scrape and health check would write a line."""


def start_endpoint(port: int, address: str, path: str, clocks: Clocks | None = None):
    """Serve ``/metrics`` for the multiprocess directory ``path`` and ``/healthz``
    (:mod:`imposition.observability.health`) from a daemon thread; returns (server, thread).

    Raises:
        MetricsSetupError: the port cannot be bound (names the setting, address and port).
    """
    from prometheus_client import make_wsgi_app  # noqa: PLC0415 - prometheus-client only after PROMETHEUS_MULTIPROC_DIR is set

    the_clocks = clocks or get_clocks()
    return _serve(health.wsgi_app(make_wsgi_app(build_registry(path)), lambda: health.check(the_clocks)),
                  port, address)


def start_beat_endpoint(port: int, address: str, stale_after_s: float):
    """Serve beat's ``/healthz`` (:func:`imposition.observability.health.check_beat`) and its own
    process's ``/metrics`` from a daemon thread; returns (server, thread).

    Raises:
        MetricsSetupError: the port cannot be bound (names the setting, address and port).
    """
    from prometheus_client import make_wsgi_app  # noqa: PLC0415 - as in start_endpoint

    return _serve(health.wsgi_app(make_wsgi_app(), lambda: health.check_beat(stale_after_s)), port, address)


def _serve(app: Any, port: int, address: str):
    from prometheus_client.exposition import ThreadingWSGIServer  # noqa: PLC0415 - as in start_endpoint

    try:
        server = make_server(address, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
    except OSError as exc:
        raise MetricsSetupError(
            f"metrics_port={port} on {address}: cannot bind ({exc}); give each worker node its own port"
        ) from exc
    thread = threading.Thread(target=server.serve_forever, name="metrics-endpoint", daemon=True)
    thread.start()
    return server, thread


# --- the worker's hooks ---------------------------------------------------------------------------


def _on_celeryd_init(sender=None, **_: object) -> None:
    settings = get_settings()
    if not settings.metrics_port:
        return
    try:
        path = prepare_multiprocess_dir(node_metrics_dir(settings, str(sender)))
        health.prepare_renewals_dir()
    except (MetricsSetupError, OSError) as exc:  # logging is not set up yet: say it on stderr too
        print(f"metrics of node {sender} disabled: {exc}", file=sys.stderr)
        log.error("metrics of node %s disabled: %s", sender, exc)
        return
    log.info("metrics of node %s go to %s", sender, path)


def _on_worker_ready(sender=None, **_: object) -> None:
    settings = get_settings()
    path = os.environ.get(ENV_VAR)
    if not settings.metrics_port or not path:
        return

    health.reset()
    start_endpoint(settings.metrics_port, settings.metrics_address, path)
    consumer = sender
    queues = {q.name for q in consumer.app.amqp.queues.consume_from.values()}
    if settings.imposition_queue in queues:
        get_metrics().node_slots.set(consumer.pool.num_processes)
    log.info("metrics of node %s on http://%s:%s/metrics", consumer.hostname, settings.metrics_address,
             settings.metrics_port)


def _on_beat_init(sender=None, **_: object) -> None:
    settings = get_settings()
    if not settings.metrics_port:
        return
    health.reset()
    start_beat_endpoint(settings.metrics_port, settings.metrics_address, health.beat_stale_after_s(settings))
    log.info("beat's /healthz on http://%s:%s%s", settings.metrics_address, settings.metrics_port,
             health.HEALTH_PATH)


def _on_worker_process_shutdown(pid=None, **_: object) -> None:
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    from prometheus_client import multiprocess  # noqa: PLC0415 - prometheus-client only after PROMETHEUS_MULTIPROC_DIR is set

    multiprocess.mark_process_dead(pid or os.getpid(), path)


def install() -> None:
    """Connect the worker's exporter hooks (celeryd_init, worker_ready, worker_process_shutdown) and
    beat's (beat_init) (idempotent: a receiver connected twice is connected once)."""
    celeryd_init.connect(_on_celeryd_init)
    worker_ready.connect(_on_worker_ready)
    beat_init.connect(_on_beat_init)
    worker_process_shutdown.connect(_on_worker_process_shutdown)
    health.install()
