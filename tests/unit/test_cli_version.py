"""``imposition --version``: the installed distribution's version, which pyproject.toml sets."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMPOSITION = str(Path(sys.executable).with_name("imposition"))


def test_imposition_version_prints_the_packages_version():
    done = subprocess.run([IMPOSITION, "--version"], capture_output=True, text=True, timeout=60)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert (done.returncode, done.stdout) == (0, f"imposition {declared}\n"), done.stderr
    assert version("fair-imposition") == declared
