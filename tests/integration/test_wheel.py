"""The wheel carries what a node runs: the card's top-level names, the rule file, no dev tooling, and
no moto among its requirements."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_installs_only_the_cards_names_and_no_moto(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("fair_imposition-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        top_level = archive.read(f"{info}/top_level.txt").decode().split()
        requires = [line for line in archive.read(f"{info}/METADATA").decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    assert sorted(top_level) == ["celeryconfig", "imposition", "leases", "tasks"]
    assert {n.split("/")[0] for n in names} == {"celeryconfig.py", "imposition", "leases", "tasks", info}
    assert "imposition/observability/prometheus/alerts.yml" in names
    node = [r for r in requires if "extra ==" not in r]
    assert not [r for r in node if any(dev in r for dev in ("moto", "simpy", "matplotlib", "pytest"))], node
