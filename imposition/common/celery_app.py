"""The one Celery application object, ``Celery("imposition")``, created bare so that every package
can define its tasks on it without importing :mod:`tasks` (which wires it: :mod:`tasks.celery_app`,
:func:`tasks.wiring.install`). Its configuration is :mod:`tasks.config`, named here as a string:
Celery reads it when first needed, never at import.
"""

from __future__ import annotations

from celery import Celery

app = Celery("imposition")
app.config_from_object("tasks.config")
