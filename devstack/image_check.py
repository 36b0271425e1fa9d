"""``python -m devstack.image_check`` (``make image-check``): build the real image and run it on the local stack.

1. The base image: ``debian:bookworm-slim`` cannot be pulled where Docker Hub is out of reach, so
   the base is a ``debootstrap --variant=minbase bookworm`` root file system imported with
   ``podman import`` (:data:`BASE_IMAGE`), made once and kept in podman's storage; ``--base``
   names another.
2. A container is run from it (``true``): this machine can run containers, or the check says
   why not.
3. ``podman build`` of the ``Dockerfile`` (``--format docker`` keeps its HEALTHCHECK; ``--isolation
   chroot`` runs its ``RUN`` steps without an OCI runtime; the host's CA bundle is mounted for pip
   when ``PIP_CERT`` names one, as behind a TLS-intercepting proxy). The image installs the wheel
   with ``-c constraints.txt`` from the index.
4. :mod:`devstack.container_check` on the built image: the imposer runs jobs and drains on
   ``podman stop``; every other role starts and stops cleanly.
5. :mod:`devstack.units_check`: the shipped systemd units, sandboxed, under a real systemd in a
   container of the image: every role healthy, a job run, each stopped with status 0. Where
   systemd does not come up in a container, it says so and the image's result stands.

Containers get ``--ulimit`` options within this process's own hard limits (:func:`ulimit_options`).

Exit status: 0 the image passed; 1 it did not (the build or the check failed: the output says
where); 3 this machine cannot build or run containers (no podman, no debootstrap and no base
image, a container does not start), said in one line starting ``image-check: CANNOT RUN``. With
``--skip-unavailable`` that last case exits 0 (``.ci/run``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The base image this check makes with debootstrap when ``--base`` names none.
BASE_IMAGE = "localhost/imposition-base:bookworm-minbase"
#: The built image's name.
IMAGE = "localhost/imposition:check"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: Exit status when this machine cannot build or run containers.
UNAVAILABLE = 3


class Unavailable(RuntimeError):
    """This machine cannot build or run containers; the message says why."""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m devstack.image_check", description=__doc__.splitlines()[0])
    p.add_argument("--engine", default="podman")
    p.add_argument("--base", default=None, help=f"base image (default: {BASE_IMAGE}, made with debootstrap)")
    p.add_argument("--mirror", default=DEBIAN_MIRROR, help="Debian mirror for debootstrap")
    p.add_argument("--tag", default=IMAGE)
    p.add_argument("--skip-unavailable", action="store_true",
                   help="exit 0 (saying so) when this machine cannot build or run containers")
    return p.parse_args(argv)


def _say(line: str) -> None:
    print(f"image-check: {line}", flush=True)


def _run(cmd: list[str], *, what: str, unavailable: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; on failure raise :class:`Unavailable` (``unavailable``) or CalledProcessError,
    with the last lines of its output printed."""
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        if unavailable:
            raise Unavailable(f"{what}: `{' '.join(cmd[:4])} …` exited {done.returncode}: {tail}")
        print(tail, file=sys.stderr)
        raise subprocess.CalledProcessError(done.returncode, cmd)
    return done


#: Processes a container may start: plenty for one role (an imposer is 1 + its slots + their
#: engine children); podman's default asks for more than a sandbox may grant.
CONTAINER_NPROC = 4096


