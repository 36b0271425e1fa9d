"""Flower behind a login, on loopback unless a setting says otherwise (docs/deploy.md, "Flower").

Flower shows every job's arguments (tenant ids, job ids), so it never runs without its HTTP basic
authentication. The login is a secret of the service like the tenants' webhook secrets: sealed with
KMS (:mod:`imposition.common.secrets`, context :data:`~imposition.common.secrets.FLOWER_LOGIN_CONTEXT`),
and only its ciphertext is configured::

    operator:  imposition process flower-login USER  ─►  IMPOSITION_FLOWER_LOGIN_CIPHERTEXT=<base64>
               (the password is generated and shown once)    (the processes' environment file)
    Flower's host: imposition process run flower  ─►  kms:Decrypt  ─►  FLOWER_BASIC_AUTH in Flower's
               environment (never its command line, which every user of the host can read)  ─►  exec

Flower binds ``Settings.flower_address`` (127.0.0.1 by default: reach it through an SSH tunnel or a
reverse proxy on the host) and ``Settings.flower_port``. Its ``/healthcheck`` answers without the
login (Flower's own handler), so a platform's health check needs none.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets as random_secrets

from botocore.exceptions import ClientError

from imposition.common.secrets import FLOWER_LOGIN_CONTEXT, seal, unseal
from imposition.common.settings import Settings, get_settings
from imposition.observability.events import FLOWER_OPTIONS

#: A login's user name: what HTTP basic authentication carries without quoting (no ``:``), and no
#: ``,`` (Flower splits its ``basic_auth`` option on commas).
USER_PATTERN = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
#: The shortest password the command accepts; a generated one is 24 characters.
MIN_PASSWORD_CHARS = 16
#: The environment variable Flower reads its ``--basic_auth`` option from (Flower's ``FLOWER_`` prefix).
FLOWER_BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"
#: The setting's environment variable, as the operator writes it into the environment file.
CIPHERTEXT_ENV = "IMPOSITION_FLOWER_LOGIN_CIPHERTEXT"


class FlowerLoginError(ValueError):
    """Flower's login is missing, malformed, or KMS refused it; the message says which and what to do."""


def new_login(user: str, password: str | None = None, s: Settings | None = None) -> tuple[str, str]:
    """A login for Flower: (the sealed ``user:password`` as base64 for ``flower_login_ciphertext``,
    the password). Without ``password`` one is generated (24 URL-safe characters).

    Raises:
        FlowerLoginError: ``user`` does not match :data:`USER_PATTERN`, or ``password`` is shorter
            than :data:`MIN_PASSWORD_CHARS` or holds a comma; KMS refused to encrypt.
    """
    if not USER_PATTERN.match(user):
        raise FlowerLoginError(f"user={user!r}: 1 to 64 of A-Z a-z 0-9 . _ @ -")
    if password is None:
        password = random_secrets.token_urlsafe(18)
    if len(password) < MIN_PASSWORD_CHARS or "," in password:
        raise FlowerLoginError(f"password: at least {MIN_PASSWORD_CHARS} characters and no comma "
                               f"(Flower splits its logins on commas); got {len(password)} characters")
    s = s or get_settings()
    try:
        sealed = seal(f"{user}:{password}", FLOWER_LOGIN_CONTEXT, s)
    except ClientError as exc:
        raise FlowerLoginError(f"KMS key {s.webhook_secret_kms_key_id!r} refused to encrypt Flower's login: "
                               f"{exc.response.get('Error', {}).get('Code')}: {exc}") from exc
    return base64.b64encode(sealed).decode("ascii"), password


def login(s: Settings | None = None) -> str:
    """Flower's ``user:password``, unsealed from ``flower_login_ciphertext``.

    Raises:
        FlowerLoginError: no login is configured, the value is not base64, or KMS refused it.
        botocore.exceptions.BotoCoreError: KMS could not be reached.
    """
    s = s or get_settings()
    if not s.flower_login_ciphertext:
        raise FlowerLoginError(f"Flower has no login: {CIPHERTEXT_ENV} is empty; an operator makes one with "
                               "`imposition process flower-login USER` (docs/deploy.md, \"Flower\")")
    try:
        sealed = base64.b64decode(s.flower_login_ciphertext, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise FlowerLoginError(f"{CIPHERTEXT_ENV}: not base64 ({exc})") from None
    try:
        return unseal(sealed, FLOWER_LOGIN_CONTEXT)
    except ClientError as exc:
        raise FlowerLoginError(f"{CIPHERTEXT_ENV}: KMS refused to decrypt Flower's login (this process needs "
                               f"kms:Decrypt on the key): {exc.response.get('Error', {}).get('Code')}: {exc}") from exc


def environment(s: Settings | None = None) -> dict[str, str]:
    """What Flower's environment needs for its login (:data:`FLOWER_BASIC_AUTH_ENV`).

    Raises:
        FlowerLoginError, botocore.exceptions.BotoCoreError: as :func:`login`.
    """
    return {FLOWER_BASIC_AUTH_ENV: login(s)}


def options(s: Settings | None = None) -> list[str]:
    """Flower's command-line options: where it listens, and :data:`FLOWER_OPTIONS`."""
    s = s or get_settings()
    return [f"--address={s.flower_address}", f"--port={s.flower_port}", *FLOWER_OPTIONS]


def local_url(s: Settings | None = None) -> str:
    """Flower's base URL from this host (loopback when it binds every address)."""
    s = s or get_settings()
    host = "127.0.0.1" if s.flower_address in ("", "0.0.0.0", "::") else s.flower_address
    return f"http://{host}:{s.flower_port}"

