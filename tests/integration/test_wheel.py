"""The wheel a node runs, built from exactly what the ``Dockerfile`` copies (its ``COPY`` lines, less
what ``.dockerignore`` leaves out; :mod:`tests.support.node_install`):

* it carries the card's top-level names (``celeryconfig`` among them), the rule file, no dev tooling,
  and no moto among its requirements;
* the image installs it with the pinned versions (``-c`` the copied ``constraints.txt``);
* installed into a fresh venv with those versions, it imports from the venv, not this checkout, and
  every role starts from it by its own command (``imposition process run ROLE``) against the local
  stack, answers its health check, and stops with status 0 when asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib

import pytest

from devstack.stack import BEAT_READY, FLOWER_READY, WORKER_READY, flower_login, stop_all
from tasks.processes import ROLES, stop_timeout_s
from tests.conftest import reset_aws
from tests.observability.support import free_port
from tests.support import node_install
from tests.support.processes import CeleryProcess, wait_for

pytestmark = pytest.mark.file_duration_s(60)  # the long files run first (tests/conftest.py)

REPO = node_install.REPO
READY = {"beat": BEAT_READY, "flower": FLOWER_READY}


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    """What the Dockerfile's COPY lines put into the image, laid out under a directory of its own."""
    return node_install.lay_out(tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="module")
def wheel(image_root, tmp_path_factory):
    """The wheel built from the copied project, as the image's ``pip install /src`` builds it."""
    return node_install.build_wheel(image_root / "src", tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def node(wheel, image_root, tmp_path_factory):
    return node_install.install_node(wheel, tmp_path_factory.mktemp("node") / "venv",
                                     image_root / "src" / "constraints.txt")


def test_the_wheel_from_the_dockerfiles_copies_holds_the_cards_names_and_no_moto(wheel):
    from zipfile import ZipFile

    with ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        top_level = archive.read(f"{info}/top_level.txt").decode().split()
    assert sorted(top_level) == ["celeryconfig", "imposition", "leases", "tasks"]
    assert {n.split("/")[0] for n in names} == {"celeryconfig.py", "imposition", "leases", "tasks", info}
    assert "imposition/observability/prometheus/alerts.yml" in names
    node = node_install.node_requirements(wheel)
    assert not [r for r in node if any(dev in r for dev in ("moto", "simpy", "matplotlib", "pytest"))], node


def test_the_image_installs_the_copied_project_with_the_pinned_versions(image_root):
    """The image's pip install names the copied constraints.txt (``-c``), which is the checkout's."""
    (install,) = [rest for keyword, rest in node_install.instructions() if keyword == "RUN" and "pip install" in rest]
    words = install.split()
    constraints = words[words.index("-c") + 1]
    assert (image_root / constraints.lstrip("/")).read_text() == (REPO / "constraints.txt").read_text()
    assert words[words.index("-c") + 2] == "/src" and (image_root / "src" / "pyproject.toml").is_file()


def test_the_node_install_imports_from_itself_and_has_no_dev_tooling(node, tmp_path):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    shown = subprocess.run([str(node.bin / "imposition"), "--version"], env=node.env(), cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert (shown.returncode, shown.stdout) == (0, f"imposition {version}\n"), shown.stderr
    checked = node_install.pip_check(node)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    where = subprocess.run([str(node.bin / "python"), "-c", (
        "import json, celeryconfig, tasks, importlib.util as u; "
        "print(json.dumps([celeryconfig.__file__, tasks.__file__, u.find_spec('moto') is None]))")],
        env=node.env(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    celeryconfig, tasks, no_moto = json.loads(where.stdout)
    assert celeryconfig.startswith(str(node.venv)) and tasks.startswith(str(node.venv)), (celeryconfig, tasks)
    assert no_moto


def _role_env(name: str, node: node_install.NodeInstall, tmp_path) -> dict[str, str]:
    env = {**node.env(), "IMPOSITION_PROCESS_ROLE": name, "IMPOSITION_METRICS_ADDRESS": "127.0.0.1",
           "IMPOSITION_METRICS_DIR": str(tmp_path / "metrics"), "IMPOSITION_SLOTS_PER_NODE": "2",
           "IMPOSITION_BEAT_SCHEDULE_PATH": str(tmp_path / "beat-schedule")}
    if name == "flower":
        login, _ = flower_login(free_port())
        return {**env, **login}
    return {**env, "IMPOSITION_METRICS_PORT": str(free_port())}


def test_every_role_starts_from_the_node_install_answers_its_health_check_and_stops(node, tmp_path):
    """Each role as the image and the units start it: its command from the venv, run in a directory
    that holds nothing of this checkout, so ``celery -A tasks`` finds ``celeryconfig`` only in the
    install. The roles start together; each answers ``imposition process healthcheck`` (the image's
    HEALTHCHECK) and exits 0 on SIGTERM within its stop timeout."""
    reset_aws()
    work = tmp_path / "work"
    work.mkdir()
    envs = {name: _role_env(name, node, tmp_path) for name in ROLES}
    processes = {name: CeleryProcess([str(node.bin / "imposition"), "process", "run"], tmp_path / f"{name}.log",
                                     env=envs[name], cwd=work) for name in ROLES}
    try:
        for name, process in processes.items():
            process.ready = READY.get(name, WORKER_READY)
            process.await_ready(timeout_s=90)

        def healthy(name: str) -> str | None:
            done = subprocess.run([str(node.bin / "imposition"), "process", "healthcheck", name], env=envs[name],
                                  cwd=work, capture_output=True, text=True, timeout=30)
            return done.stdout if done.returncode == 0 else None

        for name in ROLES:
            said = wait_for(lambda name=name: healthy(name), 30, what=f"{name}'s health check to pass")
            status = said.strip() if name == "flower" else json.loads(said)["status"]
            assert status == ("OK" if name == "flower" else "ok"), (name, said)
        for process in processes.values():
            process.terminate()
        for name, process in processes.items():
            code = process.proc.wait(timeout=stop_timeout_s(name) + 10)
            assert code == 0, (name, process.log()[-3000:])
        for name, process in processes.items():
            assert "Traceback" not in process.log(), (name, process.log()[-3000:])
    finally:
        stop_all(list(processes.values()))
    assert os.listdir(work) == [], "a role wrote into its working directory"
