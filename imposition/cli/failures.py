"""How every ``imposition`` command says it failed: one home for the line and the exit status.

A failure is one line on stderr, ``Error: <what was wrong>``, in which the field (or the thing) is
named with its value and the rule or limit it broke, for example::

    Error: max_attempts=1000: must be an integer from 1 to max_attempts_limit=10
    Error: invalid layout: margin_mm=-3: Input should be greater than or equal to 0
    Error: unknown_tenant: tenant 'acmee' is not registered; register it with `imposition tenant create acmee` ...
    Error: job_id='nope': no such job

A usage error adds click's usage line and help hint after it (:class:`UsageFirst`). The exit status
says which kind of failure it was (docs/operations.md, "Exit codes"): 1 the command itself failed
(:class:`CommandFailed`), 2 a refused or malformed request (:class:`Refused`, :class:`UsageFirst`,
:class:`ConfigurationError`), 3 a service it needs is unreachable (:class:`ServiceUnavailable`).
A typed error becomes its message (:func:`reason`), never its class name nor a traceback.
"""

from __future__ import annotations

import click


def reason(exc: BaseException) -> str:
    """The one-line text of a typed error: its stable ``code`` first where it has one (``not_a_pdf:
    …``, ``duplicate_submission: …``), then its message on one line; never the class name."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    code = getattr(exc, "code", None)
    if not isinstance(code, str) or not code or text.lower().startswith((f"{code}:", code.replace("_", " "))):
        return text  # no code, or the message says it already (``invalid layout: …``)
    return f"{code}: {text}"


class CommandFailed(click.ClickException):
    """The command itself failed (no such job, a plate that cannot be written): exit status 1."""

    exit_code = 1


class Refused(click.ClickException):
    """The service refused the request (an unknown tenant, a refused submission, a job in the wrong
    status): exit status 2."""

    exit_code = 2


class ConfigurationError(click.ClickException):
    """A setting read from the environment is invalid: one line naming the variable, exit status 2."""

    exit_code = 2


class ServiceUnavailable(click.ClickException):
    """A service a command needs could not be reached, or lacks a resource that ``imposition
    provision`` creates: exit status 3."""

    exit_code = 3


class UsageFirst(click.UsageError):
    """A usage error shown with the line that matters first: ``Error: <message>``, then click's
    usage line and help hint (click itself puts those two lines first). Exit status 2."""

    def show(self, file=None) -> None:
        click.echo(f"Error: {self.format_message()}", err=file is None, file=file)
        if self.ctx is not None:
            hint = f"Try '{self.ctx.command_path} --help' for help." if self.ctx.command.get_help_option(self.ctx) else ""
            click.echo(f"{self.ctx.get_usage()}\n{hint}".rstrip(), err=file is None, file=file)


def usage_first(exc: click.UsageError) -> UsageFirst:
    """``exc`` as a :class:`UsageFirst` (same message and context)."""
    return exc if isinstance(exc, UsageFirst) else UsageFirst(exc.format_message(), exc.ctx)


def warn(text: str) -> None:
    """A warning that does not fail the command: ``Warning: <text>`` on stderr."""
    click.echo(f"Warning: {text}", err=True)
