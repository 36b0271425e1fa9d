"""The one Celery application object, ``Celery("imposition")``, created bare so that every package
can define its tasks on it without importing :mod:`tasks` (which wires it: :mod:`tasks.celery_app`,
:func:`tasks.wiring.install`).

Its configuration module is ``celeryconfig`` (Celery's usual name), or the module named by
``CELERY_CONFIG_MODULE`` (which ``celery --config`` sets). Celery reads it when first needed, never
at import. :mod:`tasks.celery_app` adds the settings-derived values as defaults.
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery("imposition")
app.config_from_object(os.environ.get("CELERY_CONFIG_MODULE", "celeryconfig"))
