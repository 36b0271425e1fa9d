"""Functions stay short where the scheduling core lives: none in ``leases/`` or ``tasks/base.py`` is
over :data:`MAX_FUNCTION_LINES` lines (docs/design.md, "The scheduling core"), so each verb reads
as a few named steps."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 60


def core_files() -> list[Path]:
    """Every module of ``leases/``, and ``tasks/base.py``."""
    return [*sorted((REPO / "leases").glob("*.py")), REPO / "tasks" / "base.py"]


def function_lengths(source: str) -> dict[str, int]:
    """Lines of every function and method of ``source``, from its ``def`` to its last line, by
    qualified name (``Class.method``, ``outer.inner``)."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = f"{prefix}{getattr(child, 'name', '')}"
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def test_the_count_is_from_def_to_last_line_of_every_function_and_method():
    body = "\n".join(f"    x{n} = {n}" for n in range(62))
    source = f"class C:\n    def m(self):\n        def inner():\n            pass\n        return 1\n\ndef f():\n{body}\n"
    assert function_lengths(source) == {"C.m": 4, "C.m.inner": 2, "f": 63}


def test_no_function_in_leases_or_the_task_base_class_is_over_60_lines():
    files = core_files()
    assert REPO / "leases" / "sweeper.py" in files and REPO / "leases" / "waiting.py" in files
    too_long = {f"{path.relative_to(REPO)}:{name}": lines for path in files
                for name, lines in function_lengths(path.read_text(encoding="utf-8")).items()
                if lines > MAX_FUNCTION_LINES}
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {too_long}"
