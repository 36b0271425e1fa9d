"""``python -m devstack.container_check IMAGE``: the service's image run as a platform would, on the local stack.

Not in ``make test`` (it needs a container engine); ``make image-check`` builds the image and runs
this (:mod:`devstack.image_check`). Starts the embedded AWS endpoint (moto) and provisions it, runs
the imposer role from ``IMAGE`` with the host's network (the endpoint and Redis on 127.0.0.1), asks
the image's health check inside the container (``imposition process healthcheck``), submits a job
from the host and waits for it to succeed, then stops the container with its role's stop timeout
(``podman stop -t``) while a second job runs, and checks that the stop drained it: the job succeeded
on its first attempt, nothing lost. Then it starts each other role from the image (maintenance,
notifier, beat, Flower with a login sealed by the local KMS key) until its health check passes, and
stops it: each must exit with status 0.

``--engine-option`` passes options to ``podman`` itself and ``--run-option`` to ``podman run`` (a
sandbox that forbids raising resource limits needs ``--ulimit nofile=N:N --ulimit nproc=N:N``).
Prints one JSON line with what it measured; exit status 0 when every check held.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN_DIR = REPO / "out" / "container-check"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m devstack.container_check", description=__doc__.splitlines()[0])
    p.add_argument("image")
    p.add_argument("--engine", default="podman")
    p.add_argument("--engine-option", action="append", default=[], help="an option of the engine (repeatable)")
    p.add_argument("--run-option", action="append", default=[], help="an option of `run` (repeatable)")
    p.add_argument("--metrics-port", type=int, default=19101)
    return p.parse_args(argv)


#: The roles checked after the imposer: each started from the image until healthy, then stopped.
OTHER_ROLES = ("maintenance", "notifier", "beat", "flower")


def _role_check(engine: list[str], args: argparse.Namespace, env: dict[str, str], role: str) -> dict:
    """Run ``role`` from the image until ``imposition process healthcheck`` passes inside it, stop it
    with its stop timeout; what happened (``ready_s``, ``exit_code``, or ``error`` and the log's tail)."""
    from devstack.stack import flower_login, free_port, wait_for  # noqa: PLC0415
    from tasks.processes import stop_timeout_s  # noqa: PLC0415

    port = free_port()
    role_env = {**env, "IMPOSITION_PROCESS_ROLE": role}
    role_env.update(flower_login(port)[0] if role == "flower" else {"IMPOSITION_METRICS_PORT": str(port)})
    name = f"imposition-check-{role}-{uuid.uuid4().hex[:6]}"
    run = [*engine, "run", "-d", "--name", name, "--network=host", "--no-healthcheck",
           *(o for option in args.run_option for o in shlex.split(option)),
           *(f"--env={k}={v}" for k, v in role_env.items()), args.image]
    started = time.monotonic()
    outcome: dict = {}
    try:
        subprocess.run(run, check=True, capture_output=True, text=True)
        wait_for(lambda: subprocess.run([*engine, "exec", name, "imposition", "process", "healthcheck"],
                                        capture_output=True).returncode == 0, 120, 1.0, f"{role}'s health check")
        outcome["ready_s"] = round(time.monotonic() - started, 1)
        subprocess.run([*engine, "stop", "-t", str(stop_timeout_s(role)), name], check=True, capture_output=True)
        state = subprocess.run([*engine, "inspect", name, "--format", "{{.State.ExitCode}}"],
                               capture_output=True, text=True).stdout.strip()
        outcome["exit_code"] = int(state)
    except (TimeoutError, subprocess.CalledProcessError, ValueError) as exc:
        outcome["error"] = str(exc)
    finally:
        logs = subprocess.run([*engine, "logs", name], capture_output=True, text=True)
        (RUN_DIR / f"container-{role}.log").write_text(logs.stdout + logs.stderr)
        if "exit_code" not in outcome:
            outcome["log_tail"] = (logs.stdout + logs.stderr)[-1500:]
        subprocess.run([*engine, "rm", "-f", name], capture_output=True)
    return outcome


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    from devstack.localaws import LocalAws  # noqa: PLC0415
    from devstack.stack import wait_for  # noqa: PLC0415

    engine = [args.engine, *(o for option in args.engine_option for o in shlex.split(option))]
    with LocalAws(log_path=RUN_DIR / "moto.log") as local_aws:
        env = {**local_aws.env, "IMPOSITION_AUTO_REGISTER_TENANTS": "true",
               "IMPOSITION_REDIS_KEY_NAMESPACE": f"container-check-{uuid.uuid4().hex[:8]}"}
        os.environ.update(env)
        from imposition.cli.provision import provision  # noqa: PLC0415
        from imposition.common.settings import get_settings  # noqa: PLC0415

        get_settings.cache_clear()
        provision()
        from leases.models import JobItem  # noqa: PLC0415
        from tasks.processes import stop_timeout_s  # noqa: PLC0415
        from tasks.submission import submit  # noqa: PLC0415

        sample = REPO / "samples" / "a5_24p.pdf"
        layout = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}

        name = f"imposition-check-{uuid.uuid4().hex[:6]}"
        container_env = {**env, "IMPOSITION_PROCESS_ROLE": "imposer", "IMPOSITION_METRICS_PORT": str(args.metrics_port),
                         "IMPOSITION_SLOTS_PER_NODE": "2"}
        run = [*engine, "run", "-d", "--name", name, "--network=host", "--no-healthcheck",
               *(o for option in args.run_option for o in shlex.split(option)),
               *(f"--env={k}={v}" for k, v in container_env.items()), args.image]
        started = time.monotonic()
        result: dict = {"image": args.image}
        try:
            subprocess.run(run, check=True, capture_output=True, text=True)  # in the try: a failed run is removed too

            def healthy() -> str | None:
                done = subprocess.run([*engine, "exec", name, "imposition", "process", "healthcheck"],
                                      capture_output=True, text=True)
                return done.stdout if done.returncode == 0 else None

            said = wait_for(healthy, 120, 1.0, "the container's health check to pass")
            result["ready_s"] = round(time.monotonic() - started, 1)
            result["health"] = json.loads(said)
            user = subprocess.run([*engine, "exec", name, "id", "-u"], capture_output=True, text=True).stdout.strip()
            result["uid"] = int(user)
            tenant = f"container-{uuid.uuid4().hex[:6]}"
            first = submit(sample, tenant_id=tenant, token="first", layout=layout)
            wait_for(lambda: JobItem.get(first).status == "succeeded", 120, 0.5, "the first job to succeed")
            second = submit(sample, tenant_id=tenant, token="second", layout=layout)
            wait_for(lambda: JobItem.get(second).status in ("running", "succeeded"), 60, 0.1, "the second job to start")
            result["second_status_at_stop"] = JobItem.get(second).status
            timeout_s = stop_timeout_s("imposer")
            began = time.monotonic()
            subprocess.run([*engine, "stop", "-t", str(timeout_s), name], check=True, capture_output=True)
            result["stop_s"] = round(time.monotonic() - began, 1)
            result["stop_timeout_s"] = timeout_s
            state = subprocess.run([*engine, "inspect", name, "--format", "{{.State.ExitCode}}"],
                                   capture_output=True, text=True).stdout.strip()
            result["exit_code"] = int(state)
            jobs = [JobItem.get(j) for j in (first, second)]
            result["jobs"] = [(j.status, int(j.attempts), j.lost_attempts) for j in jobs]
        finally:
            (RUN_DIR / "container.log").write_text(
                subprocess.run([*engine, "logs", name], capture_output=True, text=True).stdout
                + subprocess.run([*engine, "logs", name], capture_output=True, text=True).stderr)
            subprocess.run([*engine, "rm", "-f", name], capture_output=True)
        result["roles"] = {role: _role_check(engine, args, env, role) for role in OTHER_ROLES}
    ok = (result.get("uid", 0) != 0 and result.get("exit_code") == 0
          and result.get("jobs") == [("succeeded", 1, None)] * 2 and result["health"]["status"] == "ok"
          and all(r.get("exit_code") == 0 for r in result["roles"].values()))
    result["ok"] = ok
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
