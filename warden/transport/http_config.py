"""Configuring an HTTP upstream: its URL, the static headers (credentials) that go with every request to its
origin, and the limits of its connection. Everything is checked here, once, before warden connects; the client
(:mod:`warden.transport.http_client`) trusts what :func:`http_config` built.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, final
from urllib.parse import urlsplit

from warden.errors import ConfigError
from warden.loopback import is_loopback
from warden.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE
from warden.protocol.mcp_headers import HTTP_FIELD_VALUE, HTTP_TOKEN
from warden.protocol.paging import ListLimits

__all__ = [
    "HttpSettings",
    "auth_headers_from_config",
    "headers_from_env",
    "http_config",
    "http_server_name",
    "is_http_url",
]

MAX_URL_LENGTH: Final = 8192
_RESERVED_HEADERS: Final = frozenset({
    "accept", "accept-encoding", "connection", "content-length", "content-type", "host", "last-event-id",
    "mcp-method", "mcp-name", "mcp-protocol-version", "mcp-session-id", "transfer-encoding", "te", "upgrade",
})


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSettings:
    """One HTTP upstream: where it is, what credentials go with every request, and the time limits.

    Build it with :func:`http_config`, which checks everything; ``headers`` holds secrets, so the ``repr`` shows
    their names only.
    """

    url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    connect_timeout: float = 10.0
    """Seconds to open a TCP (and TLS) connection."""
    write_timeout: float = 30.0
    ack_timeout: float = 30.0
    """Seconds a notification, an answer to a server request, or a DELETE may take to be accepted."""
    endpoint_timeout: float = 10.0
    """Seconds an HTTP+SSE server may take to announce its endpoint."""
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    list_limits: ListLimits = field(default_factory=ListLimits)
    """The paging rules of warden's own tool re-listing (the same :class:`~warden.protocol.paging.Pager` as the
    gateway's lists)."""

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.headers)
        return f"HttpSettings(url={self.url!r}, headers=[{names}])"


def is_http_url(value: str) -> bool:
    """Whether a ``warden run`` command is an HTTP(S) URL rather than a program to start."""
    return value.lower().startswith(("http://", "https://"))


def http_config(url: str, *, headers: Iterable[tuple[str, str]] = (), **limits: Any) -> HttpSettings:
    """Check an HTTP upstream's URL and static headers, and build its settings.

    Raises:
        ConfigError: the URL is not an absolute http(s) URL, is too long, carries credentials (user:password@),
            or a fragment; a header name is not an HTTP token or is one warden sets itself; a value holds control
            characters; or credentials would travel over plain ``http://`` to a host that is not loopback.
    """
    if len(url) > MAX_URL_LENGTH:
        raise ConfigError(f"the server URL is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError as exc:
        raise ConfigError(f"the server URL {url!r} is malformed: {exc}") from exc
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"the server URL {url!r} is not an absolute http:// or https:// URL",
                          hint="give the server's MCP endpoint, e.g. https://example.com/mcp")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("the server URL carries credentials (user:password@host); warden never sends "
                          "credentials in a URL",
                          hint="remove them and pass the token with --header Authorization=ENVVAR")
    if parts.fragment:
        raise ConfigError(f"the server URL {url!r} has a #fragment, which HTTP never sends")
    checked: list[tuple[str, str]] = []
    for name, value in headers:
        if not HTTP_TOKEN.fullmatch(name):
            raise ConfigError(f"{name!r} is not a valid HTTP header name")
        if name.lower() in _RESERVED_HEADERS or name.lower().startswith("mcp-"):
            raise ConfigError(f"warden sets the {name} header itself; it cannot be configured")
        if not HTTP_FIELD_VALUE.fullmatch(value) or value != value.strip():
            raise ConfigError(f"the value for header {name} holds control characters or non-ASCII text, or "
                              "surrounding whitespace")
        checked.append((name, value))
    if checked and parts.scheme.lower() == "http" and not is_loopback(parts.hostname):
        raise ConfigError(f"refusing to send credentials to {parts.hostname} over plain http://",
                          hint="use https://, or a loopback address for a local server")
    return HttpSettings(url=url, headers=tuple(checked), **limits)


def headers_from_env(specs: Sequence[str], env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Static headers from ``NAME=ENVVAR`` specs: the value is read from the environment, so a secret never
    appears in an argv, a config file or a log line (invariant 10).

    A value for ``Authorization`` that does not name a scheme gets ``Bearer`` in front (``TOKEN=abc`` is the
    common way to hold a bearer token).

    Raises:
        ConfigError: a spec is not ``NAME=ENVVAR``, or the variable is unset or empty.
    """
    out: list[tuple[str, str]] = []
    for spec in specs:
        name, sep, var = spec.partition("=")
        if not sep or not name or not var:
            raise ConfigError(f"--header {spec!r} is not NAME=ENVVAR",
                              hint="e.g. --header Authorization=MY_TOKEN with MY_TOKEN set in the environment")
        value = env.get(var, "")
        if not value:
            raise ConfigError(f"--header {name}: the environment variable {var} is not set or empty",
                              hint=f"export {var}=... before starting warden")
        if name.lower() == "authorization" and " " not in value.strip():
            value = "Bearer " + value.strip()
        out.append((name, value))
    return out


def auth_headers_from_config(block: Mapping[str, Any], env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The static headers an ``auth`` block of a server's configuration asks for.

    ``type = "bearer"`` with ``token_env = "VAR"`` sends ``Authorization: Bearer <$VAR>``; ``type = "headers"``
    with ``headers = {Name = "VAR", ...}`` sends each header with the value of its variable. Values always come
    from the environment, never from the file. ``type = "oauth"`` sends none: warden obtains the token itself
    (:mod:`warden.auth`, AU01, AU09), and the block's other keys configure that client.

    Raises:
        ConfigError: an unknown type, or a missing variable.
    """
    kind = block.get("type")
    if kind == "oauth":
        return []
    if kind == "bearer":
        var = block.get("token_env")
        if not isinstance(var, str) or not var:
            raise ConfigError('auth type "bearer" needs token_env = "VARIABLE"')
        return headers_from_env([f"Authorization={var}"], env)
    if kind == "headers":
        mapping = block.get("headers")
        if not isinstance(mapping, Mapping) or not all(isinstance(v, str) for v in mapping.values()):
            raise ConfigError('auth type "headers" needs headers = { Name = "VARIABLE", ... }')
        return headers_from_env([f"{name}={var}" for name, var in mapping.items()], env)
    raise ConfigError(f"unknown auth type {kind!r}", hint='use "oauth", "bearer" or "headers"')


def http_server_name(url: str) -> str:
    """A readable server name for a URL: its host, with the port when one is given (``example.com``,
    ``127.0.0.1-8000``)."""
    parts = urlsplit(url)
    host = (parts.hostname or "server").strip("[]")
    name = host if parts.port is None else f"{host}-{parts.port}"
    return re.sub(r"[^A-Za-z0-9._-]", "-", name).strip("-.") or "server"
