"""Run one command and report its wall time and the peak RSS of its process tree, as JSON.

    python -m bench.meter -- <command> ...

Peak RSS is ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of this fresh process: the largest resident set
of any descendant it (or they) waited for, in KiB on Linux (getrusage(2)).
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
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"wall_s": wall_s, "peak_rss_kib": peak_kib, "returncode": completed.returncode,
                      "stderr": completed.stderr.decode(errors="replace")[-500:]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
