"""Run one command and report its wall time, CPU time and the peak RSS of its process tree, as JSON.

    python -m bench.meter -- <command> ...

CPU time and peak RSS come from ``getrusage(RUSAGE_CHILDREN)`` of this fresh process: user + system
time of every descendant it (or they) waited for, and the largest resident set of any one of them,
in KiB on Linux (getrusage(2)). Several processes of one command (our CLI and its engine child) are
not summed: the peak is that of the largest.
"""

import json
import resource
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1 :]
    started = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall_s = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"wall_s": wall_s, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_kib": usage.ru_maxrss,
                      "returncode": completed.returncode,
                      "stderr": completed.stderr.decode(errors="replace")[-500:]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
