"""``python -m devstack.units_check IMAGE``: the shipped systemd units, sandbox and all, run by a real systemd.

``make image-check`` runs this after :mod:`devstack.container_check` (:mod:`devstack.image_check`).
``systemd-analyze security`` rates a unit's sandbox but runs nothing; this starts the five units of
``deploy/systemd`` under systemd as PID 1 of a container made from ``IMAGE`` (the service's image,
whose venv is where the units expect it, ``/opt/imposition``) with Debian's systemd added. Their
environment file (``/etc/conf.d/imposition``) points them at the embedded AWS endpoint and Redis on
the host's network, Flower's login sealed by the local KMS key. Then:

* every role answers ``imposition process healthcheck``;
* each main process runs sandboxed: no effective capabilities, ``NoNewPrivs`` 1, a seccomp filter;
* a job submitted from the host succeeds on the sandboxed imposer (the engine child sets its
  address-space and CPU limits under the unit's system-call filter);
* ``systemctl stop`` ends each with ``Result=success`` and status 0.

The container is ``--privileged`` so that systemd may set up each unit's namespaces. It uses the
metrics ports the units name (9101 to 9104) on the host. Prints one JSON line; exit status 0 when
every check held, 3 when systemd does not come up in a container here.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN_DIR = REPO / "out" / "units-check"
ROLES = ("imposer", "maintenance", "notifier", "beat", "flower")
#: Exit status when systemd does not run in a container here.
UNAVAILABLE = 3
CONTAINERFILE = """\
FROM {image}
USER root
RUN apt-get update && apt-get install -y --no-install-recommends systemd systemd-sysv \\
 && rm -rf /var/lib/apt/lists/*
COPY *.service /etc/systemd/system/
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/sbin/init"]
"""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m devstack.units_check", description=__doc__.splitlines()[0])
    p.add_argument("image")
    p.add_argument("--engine", default="podman")
    p.add_argument("--run-option", action="append", default=[], help="an option of `run` (repeatable)")
    return p.parse_args(argv)


def build(engine: str, image: str) -> str:
    """``image`` with systemd and the shipped units; its tag.

    Raises:
        subprocess.CalledProcessError: the build failed.
    """
    tag = f"{image.rsplit(':', 1)[0]}-units:check"
    with tempfile.TemporaryDirectory(prefix="imposition-units-") as context:
        for unit in sorted((REPO / "deploy" / "systemd").glob("*.service")):
            shutil.copy(unit, context)
        Path(context, "Containerfile").write_text(CONTAINERFILE.format(image=image))
        subprocess.run([engine, "build", "--format", "docker", "--isolation", "chroot", "-t", tag, context],
                       check=True, capture_output=True, text=True, timeout=1800)
    return tag


def _sandbox(exec_: list[str], role: str) -> dict:
    """The main process's capabilities, NoNewPrivs and seccomp mode (``/proc/<pid>/status``)."""
    pid = subprocess.run([*exec_, "systemctl", "show", "-p", "MainPID", "--value", f"imposition-{role}"],
                         capture_output=True, text=True).stdout.strip()
    status = subprocess.run([*exec_, "cat", f"/proc/{pid}/status"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {k: fields.get(k, "").strip() for k in ("CapEff", "NoNewPrivs", "Seccomp")}


def _stopped(exec_: list[str], role: str) -> dict:
    shown = subprocess.run([*exec_, "systemctl", "show", "-p", "Result", "-p", "ExecMainStatus", f"imposition-{role}"],
                           capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def check_units(engine: list[str], name: str, env_file: Path) -> dict:
    """Start, probe and stop the units in the running container ``name`` (module docstring)."""
    from devstack.stack import wait_for  # noqa: PLC0415
    from leases.models import JobItem  # noqa: PLC0415
    from tasks.submission import submit  # noqa: PLC0415

    exec_ = [*engine, "exec", name]
    result: dict = {}
    subprocess.run([*exec_, "systemctl", "start", *(f"imposition-{r}" for r in ROLES)], check=True,
                   capture_output=True, timeout=120)

    def healthy(role: str) -> bool:
        return subprocess.run([*engine, "exec", "--env-file", str(env_file), name, "imposition", "process",
                               "healthcheck", role], capture_output=True).returncode == 0

    for role in ROLES:
        wait_for(functools.partial(healthy, role), 120, 1.0, f"{role}'s health check")
    result["healthy"] = list(ROLES)
    result["sandbox"] = {r: _sandbox(exec_, r) for r in ROLES}
    job = submit(REPO / "samples" / "a5_24p.pdf", tenant_id=f"units-{uuid.uuid4().hex[:6]}", token="units",
                 layout={"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"})
    wait_for(lambda: JobItem.get(job).status in ("succeeded", "failed"), 120, 0.5, "the job to finish")
    result["job"] = JobItem.get(job).status
    subprocess.run([*exec_, "systemctl", "stop", *(f"imposition-{r}" for r in ROLES)], check=True,
                   capture_output=True, timeout=600)
    result["stopped"] = {r: _stopped(exec_, r) for r in ROLES}
    return result


def _ok(result: dict) -> bool:
    sandboxed = all(s == {"CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
                    for s in result.get("sandbox", {}).values())
    stopped = all(s == {"Result": "success", "ExecMainStatus": "0"} for s in result.get("stopped", {}).values())
    return sandboxed and stopped and result.get("job") == "succeeded" and len(result.get("stopped", {})) == len(ROLES)


def _wait_for_systemd(exec_: list[str], timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run([*exec_, "systemctl", "is-system-running"], capture_output=True, text=True).stdout.strip()
        if state in ("running", "degraded"):
            return state
        time.sleep(1)
    return state or "unknown"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    from devstack.localaws import LocalAws  # noqa: PLC0415
    from devstack.stack import flower_login, free_port  # noqa: PLC0415

    engine = [args.engine]
    tag = build(args.engine, args.image)
    with LocalAws(log_path=RUN_DIR / "moto.log") as local_aws:
        env = {**local_aws.env, "IMPOSITION_AUTO_REGISTER_TENANTS": "true", "IMPOSITION_SLOTS_PER_NODE": "2",
               "IMPOSITION_REDIS_KEY_NAMESPACE": f"units-check-{uuid.uuid4().hex[:8]}"}
        os.environ.update(env)
        from imposition.cli.provision import provision  # noqa: PLC0415
        from imposition.common.settings import get_settings  # noqa: PLC0415

        get_settings.cache_clear()
        provision()
        env_file = RUN_DIR / "imposition.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in {**env, **flower_login(free_port())[0]}.items()))
        name = f"imposition-units-{uuid.uuid4().hex[:6]}"
        result: dict = {"image": tag}
        try:
            subprocess.run([*engine, "run", "-d", "--name", name, "--privileged", "--systemd=always", "--network=host",
                            "--no-healthcheck", *(o for option in args.run_option for o in shlex.split(option)),
                            "-v", f"{env_file}:/etc/conf.d/imposition:ro", tag], check=True, capture_output=True)
            result["systemd"] = _wait_for_systemd([*engine, "exec", name])
            if result["systemd"] not in ("running", "degraded"):
                print(json.dumps(result))
                return UNAVAILABLE
            result.update(check_units(engine, name, env_file))
        except (TimeoutError, subprocess.CalledProcessError) as exc:
            result["error"] = str(exc)
        finally:
            journal = subprocess.run([*engine, "exec", name, "journalctl", "--no-pager", "-u", "imposition-*"],
                                     capture_output=True, text=True).stdout
            (RUN_DIR / "journal.log").write_text(journal)
            subprocess.run([*engine, "rm", "-f", name], capture_output=True)
    result["ok"] = _ok(result)
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