def ulimit_options() -> list[str]:
    """``--ulimit`` options no higher than this process's own hard limits: open files at the hard
    limit, processes at :data:`CONTAINER_NPROC` (or the hard limit, if lower). Podman asks for
    1,048,576 open files by default, which a sandbox that may not raise a limit refuses; one such
    sandbox also refused more than about 32,000 processes below its hard limit."""
    def cap(limit: int, most: int) -> int:
        hard = resource.getrlimit(limit)[1]
        return most if hard == resource.RLIM_INFINITY else min(hard, most)

    nofile, nproc = cap(resource.RLIMIT_NOFILE, 1_048_576), cap(resource.RLIMIT_NPROC, CONTAINER_NPROC)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def base_image(engine: str, mirror: str) -> str:
    """:data:`BASE_IMAGE`, made with debootstrap and imported unless podman has it already.

    Raises:
        Unavailable: no debootstrap, or it failed (the mirror out of reach).
    """
    if subprocess.run([engine, "image", "exists", BASE_IMAGE]).returncode == 0:
        return BASE_IMAGE
    if shutil.which("debootstrap") is None:
        raise Unavailable(f"no base image {BASE_IMAGE} and no debootstrap to make one (apt-get install debootstrap)")
    _say(f"making the base image {BASE_IMAGE} with debootstrap (a few minutes) …")
    with tempfile.TemporaryDirectory(prefix="imposition-base-", dir="/var/tmp") as root:
        _run(["debootstrap", "--variant=minbase", "bookworm", root, mirror], what="debootstrap", unavailable=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        try:
            _run([engine, "import", "-", BASE_IMAGE], what="podman import", unavailable=True, stdin=tar.stdout)
        finally:
            tar.wait()
    return BASE_IMAGE


def build(engine: str, base: str, tag: str) -> None:
    """``podman build`` of the Dockerfile on ``base`` as ``tag``.

    Raises:
        subprocess.CalledProcessError: the build failed (its last lines printed).
    """
    cmd = [engine, "build", "--format", "docker", "--isolation", "chroot", "--build-arg", f"BASE_IMAGE={base}",
           "-t", tag]
    ca = os.environ.get("PIP_CERT")
    if ca and Path(ca).is_file():
        cmd += ["--volume", f"{ca}:/run/build-ca.crt:ro", "--build-arg", "PIP_CERT=/run/build-ca.crt"]
    _run([*cmd, str(REPO)], what="podman build", timeout=1800)


def check(args: argparse.Namespace) -> int:
    """Steps 1 to 4 of the module docstring; the exit status.

    Raises:
        Unavailable: this machine cannot build or run containers.
    """
    if shutil.which(args.engine) is None:
        raise Unavailable(f"{args.engine} is not installed (Debian: apt-get install podman runc debootstrap)")
    _run([args.engine, "info"], what=f"{args.engine} info", unavailable=True)
    base = args.base or base_image(args.engine, args.mirror)
    _run([args.engine, "run", "--rm", "--no-healthcheck", *ulimit_options(), base, "true"],
         what="a container from the base image",
         unavailable=True)
    began = time.monotonic()
    _say(f"building {args.tag} from the Dockerfile on {base} …")
    try:
        build(args.engine, base, args.tag)
    except subprocess.CalledProcessError:
        _say("FAILED: podman build")
        return 1
    _say(f"built in {time.monotonic() - began:.0f} s; running devstack.container_check on it …")
    from devstack import container_check, units_check  # noqa: PLC0415

    # each check in a process of its own: each starts its own endpoint and binds its clients to it
    options = [args.tag, "--engine", args.engine, f"--run-option={' '.join(ulimit_options())}"]
    code = subprocess.run([sys.executable, "-m", "devstack.container_check", *options], cwd=REPO).returncode
    if code != 0:
        _say(f"FAILED: devstack.container_check (logs in {container_check.RUN_DIR})")
        return 1
    _say("the image passed; running the systemd units in it (devstack.units_check) …")
    code = subprocess.run([sys.executable, "-m", "devstack.units_check", *options], cwd=REPO).returncode
    if code == units_check.UNAVAILABLE:
        _say("units: CANNOT RUN systemd in a container here; the units were NOT run (the image passed)")
        return 0
    _say("passed" if code == 0 else f"FAILED: devstack.units_check (journal in {units_check.RUN_DIR})")
    return 0 if code == 0 else 1


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        return check(args)
    except Unavailable as exc:
        _say(f"CANNOT RUN on this machine: {exc}")
        if args.skip_unavailable:
            _say("SKIPPED (--skip-unavailable): the image was NOT built or checked here")
            return 0
        return UNAVAILABLE


if __name__ == "__main__":
    sys.exit(main())
