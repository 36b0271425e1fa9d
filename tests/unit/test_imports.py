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
