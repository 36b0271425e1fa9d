"""The service's processes as a platform runs them: one command per role, its stop timeout, its
health check, and its systemd unit (docs/deploy-processes.md).

===========  ===================================  ===========================================  ==========
role         ``imposition process run ROLE`` execs  stop timeout (:func:`stop_timeout_s`)        health
===========  ===================================  ===========================================  ==========
imposer      celery worker -Q imposition            Clocks.stop_timeout_s (longest attempt +     /healthz
             -c slots_per_node                      the close of the open long polls)
maintenance  celery worker -Q maintenance -c 1      receive close + stop margin (its tasks are   /healthz
                                                    acks_late and idempotent)
notifier     celery worker -Q notifications         a round's hard time limit + receive close    /healthz
             -c notifier_concurrency                + stop margin
beat         celery beat                            stop margin (it holds no work)               /healthz
flower       celery flower (events side channel,    stop margin                                  Flower's
             its login unsealed, loopback)                                                      (no login)
===========  ===================================  ===========================================  ==========

A planned stop is SIGTERM to the main process only (systemd ``KillMode=mixed``; in a container
PID 1, which ``run`` makes Celery by ``exec``): Celery's warm shutdown stops receiving, releases what
its open long polls bring, lets each running job finish (its heartbeat renews the lease) and exits.
A platform that kills it sooner charges each running job an attempt (``holder_vanished``) and
leaves its slot idle until the sweeper reclaims the lease: give it at least :func:`stop_timeout_s`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from imposition.common.clocks import Clocks
from imposition.common.settings import Settings, get_settings
from imposition.observability import flower
from imposition.observability.health import HEALTH_PATH
from imposition.webhooks.delivery import round_time_limits

#: Gossip, mingle and broker heartbeats need broadcast queues, which the SQS setup does not have.
WORKER_FLAGS = ("--without-gossip", "--without-mingle", "--without-heartbeat")
#: The metrics port (and /healthz) of each role but Flower in the units (one host may run them all)
#: and the image.
METRICS_PORTS = {"imposer": 9101, "maintenance": 9102, "notifier": 9103, "beat": 9104}


class UnknownRole(ValueError):
    """A role name that is not one of :data:`ROLES`; the message lists them."""


@dataclass(frozen=True)
class Role:
    """One kind of process: ``name``, what it does, and the queue it consumes (workers) or None."""

    name: str
    description: str
    queue_setting: str | None = None


ROLES = {r.name: r for r in (
    Role("imposer", "imposition worker: runs jobs under leases (one per pdfToolbox licence)", "imposition_queue"),
    Role("maintenance", "maintenance worker: the sweeper, the queue sampler, the webhook outbox drain",
         "maintenance_queue"),
    Role("notifier", "notifications worker: delivers webhooks", "notifications_queue"),
    Role("beat", "celery beat: schedules the maintenance tasks (exactly one per cluster)"),
    Role("flower", "Flower: the monitoring UI on the events side channel"),
)}


def role(name: str) -> Role:
    """The role called ``name``.

    Raises:
        UnknownRole: no such role.
    """
    try:
        return ROLES[name]
    except KeyError:
        raise UnknownRole(f"role={name!r}: not one of {', '.join(ROLES)}") from None


def concurrency(name: str, s: Settings) -> int:
    """Pool processes of a worker role: the licensed slots (imposer), ``notifier_concurrency``, or
    one (maintenance: one sweep at a time)."""
    return {"imposer": s.slots_per_node, "notifier": s.notifier_concurrency, "maintenance": 1}[role(name).name]


def celery_args(name: str, s: Settings | None = None) -> list[str]:
    """The ``celery`` command line of role ``name`` (after ``python -m celery``).

    Raises:
        UnknownRole: no such role.
        ValueError: flower without ``events_url``.
    """
    s = s or get_settings()
    r = role(name)
    if r.queue_setting is not None:
        return ["-A", "tasks", "worker", "-Q", getattr(s, r.queue_setting), "-c", str(concurrency(name, s)),
                "-n", f"{name}@%h", "-l", "info", *WORKER_FLAGS]
    if name == "beat":
        return ["-A", "tasks", "beat", "-l", "info", "-s", s.beat_schedule_path, "--pidfile="]
    if not s.events_url:
        raise ValueError("events_url is empty: Flower needs the events side channel (IMPOSITION_EVENTS_URL)")
    return ["-A", "tasks", f"--broker={s.events_url}", "flower", *flower.options(s)]


def stop_timeout_s(name: str, s: Settings | None = None) -> int:
    """Seconds a planned stop of role ``name`` may take (module table); the platform's stop timeout
    must be at least this.

    Raises:
        UnknownRole: no such role.
    """
    s = s or get_settings()
    clocks = Clocks.from_settings(s)
    role(name)
    if name == "imposer":
        return clocks.stop_timeout_s
    if name == "notifier":
        return math.ceil(round_time_limits(s).hard_s + clocks.receive_close_s + s.stop_margin_s)
    if name == "maintenance":
        return math.ceil(clocks.receive_close_s + s.stop_margin_s)
    return math.ceil(s.stop_margin_s)


def run(name: str) -> None:
    """Replace this process with role ``name``'s (``exec``: the platform's signals reach Celery).
    A role without ``IMPOSITION_METRICS_PORT`` gets its port of :data:`METRICS_PORTS`, so its
    /healthz answers where the health check asks. Flower gets its login, unsealed here, in its
    environment (:mod:`imposition.observability.flower`).

    Raises:
        UnknownRole: no such role.
        ValueError: flower without ``events_url``.
        imposition.observability.flower.FlowerLoginError: flower without a login KMS opens.
    """
    args = celery_args(name)
    if name in METRICS_PORTS:
        os.environ.setdefault("IMPOSITION_METRICS_PORT", str(METRICS_PORTS[name]))
    if name == "flower":
        os.environ.update(flower.environment())
    os.execv(sys.executable, [sys.executable, "-m", "celery", *args])


def health_url(name: str, s: Settings | None = None) -> str:
    """Where role ``name``'s health is asked on this host.

    Raises:
        UnknownRole: no such role.
    """
    s = s or get_settings()
    if role(name).name == "flower":
        return f"{flower.local_url(s)}/healthcheck"  # Flower's own, answered without the login
    return f"http://127.0.0.1:{s.metrics_port or METRICS_PORTS[name]}{HEALTH_PATH}"


def healthcheck(name: str, *, timeout_s: float = 5.0) -> tuple[bool, str]:
    """Ask role ``name``'s health endpoint once: (healthy, what it said).

    Raises:
        UnknownRole: no such role.
    """
    url = health_url(name)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return True, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return False, error.read().decode(errors="replace") or f"HTTP {error.code}"
    except (urllib.error.URLError, OSError) as exc:
        return False, f"{url}: {exc}"


#: The sandbox of every unit (``systemd-analyze security --offline=true`` rates it; the test
#: tests/integration/test_processes.py holds every shipped unit to :data:`MAX_UNIT_EXPOSURE`). What
#: the roles need stays allowed: their state directory (beat's schedule, pdfToolbox's own files in
#: the user's home), a private /tmp (the engine's work folders, the Prometheus multiprocess files),
#: Internet and local sockets (AWS, Redis, the licence server, the metrics port), child processes
#: (the pool, the engine's child, pdfToolbox) and lowering their own limits (the engine child's
#: address-space and CPU limits: glibc's setrlimit is the prlimit64 call, which @system-service
#: keeps). Left out: MemoryDenyWriteExecute (pdfToolbox's JavaScript runlists may compile code),
#: PrivateUsers (a licence's files and sockets keep their owners), PrivateNetwork, IPAddressDeny
#: (AWS endpoints have no fixed addresses).
UNIT_HARDENING = """\
# The sandbox (docs/deploy-processes.md, "systemd"): read-only but for the state directory and a
# private /tmp; no privileges, capabilities, devices, kernel or clock changes; sockets and system
# calls limited to what a service uses.
StateDirectory=imposition
StateDirectoryMode=0750
UMask=0027
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
PrivateMounts=yes
NoNewPrivileges=yes
CapabilityBoundingSet=
RestrictSUIDSGID=yes
ProtectClock=yes
ProtectHostname=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectProc=invisible
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
LockPersonality=yes
RemoveIPC=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
SystemCallErrorNumber=EPERM
"""
#: The most exposure a shipped unit may have in ``systemd-analyze security`` (0 safest, 10 least safe).
MAX_UNIT_EXPOSURE = 4.0


def render_unit(name: str, s: Settings | None = None) -> str:
    """The systemd unit of role ``name``, in the style of Celery's ``extra/systemd`` units: an
    ``EnvironmentFile`` (``/etc/conf.d/imposition``), a dedicated user, the command in the
    foreground (``Type=simple``), SIGTERM to the main process only (``KillMode=mixed``: its pool
    children finish their jobs), ``TimeoutStopSec`` = :func:`stop_timeout_s`, and the sandbox
    :data:`UNIT_HARDENING`."""
    s = s or get_settings()
    r = role(name)
    environment = ""
    if name in METRICS_PORTS:
        environment = f"Environment=IMPOSITION_METRICS_PORT={METRICS_PORTS[name]}\n"
    return f"""# Generated by `imposition process units` from imposition/common/settings.py; do not edit by hand.
[Unit]
Description=Imposition {r.description}
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
User=imposition
Group=imposition
EnvironmentFile=-/etc/conf.d/imposition
{environment}WorkingDirectory=/var/lib/imposition
ExecStart=/opt/imposition/bin/imposition process run {name}
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec={stop_timeout_s(name, s)}
Restart=always
RestartSec=5
{UNIT_HARDENING}
[Install]
WantedBy=multi-user.target
"""


def write_units(directory: Path, s: Settings | None = None) -> list[Path]:
    """Write each role's unit as ``imposition-<role>.service`` into ``directory``; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ROLES:
        path = directory / f"imposition-{name}.service"
        path.write_text(render_unit(name, s))
        paths.append(path)
    return paths


def stop_timeouts(s: Settings | None = None) -> str:
    """Every role's stop timeout as JSON (``{role: seconds}``)."""
    return json.dumps({name: stop_timeout_s(name, s) for name in ROLES})
