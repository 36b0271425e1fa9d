"""Where a webhook may go: public addresses only (the SSRF guard).

Rule: every address the URL's host is, or resolves to, must be public: not loopback, link-local,
multicast, unspecified, private, reserved, nor otherwise not globally reachable (the IANA
special-purpose address registries, RFC 6890, as :mod:`ipaddress` encodes them). An IPv4-mapped IPv6
address is judged as its IPv4 address; a 6to4 address must embed a public IPv4 address too. A name
that resolves to several addresses is refused if any of them is not public.

Checked twice:

* :func:`check_destination` when the URL is set (``imposition tenant set-webhook``): a clear error
  for the operator, before any event is due.
* :func:`guarded_session` at every new connection of a delivery: the connection resolves the host
  once, checks every address and connects only to the addresses it checked (no second lookup:
  no DNS rebinding); redirects are never followed and environment proxies are ignored.

``Settings.webhook_allow_private_addresses`` (env ``IMPOSITION_WEBHOOK_ALLOW_PRIVATE_ADDRESSES``)
turns both checks off, for local runs whose receivers listen on 127.0.0.1.

Why: docs/design.md, "Webhook destinations: public addresses only".
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util import connection

from imposition.common.settings import get_settings
from imposition.common.tenancy import shown_value
from imposition.webhooks.errors import UnsafeWebhookDestination, WebhookConfigError

#: Port of a URL without one, per scheme (RFC 9110 §4.2).
DEFAULT_PORTS = {"http": 80, "https": 443}
#: ``ipaddress`` properties that disqualify an address, checked in this order (the first one names it).
REFUSED_KINDS = ("loopback", "link_local", "multicast", "unspecified", "reserved", "private")


def refusal_reason(address: str) -> str | None:
    """Why ``address`` (an IPv4 or IPv6 literal, optionally with an ``%scope``) may not receive webhooks.

    Returns:
        None for a public address; otherwise the kind: ``loopback``, ``link-local``, ``multicast``,
        ``unspecified``, ``private``, ``reserved`` or ``not globally reachable``.

    Raises:
        ValueError: not an IP address literal.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return refusal_reason(str(ip.ipv4_mapped))
    for kind in REFUSED_KINDS:
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    if not ip.is_global:
        return "not globally reachable"
    if ip.version == 6 and ip.sixtofour is not None:
        inner = refusal_reason(str(ip.sixtofour))
        return inner and f"6to4 of a {inner} address"
    return None


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (an address literal: itself), in resolver order, once each.

    Raises:
        socket.gaierror: the name does not resolve.
    """
    infos = socket.getaddrinfo(host.strip("[]"), port, connection.allowed_gai_family(), socket.SOCK_STREAM)
    return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in infos))


def public_addresses(host: str, port: int) -> list[str]:
    """Resolve ``host`` once; return its addresses if every one of them is public.

    Raises:
        UnsafeWebhookDestination: one of them is not (the message names the host, the address and why).
        socket.gaierror: the name does not resolve.
    """
    addresses = resolve(host, port)
    for address in addresses:
        reason = refusal_reason(address)
        if reason is not None:
            verb = "is" if address == host.strip("[]") else "resolves to"
            raise UnsafeWebhookDestination(
                f"webhook_url host {shown_value(host)} {verb} {address} ({reason}); webhooks go to public addresses only "
                "(Settings.webhook_allow_private_addresses allows others, for local runs)")
    return addresses


def check_destination(url: str) -> None:
    """Refuse ``url`` (already an absolute http(s) URL) unless its host resolves to public addresses only.

    Does nothing when ``Settings.webhook_allow_private_addresses`` is set.

    Raises:
        UnsafeWebhookDestination: the host is or resolves to a non-public address.
        WebhookConfigError: the host does not resolve.
    """
    if get_settings().webhook_allow_private_addresses:
        return
    parts = urlsplit(url)
    try:
        public_addresses(parts.hostname or "", parts.port or DEFAULT_PORTS[parts.scheme])
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError; a bad IDNA label a UnicodeError
        raise WebhookConfigError(f"webhook_url host {shown_value(parts.hostname)} does not resolve: {exc}") from None


class _PublicHTTPConnection(HTTPConnection):
    """A urllib3 connection that resolves once, refuses any non-public address and connects to the
    checked ones; the same exceptions as :meth:`urllib3.connection.HTTPConnection._new_conn` otherwise."""

    def _new_conn(self) -> socket.socket:
        if get_settings().webhook_allow_private_addresses:
            return super()._new_conn()
        try:
            addresses = public_addresses(self.host, self.port)
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc
        error: OSError | None = None
        for address in addresses:
            try:
                return connection.create_connection((address, self.port), self.timeout,
                                                    source_address=self.source_address,
                                                    socket_options=self.socket_options)
            except OSError as exc:  # this address did not answer: try the next checked one
                error = exc
        if isinstance(error, TimeoutError):
            raise ConnectTimeoutError(self, f"Connection to {self.host} timed out. "
                                            f"(connect timeout={self.timeout})") from error
        raise NewConnectionError(self, f"Failed to establish a new connection: {error}") from error


class _PublicHTTPSConnection(_PublicHTTPConnection, HTTPSConnection):
    """:class:`_PublicHTTPConnection`'s check, then TLS to the URL's host name (SNI and certificate)."""


class _PublicHTTPPool(HTTPConnectionPool):
    ConnectionCls = _PublicHTTPConnection


class _PublicHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _PublicHTTPSConnection


class PublicOnlyAdapter(HTTPAdapter):
    """A requests transport adapter whose connections reach public addresses only (module docstring)."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        """urllib3's pool manager, with the checking connection pools for http and https."""
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _PublicHTTPPool, "https": _PublicHTTPSPool}


def guarded_session() -> requests.Session:
    """A requests session for webhook deliveries: :class:`PublicOnlyAdapter` for http and https, and
    nothing taken from the environment (no proxies, no ``.netrc`` credentials)."""
    session = requests.Session()
    session.trust_env = False
    adapter = PublicOnlyAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
