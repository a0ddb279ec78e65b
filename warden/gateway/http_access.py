"""Who may talk to warden's HTTP endpoint: the ``Host`` and ``Origin`` checks and the bearer token compare.

A local MCP endpoint is reachable by every web page the user's browser opens: a page on ``evil.example`` whose
DNS name is re-pointed at 127.0.0.1 (DNS rebinding) sends requests that carry ``Host: evil.example`` and
``Origin: http://evil.example``. So every request must name warden itself in ``Host`` (a loopback name, or a name
the operator allowed, with the port warden is bound to) and, when a browser sent it, come from an allowed
``Origin``; anything else is refused with 403 before it is parsed (SEC01, SEC02). The bearer token (SEC04) is
compared in constant time, so the time a refusal takes says nothing about how much of a guess was right.

Pure: values in, verdicts out. No clock, no environment, no sockets.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, final

from warden.errors import ConfigError
from warden.loopback import is_loopback

__all__ = [
    "LOOPBACK_NAMES",
    "MIN_TOKEN_LENGTH",
    "AccessPolicy",
    "bearer_credential",
    "bearer_matches",
    "parse_bind",
    "valid_token",
]

LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})
"""Names under which a host on this machine reaches a loopback-bound warden."""

MIN_TOKEN_LENGTH: Final = 32
"""A token read from a file must be at least this long (warden's own are 43 characters of ``token_urlsafe``)."""

# RFC 6750 b64token (token68): what a bearer credential may consist of.
_TOKEN68: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# host [":" port], where host is a bracketed IPv6 literal or a reg-name / IPv4 address (RFC 3986 authority).
_AUTHORITY: Final = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~%!$&'()*+,;=]+)(?::([0-9]{1,5}))?")
_ORIGIN: Final = re.compile(r"(https?)://(.+)")


def _unspecified(host: str) -> bool:
    """True for the wildcard addresses (every interface): they are no name a request can carry."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` or ``PORT`` -> (host, port); the host defaults to 127.0.0.1.

    Raises:
        ConfigError: not one of those shapes, or a port outside 0-65535 (0 asks the kernel for a free one).
    """
    value = text.strip()
    if value.isdigit():
        host, port_text = "127.0.0.1", value
    else:
        match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):([0-9]+)", value)
        if match is None:
            raise ConfigError(f"--http {text!r} is not HOST:PORT",
                              hint="for example --http 127.0.0.1:8765 (or --http 8765 for 127.0.0.1)")
        host, port_text = match.group(1) or "127.0.0.1", match.group(2)
    port = int(port_text)
    if port > 65535:
        raise ConfigError(f"--http port {port} is out of range", hint="use a port from 1 to 65535, or 0 for any")
    return host.strip("[]"), port


def _split_authority(value: str) -> tuple[str, int | None] | None:
    match = _AUTHORITY.fullmatch(value)
    if match is None:
        return None
    port = match.group(2)
    if port is not None and int(port) > 65535:
        return None
    return match.group(1).lower(), int(port) if port is not None else None


def valid_token(token: str) -> bool:
    """Whether ``token`` can be a bearer credential warden accepts: token68 characters, at least 32 of them."""
    return len(token) >= MIN_TOKEN_LENGTH and _TOKEN68.fullmatch(token) is not None


def bearer_credential(values: Iterable[bytes]) -> bytes | None:
    """The credential of ``Authorization: Bearer <credential>`` when exactly one ``Authorization`` value was sent
    (the scheme is case-insensitive, RFC 9110), else None."""
    sent = list(values)
    if len(sent) != 1:
        return None
    scheme, _, credential = sent[0].strip().partition(b" ")
    if scheme.lower() != b"bearer" or not credential.strip():
        return None
    return credential.strip()


def bearer_matches(values: Iterable[bytes], token: str) -> bool:
    """True when exactly one ``Authorization`` value was sent and it is ``Bearer <token>``. The credential is
    compared with :func:`hmac.compare_digest`, so the comparison takes the same time wherever a guess first
    differs."""
    credential = bearer_credential(values)
    return credential is not None and hmac.compare_digest(credential, token.encode("ascii"))


@final
@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """The ``Host`` and ``Origin`` values that name this warden.

    ``names`` are host names (lower case; IPv6 literals in brackets) that may appear in ``Host`` with ``port``,
    the port warden is bound to. An ``Origin`` is allowed when it is ``http://`` with such a pair (a page served
    by warden's own address), or when it is one of ``origins`` exactly (``scheme://host[:port]``, lower case).
    """

    names: frozenset[str]
    port: int
    origins: frozenset[str] = frozenset()

    @classmethod
    def for_bind(cls, host: str, port: int, *, allow_hosts: Iterable[str] = (),
                 allow_origins: Iterable[str] = ()) -> AccessPolicy:
        """The policy for a listener on ``host:port``: the loopback names when it is loopback-bound, the bound
        address itself unless it is a wildcard, plus what the operator allowed.

        Raises:
            ConfigError: an allowed origin that is not ``http(s)://host[:port]``.
        """
        names = set(LOOPBACK_NAMES) if is_loopback(host) else set()
        if not _unspecified(host):
            names.add((f"[{host}]" if ":" in host else host).lower())
        names.update(name.strip().lower() for name in allow_hosts if name.strip())
        origins: set[str] = set()
        for origin in allow_origins:
            normalized = origin.strip().rstrip("/").lower()
            match = _ORIGIN.fullmatch(normalized)
            if match is None or _split_authority(match.group(2)) is None:
                raise ConfigError(f"--allow-origin {origin!r} is not an origin",
                                  hint="write it as scheme://host[:port], e.g. http://localhost:6274")
            origins.add(normalized)
        return cls(frozenset(names), port, frozenset(origins))

    def host_allowed(self, value: bytes | None) -> bool:
        """Whether a ``Host`` header value names this warden (a missing one does not)."""
        if value is None:
            return False
        try:
            text = value.decode("ascii")
        except UnicodeDecodeError:
            return False
        parts = _split_authority(text.strip())
        if parts is None:
            return False
        name, port = parts
        return name in self.names and (port if port is not None else 80) == self.port

    def origin_allowed(self, value: bytes | None) -> bool:
        """Whether an ``Origin`` header allows the request. Absent is allowed: only browsers send one, and a
        browser always does on the cross-origin requests DNS rebinding makes. ``null`` (sandboxed frames, files)
        is refused."""
        if value is None:
            return True
        try:
            text = value.decode("ascii").strip().rstrip("/").lower()
        except UnicodeDecodeError:
            return False
        if text in self.origins:
            return True
        match = _ORIGIN.fullmatch(text)
        if match is None or match.group(1) != "http":  # warden serves plain http: no https page is its own
            return False
        parts = _split_authority(match.group(2))
        if parts is None:
            return False
        name, port = parts
        return name in self.names and (port if port is not None else 80) == self.port
