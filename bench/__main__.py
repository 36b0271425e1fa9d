"""``make bench``: one table from one run on this machine.

For saddle stitch and 2 × 2 n-up of 8, 64, 512 and 4,096-page A5 inputs (text and one image per
page), each contender runs as an external command under :mod:`bench.meter`:

* ``ours``: ``python -m imposition.cli impose`` (the pikepdf engine, its limited child process included);
* ``pdfimpose``: ``pdfimpose saddle --signature 2x1`` and ``pdfimpose wire --signature 2x2`` (its
  closest 2 × 2 layout: cut and stack four pages per side), for comparison only;
* ``copy floor``: open, append every page to a new PDF, save (:mod:`bench.copy_floor`).

Reported: median wall time, pages/s, peak RSS of the process tree, and ours against each other.
``BENCH_QUICK=1`` runs only 8 and 64 pages. Results: ``out/bench/results.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench.documents import labelled_document

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "out" / "bench"
PAGE_COUNTS = (8, 64) if os.environ.get("BENCH_QUICK") else (8, 64, 512, 4096)
LAYOUTS = {
    "saddle stitch": ({"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"},
                      ["saddle", "--signature", "2x1"]),
    "2 × 2 n-up": ({"layout": "n_up", "sheet": "A3", "orientation": "portrait", "columns": 2, "rows": 2},
                   ["wire", "--signature", "2x2"]),
}


def repeats(page_count: int) -> int:
    return 5 if page_count <= 64 else 3 if page_count <= 512 else 2


def measure(command: list[str], runs: int) -> dict[str, float]:
    """Median wall time (s) and the largest peak RSS (MiB) over ``runs`` runs of ``command``."""
    walls, peaks = [], []
    for _ in range(runs):
        meter = subprocess.run([sys.executable, "-m", "bench.meter", "--", *command], cwd=ROOT,
                               capture_output=True, text=True, check=True)
        result = json.loads(meter.stdout)
        if result["returncode"] != 0:
            raise SystemExit(f"{command[:4]} failed: {result['stderr']}")
        walls.append(result["wall_s"])
        peaks.append(result["peak_rss_kib"] / 1024)
    return {"wall_s": statistics.median(walls), "peak_mib": max(peaks)}


def main() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    pdfimpose = shutil.which("pdfimpose", path=str(Path(sys.executable).parent)) or "pdfimpose"
    rows = []
    for page_count in PAGE_COUNTS:
        source = WORK / f"input_{page_count}.pdf"
        if not source.exists():
            labelled_document(source, page_count)
        runs = repeats(page_count)
        floor = measure([sys.executable, "-m", "bench.copy_floor", str(source), str(WORK / "copy.pdf")], runs)
        for name, (layout, pdfimpose_args) in LAYOUTS.items():
            ours = measure([sys.executable, "-m", "imposition.cli", str(source), "--layout", json.dumps(layout),
                            "-o", str(WORK / "ours.pdf")], runs)
            theirs = measure([pdfimpose, *pdfimpose_args, str(source), "--output", str(WORK / "pdfimpose.pdf")], runs)
            rows.append((name, page_count, ours, theirs, floor))
            print(f"{name:14} {page_count:5} pages: ours {ours['wall_s']:.2f} s, pdfimpose {theirs['wall_s']:.2f} s, "
                  f"copy {floor['wall_s']:.2f} s", flush=True)
    table = render(rows)
    (WORK / "results.md").write_text(table)
    print()
    print(table)


def render(rows) -> str:
    lines = [
        "| layout | pages | ours s | ours pages/s | ours peak MiB | pdfimpose s | pdfimpose pages/s | pdfimpose peak MiB "
        "| copy floor s | copy peak MiB | ours ÷ pdfimpose speed | ours ÷ copy time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, pages, ours, theirs, floor in rows:
        lines.append(
            f"| {name} | {pages} | {ours['wall_s']:.2f} | {pages / ours['wall_s']:.0f} | {ours['peak_mib']:.0f} "
            f"| {theirs['wall_s']:.2f} | {pages / theirs['wall_s']:.0f} | {theirs['peak_mib']:.0f} "
            f"| {floor['wall_s']:.2f} | {floor['peak_mib']:.0f} "
            f"| {theirs['wall_s'] / ours['wall_s']:.1f}× | {ours['wall_s'] / floor['wall_s']:.2f}× |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
