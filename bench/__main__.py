"""``make bench``: the engine against pdfimpose and the copy floor, from one run on this machine.

Inputs: 8, 64, 512 and 4,096-page A5 documents, each page with text and its own image
(:mod:`bench.documents`). Layouts: saddle stitch on A4 and 2 × 2 n-up on A3 (pdfimpose has no plain
n-up; its closest is ``wire --signature 2x2``: four pages per side, cut and stacked). Contenders take
turns run by run (in-process ones :data:`IN_PROCESS_ROUNDS` times, their runs pooled); every time is a
median of at least three runs with its CPU time (user + system) beside it:

1. **External commands** (:mod:`bench.meter`): ``python -m imposition.engine.cli`` (the CLI, its child
   started first), the same with ``--no-prestart`` (before: the child after the CLI's start-up),
   ``pdfimpose``, and ``python -m bench.copy_floor`` (open, append every page, save).
2. **Inside a long-lived process** (:mod:`bench.inprocess`): the engine API with a child per job
   (before) and with the worker's warm child (now), the work alone, the copy and rewrite floors.

Then memory against pages (3), each goal of the engine issue row by row (4), where the work's CPU
time goes step by step, each check apart (5), and issue 40's goals (6): end to end, the time per
plate against the baseline's in the same run (within 10 %), and the work at 64 pages within 2.5× the
copy floor (what each check costs is table 5). Every ratio is printed beside
the old one: with ``BENCH_BASELINE=<git ref>`` that ref's ``imposition`` and ``service``, exported
to ``out/bench/baseline`` and driven by this harness, are measured in the same run; else the old one
is the last recorded run's (:func:`recorded_goals`). Our packages are byte-compiled first, as pip
compiles an installed pdfimpose (``PYTHONDONTWRITEBYTECODE`` would make each start compile ours).
Results go to ``out/bench/results.md`` and ``results.json``; with ``BENCH_UPDATE_DOC=1`` a full run
also refreshes the tables in ``bench/RESULTS.md`` (between its ``bench:tables`` markers).
``BENCH_QUICK=1`` runs only 8 and 64 pages.
"""

from __future__ import annotations

import compileall
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.documents import labelled_document

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "out" / "bench"
RESULTS_DOC = ROOT / "bench" / "RESULTS.md"
MARK_BEGIN, MARK_END = "<!-- bench:tables -->", "<!-- /bench:tables -->"
QUICK = bool(os.environ.get("BENCH_QUICK"))
#: A git ref whose engine is measured beside ours in the same run (``BENCH_BASELINE``), or None.
BASELINE_REF = os.environ.get("BENCH_BASELINE") or None
BASELINE = WORK / "baseline"
#: What of the baseline ref is exported, where the ref has it: the engine and the settings it reads
#: (the harness is ours).
BASELINE_PACKAGES = ("imposition", "service")
#: Packages of ours byte-compiled before measuring.
OUR_PACKAGES = ("imposition", "tasks", "leases", "devstack", "bench")
#: Each in-process contender runs this many times, the contenders taking turns; runs are pooled.
IN_PROCESS_ROUNDS = 3
PAGE_COUNTS = (8, 64) if QUICK else (8, 64, 512, 4096)
LAYOUTS = {
    "saddle stitch": ({"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"},
                      ["saddle", "--signature", "2x1"]),
    "2 × 2 n-up": ({"layout": "n_up", "sheet": "A3", "orientation": "portrait", "columns": 2, "rows": 2},
                   ["wire", "--signature", "2x2"]),
}
#: The engine issue's goals.
SPEED_OVER_PDFIMPOSE_GOAL = 5.0
TIME_OVER_COPY_GOAL = 1.5
#: Issue 13's goals for small jobs: end to end against pdfimpose at 8 pages; in-process against the
#: copy floor from 64 pages up.
SMALL_JOB_SPEED_GOAL = 3.0
SMALL_JOB_PAGES = 8
IN_PROCESS_FROM_PAGES = 64
#: Issue 40's goals: end to end, the time per plate at most this multiple of the baseline's (same run);
#: in-process, the work at WORK_GOAL_PAGES pages at most WORK_OVER_COPY_GOAL × the copy floor.
PER_PLATE_OVER_BASELINE_GOAL = 1.10
WORK_OVER_COPY_GOAL = 2.5
WORK_GOAL_PAGES = 64
#: Settings every contender runs with (the environment of their processes): the saddle stitches of
#: 512 and 4,096 pages are far past what a stitcher binds (issue 40's binding limits refuse them);
#: the bench measures the engine's cost, so it lifts the limits (a baseline ignores the names).
BENCH_ENVIRONMENT = {"IMPOSITION_SADDLE_STITCH_MAX_SHEETS": "10000", "IMPOSITION_SADDLE_STITCH_MAX_THICKNESS_MM": "10000"}
#: The steps of the work that are checks of the input (``imposition.engine.child.run``'s laps).
CHECK_STEPS = ("read the page tree", "content budget", "damage check", "page boxes")
#: Memory grows linearly when the MiB per 1,000 pages between the two largest inputs is at most this
#: multiple of the same slope between the two before (a super-linear grower's slope keeps rising).
LINEAR_SLOPE_RATIO = 1.5


