"""A stand-in for callas pdfToolbox's command line, for tests of PdfToolboxEngine.

    fake_pdftoolbox.py [--licenseserver=<host[:port]> ... --timeout_licenseserver=<s>]
        <process plan> <input.pdf> --outputfile=<out> [--setvariable=<key>:<value> ...]

Behaves like the real tool where the engine can tell, with callas' exit-code table: checks its
arguments (101 parameter error, 102 syntax error: an unknown option), gets a licence (with
``--licenseserver``: a TCP connection to one of the servers, port 1400 by default, tried again until
``--timeout_licenseserver`` seconds, 60 by default, have passed; none: 100 "not serialized"; without
the option, the local licence is always there), opens the input (104 cannot open, 105 encrypted,
107 damaged), writes the output (106 cannot save) as ``columns × rows`` pages per sheet of
``sheet_width_pt × sheet_height_pt`` (from the variables, 2 × 1 by default) and exits 0. An
allocation that fails (its RLIMIT_AS) is 134, "abnormal termination (out of memory)". Test controls,
as variables:

* ``standin_exit:<code>`` exit at once with that code (100 licence, 130/134 aborted, ...);
* ``standin_exit_after_output:<code>`` write the output, then exit with that code (3: hits of error
  severity; 8: a fixup failed);
* ``standin_allocate_bytes:<n>`` allocate n bytes first (past RLIMIT_AS: exit 134);
* ``standin_report_limits:<path>`` write this process's RLIMIT_AS and RLIMIT_CPU soft limits there
  (``{"as": n, "cpu": n}``, -1 for unlimited);
* ``standin_signal:<number>`` kill itself with that signal (a crash);
* ``standin_sleep_s:<s>`` sleep first (a slow job);
* ``standin_grandchild_pid_file:<path>`` start a grandchild (``sleep 600``) and write its pid there,
  so a test can check the whole process group dies;
* ``standin_run_log:<path>`` append one JSON line per run there, ``{"start": t, "end": t, "exit":
  code}`` (Unix times), so a test can count the runs that got a licence (every exit but 100).
"""

import json
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

#: callas License Server's default port, and pdfToolbox's default wait for a licence (s).
LICENCE_PORT = 1400
LICENCE_WAIT_S = 60.0


def parse(argv: list[str]) -> tuple[Path, Path, Path, dict[str, str], list[str], float]:
    positional = [a for a in argv if not a.startswith("--")]
    options = [a for a in argv if a.startswith("--")]
    if len(positional) != 2:
        print(f"expected <process plan> <input>, got {positional}", file=sys.stderr)
        sys.exit(101)
    output, variables, servers, wait_s = None, {}, [], LICENCE_WAIT_S
    for option in options:
        if option.startswith("--outputfile="):
            output = Path(option.split("=", 1)[1])
        elif option.startswith("--setvariable=") and ":" in option:
            key, value = option.split("=", 1)[1].split(":", 1)
            variables[key] = value
        elif option.startswith("--licenseserver="):
            servers.append(option.split("=", 1)[1])
        elif option.startswith("--timeout_licenseserver="):
            wait_s = float(option.split("=", 1)[1])
        else:
            print(f"syntax error: {option}", file=sys.stderr)
            sys.exit(102)
    plan = Path(positional[0])
    if output is None or not plan.is_file():
        print("missing --outputfile or process plan", file=sys.stderr)
        sys.exit(101)
    return plan, Path(positional[1]), output, variables, servers, wait_s


def licensed(servers: list[str], wait_s: float) -> bool:
    """True once one of ``servers`` accepts a connection, tried until ``wait_s`` has passed (< 0: forever)."""
    give_up = time.monotonic() + wait_s
    while True:
        for server in servers:
            host, _, port = server.partition(":")
            try:
                with socket.create_connection((host, int(port or LICENCE_PORT)), timeout=1):
                    return True
            except OSError:
                pass
        if 0 <= wait_s and time.monotonic() >= give_up:
            return False
        time.sleep(0.1)


def main(argv: list[str]) -> int:
    _, source_path, output, variables, servers, wait_s = parse(argv)
    if "standin_report_limits" in variables:
        Path(variables["standin_report_limits"]).write_text(json.dumps(
            {"as": resource.getrlimit(resource.RLIMIT_AS)[0], "cpu": resource.getrlimit(resource.RLIMIT_CPU)[0]}))
    if servers and not licensed(servers, wait_s):
        print(f"no licence from {', '.join(servers)} within {wait_s:g} s", file=sys.stderr)
        return 100
    if "standin_exit" in variables:
        return int(variables["standin_exit"])
    if "standin_allocate_bytes" in variables:
        try:
            held = bytearray(int(variables["standin_allocate_bytes"]))
        except MemoryError:
            print("out of memory", file=sys.stderr)
            return 134
        del held
    if "standin_signal" in variables:
        os.kill(os.getpid(), int(variables["standin_signal"]))
    if "standin_grandchild_pid_file" in variables:
        grandchild = subprocess.Popen(["sleep", "600"])
        Path(variables["standin_grandchild_pid_file"]).write_text(str(grandchild.pid))
    time.sleep(float(variables.get("standin_sleep_s", 0)))
    import pikepdf  # here: a run refused its licence ends without it, and a run's start is logged before it

    try:
        source = pikepdf.open(source_path)
    except OSError:
        return 104
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
    return int(variables.get("standin_exit_after_output", 0))


def logged_main(argv: list[str]) -> int:
    """:func:`main`, with its run appended to ``standin_run_log`` when that variable is given."""
    start = time.time()
    code = main(argv)
    log = parse(argv)[3].get("standin_run_log")
    if log:
        with open(log, "a", encoding="utf-8") as runs:
            runs.write(json.dumps({"start": start, "end": time.time(), "exit": code}) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(logged_main(sys.argv[1:]))
