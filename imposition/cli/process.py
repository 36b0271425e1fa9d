"""``imposition process``: run one role of the service as a platform does, ask its health, write its
systemd units, print the stop timeouts (:mod:`tasks.processes`; docs/deploy-processes.md)."""

from __future__ import annotations

from pathlib import Path

import click

ROLE_NAMES = ("imposer", "maintenance", "notifier", "beat", "flower")
#: The role when the command line names none: the container image's one setting per role.
ROLE_ENV = "IMPOSITION_PROCESS_ROLE"


def _role_argument():
    return click.argument("role", type=click.Choice(ROLE_NAMES), envvar=ROLE_ENV)


@click.group("process")
def process_group() -> None:
    """Run, health-check and install the service's processes (one role each)."""


@process_group.command("run")
@_role_argument()
def run_command(role: str) -> None:
    """Become ROLE's process (exec: SIGTERM reaches Celery; a planned stop drains). ROLE defaults to
    $IMPOSITION_PROCESS_ROLE."""
    from imposition.observability.flower import FlowerLoginError  # noqa: PLC0415
    from tasks.processes import run  # noqa: PLC0415 - Celery only for this command

    try:
        run(role)
    except FlowerLoginError as exc:
        raise click.ClickException(str(exc)) from exc


@process_group.command("healthcheck")
@_role_argument()
@click.option("--timeout-s", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Seconds to wait for the answer.")
def healthcheck_command(role: str, timeout_s: float) -> None:
    """Ask ROLE's health endpoint on this host once (ROLE defaults to $IMPOSITION_PROCESS_ROLE).
    Exit status 0: healthy; 1: not (draining, stalled, or no answer), with what it said."""
    from tasks.processes import healthcheck  # noqa: PLC0415

    healthy, said = healthcheck(role, timeout_s=timeout_s)
    click.echo(said)
    if not healthy:
        raise SystemExit(1)


@process_group.command("units")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def units_command(directory: Path) -> None:
    """Write one systemd unit per role into DIRECTORY (imposition-<role>.service), TimeoutStopSec
    from the settings' clocks."""
    from tasks.processes import write_units  # noqa: PLC0415

    for path in write_units(directory):
        click.echo(f"wrote {path}")


@process_group.command("flower-login")
@click.argument("user")
@click.option("--password-env", metavar="NAME", default=None,
              help="Take the password from this environment variable; without it one is generated and shown once.")
def flower_login_command(user: str, password_env: str | None) -> None:
    """Make Flower's login for USER, sealed with the service's KMS key: prints the line
    IMPOSITION_FLOWER_LOGIN_CIPHERTEXT=... for the environment file of Flower's host (stdout), and a
    generated password once (stderr). Needs kms:Encrypt (the operator's role)."""
    import os  # noqa: PLC0415

    from imposition.observability.flower import CIPHERTEXT_ENV, FlowerLoginError, new_login  # noqa: PLC0415

    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise click.UsageError(f"--password-env {password_env}: that environment variable is empty or unset")
    try:
        ciphertext, password = new_login(user, password)
    except FlowerLoginError as exc:  # a malformed user or password, or KMS refused
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{CIPHERTEXT_ENV}={ciphertext}")
    if password_env is None:
        click.echo(f"Flower login: user {user}, password {password} (generated; shown only now)", err=True)


@process_group.command("stop-timeouts")
def stop_timeouts_command() -> None:
    """Print each role's stop timeout in seconds as JSON: the least a platform must allow a planned stop."""
    from tasks.processes import stop_timeouts  # noqa: PLC0415

    click.echo(stop_timeouts())
