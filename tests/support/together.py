"""Run calls at the same moment, each on a thread of its own, behind one barrier (races in tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def together(calls: Sequence[Callable[[], T]], timeout_s: float = 120) -> list[T]:
    """Start every call of ``calls`` at once (a ``threading.Barrier``) and return their results in
    order.

    Raises:
        AssertionError: a call raised (all the errors are listed), or one was still running after
            ``timeout_s``.
    """
    results: list = [None] * len(calls)
    errors: list[BaseException] = []
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    assert not any(thread.is_alive() for thread in threads), f"a call was still running after {timeout_s} s"
    assert not errors, errors
    return results
