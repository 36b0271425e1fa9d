"""Importing does no work: every package imports in a clean environment, with no AWS endpoint, no
Redis and no ``IMPOSITION_*`` variable, in any order (no import cycle hides behind another import)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Nothing that could reach a server: no AWS credentials or endpoint, no Redis URL.
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(REPO)}
PACKAGES = ("tasks", "leases", "imposition.observability.metrics", "imposition.webhooks", "imposition.admission", "imposition")


def _import(statement: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", statement], cwd=REPO, env=CLEAN_ENV,
                          capture_output=True, text=True, timeout=120)


def test_all_packages_import_together_with_no_server_and_no_environment():
    result = _import(f"import {', '.join(PACKAGES)}")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("module", PACKAGES + ("imposition.webhooks.tasks", "imposition.observability.sampler", "tasks.config", "imposition.cli.main"))
def test_each_module_imports_first(module):
    """Each alone, first in its process: an import cycle raises here (a partially initialised module)."""
    result = _import(f"import {module}")
    assert result.returncode == 0, result.stderr


def test_importing_tasks_registers_every_task():
    """The shared tasks of lower packages reach the app through :func:`tasks.wiring.install`."""
    result = _import("import tasks; print(sorted(n for n in tasks.app.tasks if n.startswith('imposition.')))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == str(sorted(
        ["imposition.deliver_webhook", "imposition.drain_webhook_outbox", "imposition.impose",
         "imposition.sample_queues", "imposition.sweep"]))


def test_the_packages_below_tasks_read_no_settings_at_import():
    """Table names, the region and every clock are read when used, so a test or a command may set
    ``IMPOSITION_*`` after importing them."""
    result = _import("import imposition.common.settings as s, leases, imposition.admission, imposition.webhooks, imposition.observability.metrics, imposition,"
                     " devstack.stack; print(s.get_settings.cache_info().currsize)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0"]


#: A calling Celery project's own top-level names (issue 42, §3): first on sys.path, as a script's are.
CALLER_TASKS = "from celery import Celery\napp = Celery('caller')\napp.config_from_object('celeryconfig')\n" \
               "@app.task\ndef add(x, y):\n    return x + y\n"
CALLER_CONFIG = "broker_url = 'memory://'\n"


def test_the_tasks_package_imports_itself_relatively_so_it_loads_under_another_name():
    """``imposition.client`` loads ``tasks`` under a private name where a caller owns ``tasks``: an
    absolute ``tasks.`` import inside the package would reach the caller's module instead."""
    import ast

    for path in sorted((REPO / "tasks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            assert not [n for n in names if n == "tasks" or n.startswith("tasks.")], (
                f"{path.name}:{node.lineno} imports tasks absolutely; use a relative import (from .x import y)")


@pytest.mark.parametrize("caller_first", [True, False])
def test_the_client_leaves_a_callers_tasks_and_celeryconfig_theirs(tmp_path, caller_first):
    (tmp_path / "tasks.py").write_text(CALLER_TASKS)
    (tmp_path / "celeryconfig.py").write_text(CALLER_CONFIG)
    theirs = "import tasks, celeryconfig"
    ours = "from imposition import client; service = client.service_tasks(); conf = service.app.conf"
    check = ("print(service.__name__, tasks.__file__, tasks.app.conf.broker_url, tasks.add.apply(args=(2, 3)).get(),"
             " conf.broker_url, conf.result_backend, client.SubmissionRequired.__module__)")
    code = "; ".join([theirs, ours, check] if caller_first else [ours, theirs, check])
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=CLEAN_ENV, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "imposition._service_tasks", str(tmp_path / "tasks.py"), "memory://", "5",
        "imposition-sqs://", "imposition._service_tasks.results:JobTableBackend", "imposition._service_tasks.results"]


def test_the_client_uses_tasks_by_its_name_where_the_name_is_the_services():
    result = _import("from imposition import client; import tasks; print(client.service_tasks() is tasks,"
                     " tasks.app.conf.result_backend)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "tasks.results:JobTableBackend"]
