"""Submit jobs and wait for them from another service: ``from imposition import client``.

::

    from imposition import client

    result = client.submit_file("order-17.pdf", tenant_id="acme", token="order-17",
                                layout={"layout": "saddle_stitch", "sheet": "A4"})
    plate = result.get(timeout=300)  # {"plate_key", "sheets", "sides", ...}, or the job's typed error
    client.result(result.id).state   # later, in any process: PENDING, STARTED, SUCCESS, FAILURE, REVOKED

:func:`submit` takes an input already in the bucket (``input_key``), :func:`submit_file` a local PDF.
Both run the service's admission and return the job's ``AsyncResult``, read from the jobs table; a
refusal raises before anything is written.

**It imports no generic top-level name.** A calling Celery project often has its own ``tasks.py``
and ``celeryconfig.py`` first on ``sys.path``. So this module reads the service's configuration from
the ``celeryconfig.py`` installed beside ``imposition``, by its file (unless ``CELERY_CONFIG_MODULE``
names one, or the app is configured already), and uses the service's ``tasks`` package by that name
only where the name is the service's; elsewhere it loads the same package as :data:`PRIVATE_NAME`
(its modules import each other relatively). The caller's ``tasks`` and ``celeryconfig`` stay theirs,
imported before or after. Why: docs/design.md, "The layout".

Settings come from ``IMPOSITION_*`` and AWS's own variables. Loading happens on the first call.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery.result import AsyncResult

#: Where the wheel (or the checkout of an editable install) puts the service's top-level names.
INSTALL_ROOT = Path(__file__).resolve().parent.parent
#: The name the service's ``tasks`` package is loaded under where ``tasks`` is someone else's.
PRIVATE_NAME = "imposition._service_tasks"
#: The name the shipped ``celeryconfig.py`` is loaded under when read by its file.
PRIVATE_CONFIG_NAME = "imposition._service_celeryconfig"
#: Errors a caller may catch, defined in the service's ``tasks`` package, offered here by name.
ERRORS = {"SubmissionRequired": "results", "JobFailed": "results", "SubmissionFieldError": "submission"}

_lock = threading.Lock()
_package: ModuleType | None = None


def service_tasks() -> ModuleType:
    """The service's ``tasks`` package, loaded once, with the service's Celery app configured (see
    the module docstring): ``tasks`` itself where that name is the service's, else the same package
    under :data:`PRIVATE_NAME`."""
    global _package
    with _lock:
        if _package is None:
            _configure_app()
            _package = _load_tasks()
    return _package


def _module(name: str) -> ModuleType:
    """Module ``name`` (``submission``, ``results``) of the service's ``tasks`` package."""
    return importlib.import_module(f"{service_tasks().__name__}.{name}")


def _is_service_file(origin: str | None, ours: Path) -> bool:
    return origin is not None and Path(origin).resolve() == ours.resolve()


def _configure_app() -> None:
    """Point the service's app at the shipped ``celeryconfig.py``, unless it is configured already or
    ``CELERY_CONFIG_MODULE`` names its configuration, or ``celeryconfig`` on the path is the shipped one."""
    from imposition.common.celery_app import app  # noqa: PLC0415 - loaded on first use

    shipped = INSTALL_ROOT / "celeryconfig.py"
    if app.configured or os.environ.get("CELERY_CONFIG_MODULE"):
        return
    found = sys.modules.get("celeryconfig")
    origin = getattr(found, "__file__", None) if found is not None else _origin("celeryconfig")
    if _is_service_file(origin, shipped):
        return
    app.config_from_object(_load_file(PRIVATE_CONFIG_NAME, shipped))


def _origin(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    return spec.origin if spec is not None else None


def _load_file(name: str, path: Path, *, package: bool = False) -> ModuleType:
    """Execute ``path`` (a module, or with ``package`` a package's ``__init__.py``) as module ``name``."""
    locations = [str(path.parent)] if package else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=locations)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as {name}: the fair-imposition installation is incomplete")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _load_tasks() -> ModuleType:
    """The service's ``tasks`` package: by its name where that is the service's, else under
    :data:`PRIVATE_NAME` (and then the result backend named by that name)."""
    ours = INSTALL_ROOT / "tasks" / "__init__.py"
    found = sys.modules.get("tasks")
    origin = getattr(found, "__file__", None) if found is not None else _origin("tasks")
    if _is_service_file(origin, ours):
        return importlib.import_module("tasks")
    package = sys.modules.get(PRIVATE_NAME) or _load_file(PRIVATE_NAME, ours, package=True)
    package.app.conf.result_backend = f"{PRIVATE_NAME}.results:JobTableBackend"
    return package


def submit(*, tenant_id: str, token: str, input_key: str, layout: dict[str, Any] | str,
           max_attempts: int | None = None, job_id: str | None = None, on_duplicate: str = "raise",
           file_name: str | None = None) -> AsyncResult:
    """Submit a job whose input PDF is in the bucket already, under ``tenants/<tenant_id>/``; return
    its ``AsyncResult`` (``.id`` is the job id; ``.get(timeout=...)`` waits for the plate).

    The arguments and every refusal are :func:`tasks.submission.submit_job`'s.
    """
    submitted = _module("submission").submit_job(tenant_id=tenant_id, token=token, input_key=input_key,
                                                 layout=layout, max_attempts=max_attempts, job_id=job_id,
                                                 on_duplicate=on_duplicate, file_name=file_name)
    return result(submitted)


def submit_file(path: str | Path, *, tenant_id: str, token: str, layout: dict[str, Any] | str,
                max_attempts: int | None = None, on_duplicate: str = "raise") -> AsyncResult:
    """Check the local PDF ``path``, upload it under the tenant's prefix and submit it; return the
    job's ``AsyncResult``. The arguments and every refusal are :func:`tasks.submission.submit`'s."""
    submitted = _module("submission").submit(path, tenant_id=tenant_id, token=token, layout=layout,
                                             max_attempts=max_attempts, on_duplicate=on_duplicate)
    return result(submitted)


def result(job_id: str) -> AsyncResult:
    """The ``AsyncResult`` of job ``job_id``: ``.state``, ``.get(timeout=...)``, ``.revoke()``
    (cancels a job that has not started)."""
    return service_tasks().app.AsyncResult(job_id)


def __getattr__(name: str) -> Any:
    """The typed errors of :data:`ERRORS` (``client.SubmissionRequired``, ``client.JobFailed``,
    ``client.SubmissionFieldError``), from the service's package."""
    if name in ERRORS:
        return getattr(_module(ERRORS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
