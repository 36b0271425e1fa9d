"""Module docstrings stay one screen: what the module owns and its diagram, at most
:data:`MAX_MODULE_DOCSTRING_LINES` lines (the rationale goes to docs/design.md)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_MODULE_DOCSTRING_LINES = 25
#: Directories that hold no module of ours: tests, build output, virtual environments and caches
#: (every directory whose name starts with a dot is skipped too).
SKIPPED_DIRS = {"tests", "out", "build", "__pycache__"}


def module_files(root: Path) -> list[Path]:
    """Every non-test ``.py`` file under ``root``, sorted."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [d for d in subdirectories
                             if not d.startswith(".") and d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        found += [Path(directory) / name for name in files
                  if name.endswith(".py") and not name.startswith("test_") and name != "conftest.py"]
    return sorted(found)


def docstring_lines(source: str) -> int:
    """Lines of the module docstring of ``source`` (0 without one)."""
    docstring = ast.get_docstring(ast.parse(source))
    return len(docstring.splitlines()) if docstring else 0


def test_the_count_is_of_the_docstring_lines():
    body = "\n".join(f"line {n}" for n in range(1, 27))
    assert docstring_lines(f'"""{body}\n"""\n\nimport os\n') == 26
    assert docstring_lines('"""One line."""\n') == 1
    assert docstring_lines("import os\n") == 0


def test_every_module_docstring_is_at_most_one_screen():
    files = module_files(REPO)
    assert REPO / "tasks" / "base.py" in files and not any("tests" in f.relative_to(REPO).parts for f in files)
    too_long = {str(f.relative_to(REPO)): n for f in files
                if (n := docstring_lines(f.read_text(encoding="utf-8"))) > MAX_MODULE_DOCSTRING_LINES}
    assert not too_long, (f"module docstrings over {MAX_MODULE_DOCSTRING_LINES} lines (move the rationale to "
                          f"docs/design.md): {too_long}")
