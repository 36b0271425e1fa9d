"""Trampoline: set resource limits on this process, then become the given command.

Run as a file (``python -I -S _limits.py --address-space-bytes N --cpu-seconds N -- cmd ...``), never
imported: it uses the standard library only, so it starts fast and needs no package import. The
limits survive ``exec`` and bind the engine and everything it starts:

* ``RLIMIT_AS``: the address space budget; an allocation beyond it fails (MemoryError, bad_alloc).
* ``RLIMIT_CPU``: a backstop against an orphaned engine (its parent killed before it could kill it):
  SIGXCPU at the soft limit, SIGKILL five seconds later.

With ``--module NAME --sys-path PATHS``, the trampoline does not ``exec`` a new interpreter: once the
limits are set it puts ``PATHS`` (``os.pathsep``-separated, the parent's ``sys.path``) in front of its
own path and runs the Python module ``NAME`` as ``__main__`` in this same process, the arguments after
``--`` as its ``sys.argv[1:]``. The module runs under the same limits and starts one interpreter
sooner, without ``site`` (no ``.pth`` hooks, no user site directory).

Exit code 127 (the shell's "command not found") when the command cannot be executed.
"""

import os
import resource
import runpy
import sys


def main(argv: list[str]) -> None:
    separator = argv.index("--")
    options = dict(zip(argv[0:separator:2], argv[1:separator:2]))
    command = argv[separator + 1 :]
    address_space_bytes = int(options["--address-space-bytes"])
    cpu_seconds = int(options["--cpu-seconds"])
    if address_space_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
    if cpu_seconds > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    if "--module" in options:
        sys.path[:0] = [path for path in options.get("--sys-path", "").split(os.pathsep) if path]
        sys.argv = [options["--module"], *command]
        runpy.run_module(options["--module"], run_name="__main__", alter_sys=True)
        return
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"cannot execute {command[0]!r}: {exc}\n")
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
