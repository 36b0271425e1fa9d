"""One contender inside a long-lived process, its imports paid before the clock starts.

    python -m bench.inprocess <what> <input.pdf> <output.pdf> <runs> [<json>]

``runs`` is the least number of runs; a short job runs until a second has been measured. ``what``:

* ``engine``: :meth:`imposition.PikepdfEngine.impose` with a child process started per job (the
  former worker, and the engine without :func:`imposition.engine.isolation.keep_warm`), ``json`` the layout
  specification; that start is in the time.
* ``warm``: the same call as a worker process makes it now, with a warm engine child (started
  before the clock): the request, the work in the child and the answer.
* ``work``: the same job's work alone, :func:`imposition.engine.child.run` in this process (the content
  budget's check, open, plan, draw, save), ``json`` the layout specification, resolved before the
  clock by the engine it measures (:meth:`imposition.engine.spec.LayoutSpec.resolved`: a baseline's
  own); ``engine`` minus ``work`` is the child's start.
* ``steps``: ``work``, its CPU time split by step (:class:`imposition.engine.child.Laps`): what each check costs.
* ``copy``, ``rewrite``: the floors, :func:`bench.copy_floor.copy_pages` and :func:`bench.copy_floor.rewrite`.

The output file is removed before each run, outside the clock. Prints one JSON object: ``wall_s`` and
``cpu_s`` (user + system, this process and its children) per run; ``peak_rss_kib``: the largest
resident set of the process that did the work (the engine's child for ``engine``, this process
otherwise, its imports included; for ``warm``, whose child is reaped only at the end, this
process's); for the in-process contenders ``job_memory_kib``: how far one more run raised this
process's resident set above where it stood (Linux; None elsewhere); ``step_cpu_s`` (``steps``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path


#: Short jobs run again until this much time is measured (at most MAX_RUNS runs): a median of
#: millisecond runs on a shared machine needs more samples than three.
MIN_MEASURED_S = 1.0
MAX_RUNS = 50
PROC_STATUS = Path("/proc/self/status")
PROC_CLEAR_REFS = Path("/proc/self/clear_refs")


def _cpu_s() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


#: Each run's CPU seconds by step (``steps``), filled by the timed call.
STEP_CPU_S: list[dict[str, float]] = []


def _job(what: str, source: Path, output: Path, argument: str | None) -> tuple[Callable[[], object], int]:
    """The timed call, and which rusage holds its peak RSS."""
    if what in ("engine", "warm"):
        from imposition.engine import PikepdfEngine, isolation, parse_layout
        from imposition.common.settings import get_settings

        settings = get_settings()
        if what == "warm":
            isolation.keep_warm(isolation.WarmPolicy(max_jobs=settings.engine_child_max_jobs,
                                                     max_rss_bytes=settings.engine_child_max_rss_bytes))
        engine, spec = PikepdfEngine(settings), parse_layout(argument or "")
        return (lambda: engine.impose(source, spec, output)), resource.RUSAGE_CHILDREN
    if what in ("work", "steps"):
        import imposition.engine.drawing  # noqa: F401 (imported before the clock, as the child imports it before work)
        from imposition.engine.child import run

        from imposition.engine.job import ContentBudget
        from imposition.engine.spec import parse_layout
        from imposition.common.settings import get_settings

        # the bench limits no page or cell count; the content budget's check is part of every job's work
        request = {"mode": "impose", "input": str(source), "output": str(output), "layout": parse_layout(argument or "").resolved().to_json(),
                   "slug": None, "max_pages": sys.maxsize, "result": None,
                   "content_budget": ContentBudget.of(get_settings()).to_json()}
        if what == "steps":
            def timed() -> object:
                STEP_CPU_S.append({})
                return run(request, STEP_CPU_S[-1])

            return timed, resource.RUSAGE_SELF
        return (lambda: run(request)), resource.RUSAGE_SELF
    from bench.copy_floor import copy_pages, rewrite

    floor = {"copy": copy_pages, "rewrite": rewrite}[what]
    return (lambda: floor(source, output)), resource.RUSAGE_SELF


def _status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (``VmRSS``, ``VmHWM``), KiB."""
    for line in PROC_STATUS.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(f"{field} not in {PROC_STATUS}")


def _job_memory_kib(job: Callable[[], object]) -> int:
    """Run ``job`` once; how far this process's resident set rose above where it stood before.

    The kernel's high-water mark is reset first (``5`` to /proc/self/clear_refs, proc(5), Linux ≥ 4.0),
    so imports and earlier runs do not hide the job's own peak.
    """
    PROC_CLEAR_REFS.write_text("5")
    before_kib = _status_kib("VmRSS")
    job()
    return _status_kib("VmHWM") - before_kib


def _child_cpu_s(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` so far, from /proc/<pid>/stat (proc(5))."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str]) -> int:
    what, source, output, runs = argv[0], Path(argv[1]), Path(argv[2]), int(argv[3])
    job, peak_of = _job(what, source, output, argv[4] if len(argv) > 4 else None)
    output.unlink(missing_ok=True)  # a first, untimed run: the job's memory (before any run reused the heap)
    job_memory_kib = None
    if peak_of == resource.RUSAGE_SELF and PROC_CLEAR_REFS.exists():
        job_memory_kib = _job_memory_kib(job)
    else:
        job()
    walls: list[float] = []
    cpus: list[float] = []
    STEP_CPU_S.clear()  # the untimed first run's
    # A warm child's CPU time reaches this process's rusage only once it is reaped: its share is read
    # from the child's own clock (/proc, in 10 ms ticks), over all runs, and spread evenly over them.
    from imposition.engine import isolation

    warm = isolation.warm_child() if what == "warm" else None
    child_started_s = _child_cpu_s(warm[0]) if warm else 0.0
    while len(walls) < runs or (sum(walls) < MIN_MEASURED_S and len(walls) < MAX_RUNS):
        output.unlink(missing_ok=True)
        started_s, started_cpu_s = time.perf_counter(), _cpu_s()
        job()
        walls.append(time.perf_counter() - started_s)
        cpus.append(_cpu_s() - started_cpu_s)
    if warm:
        served = isolation.warm_child()
        if served is None or served[0] != warm[0]:
            raise SystemExit("the warm child was replaced during the runs: its CPU time is not all counted")
        child_share_s = (_child_cpu_s(warm[0]) - child_started_s) / len(walls)
        cpus = [cpu + child_share_s for cpu in cpus]
        isolation.stop_warm()
        peak_of = resource.RUSAGE_SELF
    print(json.dumps({"wall_s": walls, "cpu_s": cpus, "peak_rss_kib": resource.getrusage(peak_of).ru_maxrss,
                      "job_memory_kib": job_memory_kib, "step_cpu_s": STEP_CPU_S or None}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
