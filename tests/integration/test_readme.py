"""Every command of the README's "Operating it" block, and its Python example, runs as written
(issue 42, §2), on a real local stack with a real worker.

The block is read from README.md and each line run, one after the other, as a reader types them
with ``make run KEEP=1`` up: the environment is what ``.run/env`` exports
(:func:`devstack.demo.operator_environment`: auto-registration off), the folder holds ``samples/``
as the checkout does (the test's own, so ``job download`` writes under it). Each line is one
``imposition`` command, split as the shell splits it and run through the command's own entry point
in this process (click's runner: the same parsing and code, without twenty interpreter starts); the
Python example runs in a process of its own. The stack starts as ``make run`` leaves it: tenant
``acme`` registered by its workload.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import Result

from devstack.demo import env_file_text, operator_environment

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

#: About 20 commands, one of them simulating four weeks twice, and a Python process (make test, 2 cores).
pytestmark = [pytest.mark.file_duration_s(60), pytest.mark.timeout(600)]


def readme_block(section: str, language: str) -> str:
    """The first ```language block of README section ``## section``."""
    text = README.read_text(encoding="utf-8").split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(rf"```{language}\n(.*?)```", text, re.S)
    assert found is not None, f"no {language} block in README section {section!r}"
    return found.group(1)


@pytest.fixture
def operator_shell(imposition_worker, tmp_path) -> tuple[dict[str, str], Path]:
    """``(environment, folder)`` of an operator's shell after ``. .run/env`` in the checkout."""
    from imposition.common.settings import get_settings
    from leases.tenants import TenantExists, create_tenant

    try:
        create_tenant("acme")  # make run's workload registered it
    except TenantExists:  # the module's other test did
        pass
    variables = operator_environment({}, get_settings().events_url, tmp_path / "run")
    assert "export IMPOSITION_AUTO_REGISTER_TENANTS=false\n" in env_file_text(variables)
    env = {**os.environ, **variables, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    (tmp_path / "samples").symlink_to(REPO / "samples")
    return env, tmp_path


def _run(line: str, env: dict[str, str], folder: Path, monkeypatch) -> Result:
    """Run one README line, ``imposition ARGS  # comment``, as the shell would split it, in ``folder``
    with ``env``; its exit status and output."""
    from click.testing import CliRunner

    from imposition.cli.main import main
    from imposition.common.settings import get_settings

    words = shlex.split(line, comments=True)
    assert words[0] == "imposition" and not set(words) & {"|", ">", "<", "&&", ";"}, line
    with monkeypatch.context() as patched:
        for name, value in env.items():
            patched.setenv(name, value)
        patched.chdir(folder)
        get_settings.cache_clear()
        try:
            return CliRunner().invoke(main, words[1:], catch_exceptions=False)
        finally:
            get_settings.cache_clear()


def test_every_command_of_operating_it_runs_as_written(operator_shell, monkeypatch):
    env, folder = operator_shell
    lines = [line for line in readme_block("Operating it", "sh").splitlines() if line.strip()]
    assert shlex.split(lines[0], comments=True) == [".", ".run/env"], lines[0]
    commands = lines[1:]
    said = {tuple(shlex.split(c, comments=True)[1:3]) for c in commands}
    for verb in (("submit", "--tenant"), ("tenant", "create"), ("tenant", "list"), ("job", "cancel"),
                 ("job", "download"), ("job", "retry"), ("simulate", "--workload"), ("capacity-report",)):
        assert any(s[:len(verb)] == verb for s in said), f"the README's Operating it lacks imposition {' '.join(verb)}"
    first_submit = next(c for c in commands if " submit " in f" {c} ")
    refused = _run(first_submit, env, folder, monkeypatch)  # before `tenant create`: refused, as the README says
    assert refused.exit_code == 2 and refused.stderr.startswith("Error: unknown_tenant: "), refused.stderr
    out = {}
    for command in commands:
        started = time.monotonic()
        done = _run(command, env, folder, monkeypatch)
        print(f"{time.monotonic() - started:6.1f} s  {command}")
        assert done.exit_code == 0, (command, done.stdout, done.stderr)
        out[command] = done

    def of(prefix: str) -> Result:
        return next(done for command, done in out.items() if command.startswith(prefix))

    downloaded = re.search(r"to (\S+\.pdf) \(\d+ bytes\)", of("imposition job download").stdout)
    assert downloaded is not None, of("imposition job download").stdout
    assert Path(downloaded.group(1)).is_file() and Path(downloaded.group(1)).parent == folder / "out" / "hooli"
    assert "cancelled job " in of("imposition job cancel").stdout
    assert "retrying job " in of("imposition job retry").stdout
    assert " succeeded: 2 sheet(s), 4 side(s)" in of(first_submit).stderr
    assert "VERDICT:" in of("imposition capacity-report").stdout
    assert "\n1 → 2 node(s): long waits " in of("imposition simulate").stdout


def test_the_python_example_runs_as_written(operator_shell):
    env, folder = operator_shell
    done = subprocess.run([sys.executable, "-c", readme_block("Calling it from Python", "python")], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    job_id, state = done.stdout.splitlines()[0].split()
    assert state in ("PENDING", "STARTED", "SUCCESS")  # read once, just after the submission
    assert done.stdout.splitlines()[1] == (f"tenants/acme/jobs/{job_id}/plate.pdf 2 4 "
                                           f"tenants/acme/jobs/{job_id}/plate.jdf")