def repeats(page_count: int) -> int:
    """Runs per measurement: at least three, more where a run is short (a shared machine is noisy)."""
    return 7 if page_count <= 64 else 5


@dataclass(frozen=True)
class Measure:
    """Median wall and CPU time (s) and the largest peak RSS (MiB) of a contender's runs; for an
    in-process contender also its job memory (MiB the process's resident set rose during one run);
    for ``steps`` the median CPU seconds of each step; for a command the sides of its plate."""

    wall_s: float
    cpu_s: float
    peak_mib: float
    job_mib: float | None = None
    steps: dict[str, float] | None = None
    sides: int | None = None

    @classmethod
    def of(cls, walls: list[float], cpus: list[float], peaks_kib: list[int], job_kib: int | None = None,
           steps: list[dict[str, float]] | None = None, sides: int | None = None) -> "Measure":
        medians = ({name: statistics.median(run.get(name, 0.0) for run in steps) for name in steps[0]}
                   if steps else None)
        return cls(statistics.median(walls), statistics.median(cpus), max(peaks_kib) / 1024,
                   None if job_kib is None else job_kib / 1024, medians, sides)


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


def export_baseline(ref: str) -> Path:
    """Export ``ref``'s :data:`BASELINE_PACKAGES` to :data:`BASELINE` (replacing what was there), with
    this harness's own ``bench`` package beside them, byte-compiled; returns the folder. Commands run
    there (their working directory first on ``sys.path``) import that engine."""
    shutil.rmtree(BASELINE, ignore_errors=True)
    BASELINE.mkdir(parents=True)
    present = set(subprocess.run(["git", "ls-tree", "--name-only", ref], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    packages = [p for p in BASELINE_PACKAGES if p in present]  # ``service`` went into ``imposition`` later
    archive = subprocess.run(["git", "archive", "--format=tar", ref, *packages], cwd=ROOT,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(BASELINE, filter="data")
    shutil.copytree(ROOT / "bench", BASELINE / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    _compile(BASELINE, ("bench", *packages))
    return BASELINE


def _compile(root: Path, packages: Iterable[str]) -> None:
    for package in packages:
        compileall.compile_dir(root / package, quiet=1)


def external(commands: dict[str, tuple[list[str], Path, Path]], runs: int) -> dict[str, Measure]:
    """Each command (``(argv, output, working directory)``) ``runs`` times, the commands taking turns,
    under :mod:`bench.meter`."""
    samples: dict[str, list[dict]] = {name: [] for name in commands}
    sides: dict[str, int] = {}
    for _ in range(runs):
        for name, (command, output, cwd) in commands.items():
            output.unlink(missing_ok=True)
            meter = subprocess.run(_python("-m", "bench.meter", "--", *command), cwd=cwd,
                                   capture_output=True, text=True, check=True)
            result = json.loads(meter.stdout)
            if result["returncode"] != 0:
                raise SystemExit(f"{name}: {command[:4]} failed: {result['stderr']}")
            samples[name].append(result)
            if name not in sides:  # the plate's sides, outside the clock
                sides[name] = _sides(output)
    return {name: Measure.of([s["wall_s"] for s in runs_], [s["cpu_s"] for s in runs_],
                             [s["peak_rss_kib"] for s in runs_], sides=sides.get(name))
            for name, runs_ in samples.items()}


def _sides(plate: Path) -> int:
    """Pages of the PDF ``plate``."""
    import pikepdf

    with pikepdf.open(plate) as pdf:
        return len(pdf.pages)


def in_process(contenders: dict[str, tuple[str, Path, str | None, Path]], source: Path, runs: int) -> dict[str, Measure]:
    """Each contender (``(what, output, argument, working directory)``) inside a process of its own
    (:mod:`bench.inprocess`, at least ``runs`` runs), :data:`IN_PROCESS_ROUNDS` times, the contenders
    taking turns; the runs of its rounds pooled, its job memory that of the first round."""
    results: dict[str, list[dict]] = {name: [] for name in contenders}
    for _ in range(IN_PROCESS_ROUNDS):
        for name, (what, output, argument, cwd) in contenders.items():
            command = _python("-m", "bench.inprocess", what, str(source), str(output), str(runs),
                              *([argument] if argument else []))
            results[name].append(json.loads(subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                                                           check=True).stdout))
    return {name: Measure.of([wall for r in rounds for wall in r["wall_s"]], [cpu for r in rounds for cpu in r["cpu_s"]],
                             [r["peak_rss_kib"] for r in rounds], rounds[0]["job_memory_kib"],
                             [step for r in rounds for step in r.get("step_cpu_s") or ()])
            for name, rounds in results.items()}


def measure_page_count(page_count: int, pdfimpose: str, baseline: Path | None) -> dict:
    """Every measurement of one input size (``baseline``: the exported baseline, or None)."""

    source = WORK / f"input_{page_count}.pdf"
    if not source.exists():
        labelled_document(source, page_count)
    runs = repeats(page_count)
    commands: dict[str, tuple[list[str], Path, Path]] = {
        "copy": (_python("-m", "bench.copy_floor", str(source), str(WORK / "copy.pdf")), WORK / "copy.pdf", ROOT),
    }
    for name, (layout, pdfimpose_args) in LAYOUTS.items():
        ours_out, theirs_out = WORK / f"ours {name}.pdf", WORK / f"pdfimpose {name}.pdf"
        ours = _python("-m", "imposition.engine.cli", str(source), "--layout", json.dumps(layout), "-o", str(ours_out))
        commands[f"ours {name}"] = (ours, ours_out, ROOT)
        commands[f"ours before {name}"] = ([*ours, "--no-prestart"], ours_out, ROOT)
        if baseline is not None:
            commands[f"ours baseline {name}"] = (ours, ours_out, baseline)
        commands[f"pdfimpose {name}"] = ([pdfimpose, *pdfimpose_args, str(source), "--output", str(theirs_out)],
                                         theirs_out, ROOT)
    contenders: dict[str, tuple[str, Path, str | None, Path]] = {}
    for name, (layout, _) in LAYOUTS.items():
        output = WORK / f"inprocess {name}.pdf"
        contenders[f"engine {name}"] = ("engine", output, json.dumps(layout), ROOT)
        contenders[f"warm {name}"] = ("warm", output, json.dumps(layout), ROOT)
        contenders[f"work {name}"] = ("work", output, json.dumps(layout), ROOT)
        contenders[f"steps {name}"] = ("steps", output, json.dumps(layout), ROOT)
        if baseline is not None:
            contenders[f"work baseline {name}"] = ("work", output, json.dumps(layout), baseline)
    contenders["copy"] = ("copy", WORK / "inprocess copy.pdf", None, ROOT)
    contenders["rewrite"] = ("rewrite", WORK / "inprocess rewrite.pdf", None, ROOT)
    return {"external": external(commands, runs), "in_process": in_process(contenders, source, runs)}


def _ratio(value: float) -> str:
    return f"{value:.1f}×" if value >= 10 else f"{value:.2f}×"


def _ratios(numerator: Measure, denominator: Measure) -> tuple[float, float]:
    """``numerator ÷ denominator`` in wall time and in CPU time."""
    return numerator.wall_s / denominator.wall_s, numerator.cpu_s / denominator.cpu_s


def _both(ratios: tuple[float, float]) -> str:
    return f"{_ratio(ratios[0])} / {_ratio(ratios[1])}"


def _tick(met: bool) -> str:
    return "yes" if met else "**no**"


def _goal(ratios: tuple[float, float], met: Callable[[float], bool]) -> str:
    """Met in wall time (the issue's measure); "CPU only" when only the CPU-time ratio meets it (the
    wall clock then lost to other load on the machine)."""
    return "yes" if met(ratios[0]) else "CPU only" if met(ratios[1]) else "**no**"


def _table(columns: list[str], rows: Iterable[list[str]], *, text_columns: int = 1) -> str:
    """A Markdown table: the first ``text_columns`` columns left-aligned, the numbers right-aligned."""
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "---|" * text_columns + "---:|" * (len(columns) - text_columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _jobs(results: dict[int, dict]) -> Iterator[tuple[str, int, dict, dict]]:
    """(layout, pages, external measures, in-process measures) for each row of the time tables."""
    for pages, measured in results.items():
        for name in LAYOUTS:
            yield name, pages, measured["external"], measured["in_process"]


def external_table(results: dict[int, dict]) -> str:
    columns = ["layout", "pages", "ours before s", "ours s", "ours CPU s", "ours pages/s", "ours peak MiB", "pdfimpose s",
               "pdfimpose CPU s", "pdfimpose pages/s", "pdfimpose peak MiB", "copy floor s", "copy CPU s",
               "copy peak MiB", "ours ÷ pdfimpose speed, before → now (wall / CPU)",
               "ours ÷ copy time, before → now (wall / CPU)"]
    rows = []
    for name, pages, m, _ in _jobs(results):
        ours, theirs, floor = m[f"ours {name}"], m[f"pdfimpose {name}"], m["copy"]
        before = m[f"ours before {name}"]
        rows.append([name, str(pages), f"{before.wall_s:.3f}", f"{ours.wall_s:.3f}", f"{ours.cpu_s:.3f}",
                     f"{pages / ours.wall_s:.0f}",
                     f"{ours.peak_mib:.0f}", f"{theirs.wall_s:.3f}", f"{theirs.cpu_s:.3f}",
                     f"{pages / theirs.wall_s:.0f}", f"{theirs.peak_mib:.0f}", f"{floor.wall_s:.3f}",
                     f"{floor.cpu_s:.3f}", f"{floor.peak_mib:.0f}",
                     f"{_both(_ratios(theirs, before))} → {_both(_ratios(theirs, ours))}",
                     f"{_both(_ratios(before, floor))} → {_both(_ratios(ours, floor))}"])
    return _table(columns, rows)


def in_process_table(results: dict[int, dict]) -> str:
    columns = ["layout", "pages", "engine API, child per job s", "CPU s", "engine API, warm child s", "CPU s",
               "work s", "work CPU s", "work pages/s", "copy s", "copy CPU s", "rewrite s", "rewrite CPU s",
               "child start CPU s", "CLI start CPU s", "engine API ÷ copy, child per job → warm child (wall / CPU)",
               "work ÷ copy (wall / CPU)", "work ÷ rewrite (wall / CPU)"]
    rows = []
    for name, pages, cli, m in _jobs(results):
        engine, warm, work, copy, rewrite = (m[f"engine {name}"], m[f"warm {name}"], m[f"work {name}"], m["copy"],
                                             m["rewrite"])
        rows.append([name, str(pages), f"{engine.wall_s:.3f}", f"{engine.cpu_s:.3f}", f"{warm.wall_s:.3f}",
                     f"{warm.cpu_s:.3f}", f"{work.wall_s:.3f}", f"{work.cpu_s:.3f}", f"{pages / work.wall_s:.0f}",
                     f"{copy.wall_s:.3f}", f"{copy.cpu_s:.3f}", f"{rewrite.wall_s:.3f}", f"{rewrite.cpu_s:.3f}",
                     f"{engine.cpu_s - work.cpu_s:.3f}", f"{cli[f'ours before {name}'].cpu_s - engine.cpu_s:.3f}",
                     f"{_both(_ratios(engine, copy))} → {_both(_ratios(warm, copy))}",
                     _both(_ratios(work, copy)), _both(_ratios(work, rewrite))])
    return _table(columns, rows)


def _memory_rows(results: dict[int, dict]) -> list[tuple[str, str, list[float]]]:
    """(contender, what is measured, MiB at each input size)."""
    def series(kind: str, name: str, field: str) -> list[float]:
        return [getattr(results[pages][kind][name], field) for pages in results]

    rows = [(f"ours {name} (work)", "job memory", series("in_process", f"work {name}", "job_mib")) for name in LAYOUTS]
    rows += [("copy floor", "job memory", series("in_process", "copy", "job_mib")),
             ("rewrite floor", "job memory", series("in_process", "rewrite", "job_mib"))]
    rows += [(f"ours {name} (engine child)", "peak RSS", series("in_process", f"engine {name}", "peak_mib"))
             for name in LAYOUTS]
    rows += [(f"ours {name} (CLI and child)", "peak RSS", series("external", f"ours {name}", "peak_mib"))
             for name in LAYOUTS]
    rows += [(f"pdfimpose {name}", "peak RSS", series("external", f"pdfimpose {name}", "peak_mib")) for name in LAYOUTS]
    rows.append(("copy floor command", "peak RSS", series("external", "copy", "peak_mib")))
    return rows


def _slopes(pages: list[int], values: list[float]) -> list[float]:
    """MiB per 1,000 pages between consecutive inputs."""
    return [1000 * (values[i + 1] - values[i]) / (pages[i + 1] - pages[i]) for i in range(len(pages) - 1)]


def _linear(pages: list[int], values: list[float]) -> bool:
    """The last slope no steeper than :data:`LINEAR_SLOPE_RATIO` times the one before (a grower
    faster than linear steepens from one span to the next)."""
    if len(pages) < 3:
        return True
    before, last = _slopes(pages, values)[-2:]
    return last <= LINEAR_SLOPE_RATIO * max(before, 1.0)


def memory_table(results: dict[int, dict]) -> str:
    pages = list(results)
    columns = ["contender", "measured", *(f"{p} pages MiB" for p in pages),
               *(f"MiB/1,000 pages {a}→{b}" for a, b in zip(pages, pages[1:])), "linear"]
    rows = []
    for name, measured, values in _memory_rows(results):
        # A whole process's peak starts from its fixed footprint (interpreter, imports), which hides
        # the growth of small jobs: linearity is judged on job memory only.
        linear = _tick(_linear(pages, values)) if measured == "job memory" else "—"
        rows.append([name, measured, *(f"{v:.1f}" for v in values), *(f"{s:.1f}" for s in _slopes(pages, values)),
                     linear])
    return _table(columns, rows, text_columns=2)


#: The goal columns of the goals table, by the words their headers start with.
GOAL_COLUMNS = {"speed": "ours ÷ pdfimpose speed", "external": "ours ÷ copy time, external",
                "work": "work ÷ copy time, in-process"}
SMALL_GOALS_HEADER = "goal (issue 13)"


def recorded_goals(text: str) -> dict[tuple[str, int, str], str]:
    """The goal ratios of the run recorded in ``text`` (``bench/RESULTS.md``, between its markers), as
    printed (``wall / CPU``; of a cell ``old → new``, the new): ``(layout, pages, goal)`` → ratios,
    ``goal`` a key of :data:`GOAL_COLUMNS` or, for issue 13's table, the row's goal."""
    if MARK_BEGIN not in text:
        return {}
    block = text.split(MARK_BEGIN, 1)[1].split(MARK_END, 1)[0]
    found: dict[tuple[str, int, str], str] = {}
    header: list[str] | None = None
    for line in block.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] == "layout":
            header = cells
            continue
        if header is None or len(cells) != len(header) or not cells[1].isdigit():
            continue
        row = (cells[0], int(cells[1]))
        for goal, words in GOAL_COLUMNS.items():
            for index, name in enumerate(header):
                if name.startswith(words):
                    found[(*row, goal)] = cells[index].rsplit("→", 1)[-1].strip()
        if SMALL_GOALS_HEADER in header:
            now = next(index for index, name in enumerate(header) if name.startswith("now"))
            found[(*row, cells[header.index(SMALL_GOALS_HEADER)])] = cells[now].rsplit("→", 1)[-1].strip()
    return found


def _old_and_new(old: tuple[float, float] | str | None, new: tuple[float, float]) -> str:
    """``old → new`` (``old``: ratios measured in this run, or as recorded), ``— → new`` when none."""
    shown = _both(old) if isinstance(old, tuple) else old or "—"
    return f"{shown} → {_both(new)}"


def goals_table(results: dict[int, dict], recorded: dict[tuple[str, int, str], str]) -> str:
    """The goals, each ratio beside the old one: the baseline's in this run when measured
    (``BENCH_BASELINE``), else the last recorded run's (``recorded``, :func:`recorded_goals`)."""
    old_is = "baseline" if BASELINE_REF else "last recorded"
    columns = ["layout", "pages", f"ours ÷ pdfimpose speed, wall / CPU (≥ {SPEED_OVER_PDFIMPOSE_GOAL:g}×), {old_is} → now",
               "met", f"ours ÷ copy time, external, wall / CPU (≤ {TIME_OVER_COPY_GOAL:g}×), {old_is} → now", "met",
               f"work ÷ copy time, in-process, wall / CPU (≤ {TIME_OVER_COPY_GOAL:g}×), {old_is} → now", "met"]
    rows = []
    for name, pages, m, inside in _jobs(results):
        speed = _ratios(m[f"pdfimpose {name}"], m[f"ours {name}"])
        over_copy = _ratios(m[f"ours {name}"], m["copy"])
        work_over_copy = _ratios(inside[f"work {name}"], inside["copy"])
        if BASELINE_REF:
            old: dict[str, tuple[float, float] | str | None] = {
                "speed": _ratios(m[f"pdfimpose {name}"], m[f"ours baseline {name}"]),
                "external": _ratios(m[f"ours baseline {name}"], m["copy"]),
                "work": _ratios(inside[f"work baseline {name}"], inside["copy"])}
        else:
            old = {goal: recorded.get((name, pages, goal)) for goal in GOAL_COLUMNS}
        rows.append([name, str(pages), _old_and_new(old["speed"], speed),
                     _goal(speed, lambda r: r >= SPEED_OVER_PDFIMPOSE_GOAL),
                     _old_and_new(old["external"], over_copy), _goal(over_copy, lambda r: r <= TIME_OVER_COPY_GOAL),
                     _old_and_new(old["work"], work_over_copy),
                     _goal(work_over_copy, lambda r: r <= TIME_OVER_COPY_GOAL)])
    small = []
    for name, pages, m, inside in _jobs(results):
        if pages == SMALL_JOB_PAGES:
            goal = f"ours ÷ pdfimpose speed, end to end (≥ {SMALL_JOB_SPEED_GOAL:g}×)"
            now = _ratios(m[f"pdfimpose {name}"], m[f"ours {name}"])
            old_now = (_ratios(m[f"pdfimpose {name}"], m[f"ours baseline {name}"]) if BASELINE_REF
                       else recorded.get((name, pages, goal)))
            small.append([name, str(pages), goal, _both(_ratios(m[f"pdfimpose {name}"], m[f"ours before {name}"])),
                          _old_and_new(old_now, now), _goal(now, lambda r: r >= SMALL_JOB_SPEED_GOAL)])
        if pages >= IN_PROCESS_FROM_PAGES:
            goal = f"engine API ÷ copy, in-process (≤ {TIME_OVER_COPY_GOAL:g}×)"
            now = _ratios(inside[f"warm {name}"], inside["copy"])
            small.append([name, str(pages), goal, _both(_ratios(inside[f"engine {name}"], inside["copy"])),
                          _old_and_new(None if BASELINE_REF else recorded.get((name, pages, goal)), now),
                          _goal(now, lambda r: r <= TIME_OVER_COPY_GOAL)])
            goal = f"work ÷ copy, in-process (≤ {TIME_OVER_COPY_GOAL:g}×)"
            now = _ratios(inside[f"work {name}"], inside["copy"])
            old_now = (_ratios(inside[f"work baseline {name}"], inside["copy"]) if BASELINE_REF
                       else recorded.get((name, pages, goal)))
            small.append([name, str(pages), goal, "—", _old_and_new(old_now, now),
                          _goal(now, lambda r: r <= TIME_OVER_COPY_GOAL)])
    small_table = _table(["layout", "pages", SMALL_GOALS_HEADER, "before: child per job, started after the CLI",
                          f"now: warm child, pre-started ({old_is} → now)", "met"], small, text_columns=3)
    memory = [(name, _linear(list(results), values)) for name, measured, values in _memory_rows(results)
              if name.startswith("ours") and measured == "job memory"]
    return (_table(columns, rows) + "\nSmall jobs, before and now (issue 13: no start-up paid twice):\n\n"
            + small_table + "\nMemory linear in pages: "
            + "; ".join(f"{name}: {_tick(ok)}" for name, ok in memory) + ".\n")


def steps_table(results: dict[int, dict]) -> str:
    """CPU ms of each step of the work (medians of the ``steps`` runs), the checks' sum, and the work
    with and without the checks against the copy floor (CPU)."""
    names: list[str] = []
    for _, _, _, inside in _jobs(results):
        for step in next(m for key, m in inside.items() if key.startswith("steps")).steps or {}:
            if step not in names:
                names.append(step)
    columns = ["layout", "pages", *(f"{step} CPU ms" for step in names), "checks CPU ms", "work CPU ms",
               "copy CPU ms", "work ÷ copy (CPU)", "work without the checks ÷ copy (CPU)"]
    rows = []
    for name, pages, _, inside in _jobs(results):
        steps, copy = inside[f"steps {name}"].steps or {}, inside["copy"].cpu_s
        total, checks = sum(steps.values()), sum(steps.get(step, 0.0) for step in CHECK_STEPS)
        rows.append([name, str(pages), *(f"{1000 * steps.get(step, 0.0):.2f}" for step in names),
                     f"{1000 * checks:.2f}", f"{1000 * total:.2f}", f"{1000 * copy:.2f}", _ratio(total / copy),
                     _ratio((total - checks) / copy)])
    return _table(columns, rows)


def issue_40_table(results: dict[int, dict]) -> str:
    """Issue 40's goals: the time per plate end to end against the baseline's (with ``BENCH_BASELINE``),
    and the work against the copy floor at :data:`WORK_GOAL_PAGES` pages."""
    rows = []
    for name, pages, m, inside in _jobs(results):
        if BASELINE_REF:
            ours, old = m[f"ours {name}"], m[f"ours baseline {name}"]
            per_plate = (ours.wall_s / (ours.sides or 1) / (old.wall_s / (old.sides or 1)),
                         ours.cpu_s / (ours.sides or 1) / (old.cpu_s / (old.sides or 1)))
            rows.append([name, str(pages), f"end to end, time per plate ÷ the baseline's (≤ "
                         f"{PER_PLATE_OVER_BASELINE_GOAL:.2f}×; sides {old.sides} → {ours.sides})", _both(per_plate),
                         _goal(per_plate, lambda r: r <= PER_PLATE_OVER_BASELINE_GOAL)])
        if pages == WORK_GOAL_PAGES:
            work = _ratios(inside[f"work {name}"], inside["copy"])
            rows.append([name, str(pages), f"in-process, work ÷ copy floor (≤ {WORK_OVER_COPY_GOAL:g}×)", _both(work),
                         _goal(work, lambda r: r <= WORK_OVER_COPY_GOAL)])
    return _table(["layout", "pages", "goal", "wall / CPU", "met"], rows, text_columns=3)


def render(results: dict[int, dict], conditions: str, recorded: dict[tuple[str, int, str], str]) -> str:
    return (
        f"{conditions}\n\n"
        "### 1. External commands (start-up included)\n\n" + external_table(results) +
        "\n### 2. Inside a long-lived process (start-up separated from work)\n\n" + in_process_table(results) +
        "\n### 3. Memory against pages\n\n" + memory_table(results) +
        "\n### 4. Goals of the engine issue, row by row\n\n" + goals_table(results, recorded) +
        "\n### 5. Where the work's CPU time goes (what each check costs)\n\n" + steps_table(results) +
        "\n### 6. Issue 40's goals\n\n" + issue_40_table(results)
    )


def _refresh_results_doc(tables: str) -> None:
    text = RESULTS_DOC.read_text() if RESULTS_DOC.exists() else "# Engine benchmark\n\n"
    block = f"{MARK_BEGIN}\n{tables}{MARK_END}"
    if MARK_BEGIN in text and MARK_END in text:
        head, rest = text.split(MARK_BEGIN, 1)
        text = head + block + rest.split(MARK_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS_DOC.write_text(text)


def main() -> None:
    os.environ.update(BENCH_ENVIRONMENT)
    WORK.mkdir(parents=True, exist_ok=True)
    pdfimpose = shutil.which("pdfimpose", path=str(Path(sys.executable).parent)) or "pdfimpose"
    _compile(ROOT, OUR_PACKAGES)
    baseline = export_baseline(BASELINE_REF) if BASELINE_REF else None
    baseline_commit = (subprocess.run(["git", "rev-parse", "--short", BASELINE_REF], cwd=ROOT, capture_output=True,
                                      text=True, check=True).stdout.strip() if BASELINE_REF else None)
    recorded = recorded_goals(RESULTS_DOC.read_text()) if RESULTS_DOC.exists() else {}
    load_before, started = os.getloadavg(), time.monotonic()
    results: dict[int, dict] = {}
    for page_count in PAGE_COUNTS:
        results[page_count] = measure_page_count(page_count, pdfimpose, baseline)
        m = results[page_count]["external"]
        print(f"{page_count:5} pages: " + ", ".join(f"{name} {value.wall_s:.3f} s" for name, value in m.items()),
              flush=True)
    load_after = os.getloadavg()
    busy = max(load_before[0], load_after[0]) > 0.5 * (os.cpu_count() or 1)
    conditions = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} CPUs in {time.monotonic() - started:.0f} s; "
        f"load average {load_before[0]:.2f} at the start, {load_after[0]:.2f} at the end; "
        f"medians of {repeats(8)} runs up to 64 pages, {repeats(512)} from 512 (in-process: {IN_PROCESS_ROUNDS} rounds "
        f"taking turns, each of at least as many runs and at least 1 s of them); times in seconds, wall clock unless "
        f"marked CPU (user + system). Old ratios: "
        + (f"the baseline {BASELINE_REF} ({baseline_commit}), measured in this run." if BASELINE_REF
           else "the last recorded run's (the tables this run replaced).")
        + ("\n\n**The machine was busy with other work during this run: wall times carry its queueing; the CPU "
           "columns and CPU ratios are the steadier measure.**" if busy else "")
    )
    tables = render(results, conditions, recorded)
    (WORK / "results.md").write_text(tables)
    (WORK / "results.json").write_text(json.dumps(
        {pages: {kind: {name: asdict(value) for name, value in group.items()} for kind, group in measured.items()}
         for pages, measured in results.items()}, indent=2))
    if not QUICK and os.environ.get("BENCH_UPDATE_DOC") == "1":
        _refresh_results_doc(tables)
    print()
    print(tables)


if __name__ == "__main__":
    main()
