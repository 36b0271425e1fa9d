"""The unit tier: pure tests that need no server (no moto, no Redis, no worker).

Every test here is marked ``unit``; ``make test-unit`` (``pytest -m unit tests/unit``) runs them
alone, and the session then starts no local AWS endpoint (see ``tests/conftest.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.unit)
