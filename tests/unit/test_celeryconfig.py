"""``celeryconfig``: Celery's constants, overridable the usual ways; the settings-derived values are
defaults under it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SHOW = ("import json, tasks; c = tasks.app.conf; print(json.dumps([c.worker_concurrency, "
        "c.worker_prefetch_multiplier, c.task_default_queue, c.broker_transport_options['visibility_timeout'], "
        "c.result_backend, c.task_acks_late]))")


def _run(code: str, env: dict[str, str]) -> list:
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(REPO), **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def _conf(env: dict[str, str]) -> list:
    return _run(SHOW, env)


def test_celeryconfig_holds_constants_only():
    """Every statement is a docstring or a name bound to a literal: nothing runs at import."""
    tree = ast.parse((REPO / "celeryconfig.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, ast.dump(node)
        ast.literal_eval(node.value)  # raises on anything but a literal


def test_settings_derive_the_rest_and_celeryconfig_sets_celerys_constants():
    concurrency, prefetch, queue, visibility_s, backend, acks_late = _conf({"IMPOSITION_SLOTS_PER_NODE": "6"})
    assert (concurrency, prefetch, queue, backend, acks_late) == (6, 1, "imposition", "tasks.results:JobTableBackend",
                                                                   True)
    clocks = "import json; from imposition.common.clocks import get_clocks; print(json.dumps([get_clocks().visibility_timeout_s]))"
    assert [visibility_s] == _run(clocks, {})


def test_an_operator_overrides_celeryconfig_the_usual_way(tmp_path):
    (tmp_path / "siteconfig.py").write_text("from celeryconfig import *  # noqa\n"
                                            "worker_prefetch_multiplier = 4\nworker_concurrency = 3\n")
    env = {"CELERY_CONFIG_MODULE": "siteconfig", "PYTHONPATH": f"{tmp_path}:{REPO}"}
    concurrency, prefetch, queue, _, _, acks_late = _conf(env)
    assert (concurrency, prefetch, queue, acks_late) == (3, 4, "imposition", True)
