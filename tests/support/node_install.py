"""What a node installs, rebuilt from the ``Dockerfile``: its ``COPY`` lines laid out in a build context
of their own, the wheel built from that, and a fresh venv holding the wheel and its requirements at
the versions ``constraints.txt`` pins (tests/integration/test_wheel.py).

The venv gets the wheel alone (``pip install --no-deps --no-index``) and its requirements' closure
linked from this venv's site-packages, which ``make venv`` installed with ``-c constraints.txt``:
each one's version is checked against its pin, and ``pip check`` checks the closure is complete.
That proves the wheel's own contents, imports and start-up without downloading the dependencies
again; ``make image-check`` installs them from the index, into the real image.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


@dataclass(frozen=True)
class Copy:
    """One ``COPY`` instruction: its sources (relative to the build context) and its destination."""

    sources: tuple[str, ...]
    destination: str


def instructions(dockerfile: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (keyword in capitals, the rest), continuation lines joined."""
    joined = re.sub(r"\\\n", " ", dockerfile.read_text())
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def copies(dockerfile: Path = DOCKERFILE) -> list[Copy]:
    """The ``COPY`` instructions (flags such as ``--chown`` dropped)."""
    result = []
    for keyword, rest in instructions(dockerfile):
        if keyword == "COPY":
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            result.append(Copy(tuple(words[:-1]), words[-1]))
    return result


def _ignored(context: Path) -> list[str]:
    """``.dockerignore``'s patterns as file-name patterns (``**/x`` is ``x`` at any depth)."""
    ignore = context / ".dockerignore"
    lines = ignore.read_text().splitlines() if ignore.exists() else []
    return [line.strip().removeprefix("**/") for line in lines if line.strip() and not line.startswith("#")]


def lay_out(root: Path, context: Path = REPO, dockerfile: Path = DOCKERFILE) -> Path:
    """Copy exactly what the Dockerfile's ``COPY`` lines copy into ``root`` (an image's ``/`` in small),
    less what ``.dockerignore`` leaves out; returns ``root``."""
    patterns = _ignored(context)

    def skip(_: str, names: list[str]) -> set[str]:
        return {n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)}

    for copy in copies(dockerfile):
        for source in copy.sources:
            origin = context / source
            target = root / copy.destination.lstrip("/")
            if copy.destination.endswith("/"):
                target = target / origin.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=skip)
            else:
                shutil.copy2(origin, target)
    return root


def build_wheel(project: Path, out: Path) -> Path:
    """``pip wheel`` of ``project`` (a directory with its pyproject.toml) into ``out``; the wheel's path."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(project)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("fair_imposition-*.whl")
    return wheel


def pins(constraints: Path) -> dict[str, str]:
    """``constraints.txt``'s pins: canonical name → version."""
    found = {}
    for line in constraints.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            found[canonicalize_name(name)] = version.strip()
    return found


def requirement_closure(requirements: list[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions ``requirements`` need, with theirs, extras followed: canonical name
    → distribution (this interpreter's environment).

    Raises:
        importlib.metadata.PackageNotFoundError: one is not installed here.
    """
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in seen:
            continue
        seen.add((name, frozenset(requirement.extras)))
        dist = found.setdefault(name, importlib.metadata.distribution(name))
        for text in dist.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra})
                                            for extra in {"", *requirement.extras}):
                todo.append(needed)
    return found


def node_requirements(wheel: Path) -> list[str]:
    """The wheel's own requirements (``Requires-Dist`` without an extra): what a node installs."""
    from zipfile import ZipFile  # noqa: PLC0415

    with ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines
            if line.startswith("Requires-Dist:") and "extra ==" not in line]


@dataclass(frozen=True)
class NodeInstall:
    """A venv holding the wheel and its pinned requirements: its directory and the wheel."""

    venv: Path
    wheel: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self) -> dict[str, str]:
        """This process's environment with the venv's commands first on PATH and nothing of this
        checkout on the import path."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return {**env, "PATH": f"{self.bin}{os.pathsep}{env.get('PATH', '')}", "VIRTUAL_ENV": str(self.venv)}


def _site_packages(venv: Path) -> Path:
    (site,) = venv.glob("lib/python3*/site-packages")
    return site


def _link_requirements(dists: dict[str, importlib.metadata.Distribution], into: Path) -> None:
    """Link each distribution's top-level files and folders (its RECORD's first path parts inside
    site-packages: packages, modules, ``.dist-info``, bundled ``.libs``) into ``into``."""
    into.mkdir()
    for dist in dists.values():
        base = Path(str(dist.locate_file("")))
        for top in sorted({Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")} - {"__pycache__"}):
            if not (into / top).exists() and (base / top).exists():
                (into / top).symlink_to(base / top)


def install_node(wheel: Path, venv: Path, constraints: Path) -> NodeInstall:
    """A fresh venv (no system site-packages, no pip) with ``wheel`` installed alone and its
    requirements' closure at the versions ``constraints`` pins.

    Raises:
        AssertionError: a requirement of the closure is installed here at another version than its pin.
        subprocess.CalledProcessError: pip refused.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    dists = requirement_closure(node_requirements(wheel))
    pinned = pins(constraints)
    unpinned = {n: d.version for n, d in dists.items() if pinned.get(n) != d.version}
    assert not unpinned, f"not at constraints.txt's versions (refresh it, or make venv again): {unpinned}"
    deps = venv / "requirements"
    _link_requirements(dists, deps)
    (_site_packages(venv) / "node-requirements.pth").write_text(f"{deps}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run([*pip, "install", "--quiet", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    return NodeInstall(venv, wheel)


def pip_check(node: NodeInstall) -> subprocess.CompletedProcess:
    """``pip check`` of the node's venv: every requirement of every installed distribution is there."""
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(node.bin / "python"), "check"],
                          capture_output=True, text=True, timeout=120)
