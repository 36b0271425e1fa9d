"""A stand-in for callas pdfToolbox's command line, for tests of PdfToolboxEngine.

    fake_pdftoolbox.py <process plan> <input.pdf> --outputfile=<out> [--setvariable=<key>:<value> ...]

Behaves like the real tool where the engine can tell: checks its arguments (101 wrong parameters,
102 syntax), opens the input (104 cannot open, 105 encrypted, 107 damaged), writes the output
(106 cannot save) as ``columns × rows`` pages per sheet of ``sheet_width_pt × sheet_height_pt``
(from the variables, 2 × 1 by default) and exits 0. Test controls, as variables:

* ``standin_exit:<code>`` exit at once with that code (100 licence, 130/134 aborted, ...);
* ``standin_signal:<number>`` kill itself with that signal (a crash);
* ``standin_sleep_s:<s>`` sleep first (a slow job);
* ``standin_grandchild_pid_file:<path>`` start a grandchild (``sleep 600``) and write its pid there,
  so a test can check the whole process group dies.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pikepdf


def parse(argv: list[str]) -> tuple[Path, Path, Path, dict[str, str]]:
    positional = [a for a in argv if not a.startswith("--")]
    options = [a for a in argv if a.startswith("--")]
    if len(positional) != 2:
        print(f"expected <process plan> <input>, got {positional}", file=sys.stderr)
        sys.exit(101)
    output, variables = None, {}
    for option in options:
        if option.startswith("--outputfile="):
            output = Path(option.split("=", 1)[1])
        elif option.startswith("--setvariable=") and ":" in option:
            key, value = option.split("=", 1)[1].split(":", 1)
            variables[key] = value
        else:
            print(f"syntax error: {option}", file=sys.stderr)
            sys.exit(102)
    plan = Path(positional[0])
    if output is None or not plan.is_file():
        print("missing --outputfile or process plan", file=sys.stderr)
        sys.exit(101)
    return plan, Path(positional[1]), output, variables


def main(argv: list[str]) -> int:
    _, source_path, output, variables = parse(argv)
    if "standin_exit" in variables:
        return int(variables["standin_exit"])
    if "standin_signal" in variables:
        os.kill(os.getpid(), int(variables["standin_signal"]))
    if "standin_grandchild_pid_file" in variables:
        grandchild = subprocess.Popen(["sleep", "600"])
        Path(variables["standin_grandchild_pid_file"]).write_text(str(grandchild.pid))
    time.sleep(float(variables.get("standin_sleep_s", 0)))
    try:
        source = pikepdf.open(source_path)
    except pikepdf.PasswordError:
        return 105
    except pikepdf.PdfError:
        return 107 if source_path.read_bytes().startswith(b"%PDF") else 104
    width, height = float(variables["sheet_width_pt"]), float(variables["sheet_height_pt"])
    if variables.get("orientation") == "landscape":
        width, height = max(width, height), min(width, height)
    columns, rows = int(variables.get("columns", 2)), int(variables.get("rows", 1))
    cell_w, cell_h = width / columns, height / rows
    with pikepdf.new() as plates:
        for start in range(0, len(source.pages), columns * rows):
            sheet = plates.add_blank_page(page_size=(width, height))
            for index, page in enumerate(source.pages[start : start + columns * rows]):
                row, column = divmod(index, columns)
                cell = pikepdf.Rectangle(column * cell_w, height - (row + 1) * cell_h,
                                         (column + 1) * cell_w, height - row * cell_h)
                sheet.add_overlay(page, cell)
        try:
            plates.save(output)
        except OSError as exc:
            print(f"cannot save: {exc}", file=sys.stderr)
            return 106
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
