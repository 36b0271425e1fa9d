"""``python -m soak.shutdown_drains``: no-op job drains with warm worker restarts (issue 15, item 6).

The reproduction of the job that went missing for a whole run. Its own embedded stack, two imposer
nodes of :mod:`bench.sched_app` (the real ``FairTask`` lifecycle around a stand-in engine that
takes 0 s), **no sweeper** (no maintenance worker, no beat: the reconciler would re-publish a lost
job and hide the defect). Each of ``--drains`` rounds submits ``--jobs`` jobs over four tenants
and, while they are submitted and drain, restarts a random node every ``--restart-every`` seconds
(at most ``--restarts`` times) with SIGTERM (Celery's warm shutdown) and a fresh process. A round ends when every job is final, or when none finished for
``--stall`` seconds (far less than the 720 s visibility timeout: a hidden message would only come
back after it). Then, with every worker idle, it counts the jobs not finished and the messages
SQS still holds hidden (``ApproximateNumberOfMessagesNotVisible``): both must be 0.

On kombu 5.7.0's own behaviour (before ``tasks.sqs_transport.Channel.finish_open_receives``) a
node stopped while its long poll was open left the message that poll later took hidden for the
visibility timeout, and its job ``queued``. Takes about 3-6 minutes per round on 2 cores; not in
``make test`` (``tests/faults/test_clean_shutdown.py`` is the short version).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYOUT = {"layout": "saddle_stitch", "sheet": "A4", "orientation": "landscape"}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m soak.shutdown_drains", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--drains", type=int, default=3)
    p.add_argument("--restarts", type=int, default=6, help="most warm restarts of a random node per drain")
    p.add_argument("--restart-every", type=float, default=20.0, help="seconds between restarts while jobs remain")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--submitters", type=int, default=4, help="threads submitting jobs")
    p.add_argument("--wait-time", type=int, default=10, help="SQS long-poll wait of the workers (s)")
    p.add_argument("--stall", type=float, default=90.0, help="a drain with no job finished this long ends (s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "out" / "shutdown-drains")
    return p.parse_args(argv)


def _hidden_messages(queue: str) -> tuple[int, int]:
    from imposition.common import aws  # noqa: PLC0415

    attributes = aws.sqs().get_queue_attributes(
        QueueUrl=aws.queue_url(queue),
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


def _drain(args: argparse.Namespace, number: int, rng: random.Random, nodes: dict) -> dict:
    from leases.models import JobItem  # noqa: PLC0415
    from imposition.common.settings import get_settings  # noqa: PLC0415
    from devstack.stack import WORKER_READY, ManagedProcess, worker_command  # noqa: PLC0415
    from tasks.submission import submit_job  # noqa: PLC0415

    s = get_settings()
    run = uuid.uuid4().hex[:6]
    tenants = [f"drain{number}-{t}-{run}" for t in "abcd"]
    started = time.monotonic()
    job_ids: list[str] = []
    refused: list[str] = []  # submissions that raised: the drain fails (a drain of fewer jobs proves less)

    def submit_share(k: int) -> None:  # while the workers drain (and restart)
        for i in range(k, args.jobs, args.submitters):
            tenant = tenants[i % len(tenants)]
            job_id = uuid.uuid4().hex
            try:
                job_ids.append(submit_job(tenant_id=tenant, token=job_id, layout=LAYOUT,
                                          input_key=f"tenants/{tenant}/jobs/{job_id}/input.pdf", job_id=job_id))
            except Exception as exc:  # noqa: BLE001 - counted and printed; the drain then fails
                refused.append(f"{type(exc).__name__}: {exc}")

    def submit_all() -> None:
        threads = [threading.Thread(target=submit_share, args=(k,), daemon=True) for k in range(args.submitters)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    submitter = threading.Thread(target=submit_all, name="submitter", daemon=True)
    submitter.start()
    restarts, done, last_progress, next_restart = 0, set(), time.monotonic(), time.monotonic() + args.restart_every
    while (submitter.is_alive() or len(done) < len(job_ids)) and time.monotonic() - last_progress < args.stall:
        before = len(done)
        for job in JobItem.batch_get([j for j in list(job_ids) if j not in done], attributes_to_get=["job_id", "status"]):
            if job.status in ("succeeded", "failed"):
                done.add(job.job_id)
        if len(done) > before or submitter.is_alive():
            last_progress = time.monotonic()
        if restarts < args.restarts and time.monotonic() >= next_restart and len(done) < args.jobs:
            name = rng.choice(sorted(nodes))
            nodes[name].terminate()  # SIGTERM: Celery's warm shutdown
            nodes[name].stop()
            nodes[name] = ManagedProcess(worker_command(s.imposition_queue, args.concurrency, name,
                                                        app="bench.sched_app"),
                                         args.out / f"{name}-{number}-{restarts}.log", ready_marker=WORKER_READY)
            restarts += 1
            next_restart = time.monotonic() + args.restart_every
            print(f"  drain {number}: restarted {name} at {len(done)}/{len(job_ids)} done", flush=True)
        time.sleep(1)
    missing = [j for j in job_ids if j not in done]
    statuses = {job.job_id: job.status for job in JobItem.batch_get(missing[:100], attributes_to_get=["job_id", "status"])}
    visible, hidden = _hidden_messages(s.imposition_queue)
    result = {"drain": number, "jobs": len(job_ids), "submissions_refused": len(refused),
              "first_refusal": refused[0] if refused else None, "finished": len(done), "missing": len(missing),
              "missing_jobs": {j: statuses.get(j) for j in missing[:20]}, "restarts": restarts, "visible_messages": visible,
              "hidden_messages": hidden, "wall_time_s": round(time.monotonic() - started, 1)}
    if refused:
        print(f"drain {number}: {len(refused)} submission(s) refused, the first: {refused[0]}", flush=True)
    print(f"drain {number}: {result['finished']}/{result['jobs']} finished, {result['missing']} missing "
          f"{dict(Counter(statuses.values()))}, "
          f"{hidden} message(s) hidden and {visible} visible with every worker idle, {restarts} restarts, "
          f"{result['wall_time_s']} s", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    (args.out / "durations.json").write_text("{}")
    os.environ.update({
        "IMPOSITION_SQS_WAIT_TIME_S": str(args.wait_time),
        "IMPOSITION_REDIS_URL": "redis://127.0.0.1:6379/10",
        "IMPOSITION_EVENTS_URL": "redis://127.0.0.1:6379/9",
        "IMPOSITION_REDIS_KEY_NAMESPACE": f"imposition-drains-{uuid.uuid4().hex[:12]}",
        "IMPOSITION_RATE_LIMIT_PER_MIN": "1000000",
        "IMPOSITION_ADMISSION_IN_FLIGHT_CAP": "1000000",
        "IMPOSITION_AUTO_REGISTER_TENANTS": "true",  # the drains' tenants register on first submission
        "IMPOSITION_METRICS_DIR": str(args.out / "metrics"),
        "BENCH_EVENT_LOG_DIR": str(args.out / "events"),
        "BENCH_DURATIONS_FILE": str(args.out / "durations.json"),
    })
    from devstack.localaws import LocalAws  # noqa: PLC0415 (settings are read at import)

    results = []
    with LocalAws(log_path=args.out / "moto.log") as local:
        os.environ.update(local.env)
        from imposition.common import redis_namespace  # noqa: PLC0415
        from imposition.cli.provision import provision  # noqa: PLC0415
        from imposition.common.settings import get_settings  # noqa: PLC0415
        from devstack.stack import WORKER_READY, ManagedProcess, stop_all, worker_command  # noqa: PLC0415

        provision()
        s = get_settings()
        nodes = {name: ManagedProcess(worker_command(s.imposition_queue, args.concurrency, name, app="bench.sched_app"),
                                      args.out / f"{name}.log", ready_marker=WORKER_READY)
                 for name in ("imposer1", "imposer2")}
        try:
            rng = random.Random(args.seed)
            for number in range(1, args.drains + 1):
                results.append(_drain(args, number, rng, nodes))
        finally:
            stop_all(list(nodes.values()))
            redis_namespace.forget(s.redis_key_namespace, (s.redis_url, s.events_url))
    (args.out / "summary.json").write_text(json.dumps(results, indent=2))
    ok = all(r["jobs"] == args.jobs and r["missing"] == 0 and r["hidden_messages"] == 0 for r in results)
    print("PASS" if ok else "FAIL", f"(summary in {args.out / 'summary.json'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
