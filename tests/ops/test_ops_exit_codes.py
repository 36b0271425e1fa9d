"""docs/operations.md's exit-code table is what the commands do (issue 34, item 1): every command in
its "try it" column is run here, as an operator types it (click's runner, the real local stack, a
tenant registered and one not), and must end with its row's status."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.ops.helpers import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_examples() -> list[tuple[int, str]]:
    """``(exit status, command)`` of every example in the table of the "Exit codes" section."""
    section = DOC.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in section.splitlines():
        row = re.match(r"\|\s*(\d)\s*\|.*\|(.*)\|\s*$", line)
        if row:
            out += [(int(row.group(1)), example) for example in re.findall(r"`([^`]+)`", row.group(2))
                    if re.match(r"([A-Z_]+=\S+ )*imposition ", example)]
    return out


def test_every_exit_status_of_the_table_has_examples():
    assert {status for status, _ in documented_examples()} == {0, 1, 2, 3}


def test_every_example_of_the_exit_code_table_ends_with_its_status(new_tenant, registration_required, monkeypatch):
    from imposition.common.settings import get_settings

    tenant, unknown = new_tenant("ops"), new_tenant("acmee", register=False)
    for status, example in documented_examples():
        words = shlex.split(example.format(tenant=tenant, unknown=unknown))
        env = {}
        while "=" in words[0]:
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        assert words[0] == "imposition", example
        with monkeypatch.context() as patched:
            for name, value in env.items():
                patched.setenv(name, value)
            get_settings.cache_clear()
            try:
                result = cli(*words[1:], expect=status)
            finally:
                get_settings.cache_clear()
        assert "Traceback" not in result.output, example
        if status:
            assert result.stderr.strip(), example  # a failure always says why, on stderr
