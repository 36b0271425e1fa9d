"""A stand-in callas License Server for tests: a TCP listener on loopback that accepts and closes
connections (what the stand-in pdfToolbox, tests/imposition/fake_pdftoolbox.py, takes for a licence
granted), which a test can take down and bring back on the same port (a licence outage)."""

from __future__ import annotations

import socket
import stat
import sys
import threading
from pathlib import Path

#: The stand-in pdfToolbox executable's script.
STAND_IN = Path(__file__).resolve().parents[1] / "imposition" / "fake_pdftoolbox.py"


class LicenceServer:
    """``with LicenceServer() as server:`` listens on ``server.address`` (``127.0.0.1:<port>``)
    until :meth:`down`; :meth:`up` listens again on the same port."""

    def __init__(self) -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.address = f"127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def up(self) -> None:
        """Listen (again) on the port."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.1)  # accept() wakes to see a down()
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, args=(listener,), daemon=True)
        self._thread.start()

    def _serve(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed: down()
            connection.close()

    def down(self) -> None:
        """Stop listening: a connection to the port is refused."""
        listener, self._listener = self._listener, None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if listener is not None:
            listener.close()

    def __enter__(self) -> "LicenceServer":
        self.up()
        return self

    def __exit__(self, *_: object) -> None:
        self.down()


def install_stand_in(directory: Path) -> tuple[Path, Path]:
    """Write an executable ``pdfToolbox`` that runs the stand-in (tests/imposition/fake_pdftoolbox.py)
    and a process plan file into ``directory``; returns their paths (the settings'
    ``pdftoolbox_path`` and ``pdftoolbox_process_plan``)."""
    directory.mkdir(parents=True, exist_ok=True)
    executable = directory / "pdfToolbox"
    executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
    executable.chmod(executable.stat().st_mode | stat.S_IXUSR)
    plan = directory / "impose.kfpx"
    plan.write_bytes(b"process plan stand-in")
    return executable, plan
