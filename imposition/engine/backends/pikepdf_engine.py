"""The default engine: pages placed as Form XObjects on new sheets, with pikepdf (qpdf).

This class is the parent's side: it validates, limits and waits (:class:`~imposition.engine.backends.base.Engine`).
The child process (:mod:`imposition.engine.child`) opens the source, plans the job and draws it
(:mod:`imposition.engine.drawing`) and writes its JDF Layout (:mod:`imposition.engine.jdf`); hostile
input is parsed only there.
"""

from __future__ import annotations

from .base import Engine, EngineJob, Placed


class PikepdfEngine(Engine):
    """The open engine (``settings.engine = "pikepdf"``): plans and draws in a limited child process."""

    name = "pikepdf"
    writes_jdf = True

    def _place(self, job: EngineJob) -> Placed:
        result = self.run_child(job, "impose")
        return Placed(result["sheets"], result["sides"], result["pages_in"], result["blank_pages"],
                      Placed.warnings_of(result))
