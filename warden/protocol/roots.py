"""Roots validation, sans-IO: which ``file://`` URIs may be passed to a server, and what path each one names.

The spec requires clients to "validate all root URIs to prevent path traversal" but gives no algorithm; this is
warden's, strict on purpose (RT04, RT05):

* only ``file://`` with an empty authority (``file:///path``); ``file://host/…`` and ``file://localhost/…``,
  ``file:/path``, other schemes, queries and fragments are refused;
* percent-escapes are decoded exactly once and must form UTF-8; an escape that decodes to ``/``, NUL or a control
  character is refused (it would change the path's structure); a backslash is refused (a traversal on Windows);
* ``.`` and ``..`` segments are normalised lexically (``%2e%2e`` after decoding too), and a ``..`` that would climb
  above ``/`` is refused; the result is one absolute path, then compared against the allowed directories.

Symlinks are resolved elsewhere (``warden.policy.resolve_root``): that needs the file system, this does not.
"""

from __future__ import annotations

import urllib.parse
from typing import Final

from warden.errors import RemoteProtocolError

__all__ = ["RootError", "file_uri_path", "normalize_file_uri", "normalize_segments", "path_to_file_uri"]

MAX_URI_LENGTH: Final = 4096
_HEX: Final = frozenset("0123456789abcdefABCDEF")


class RootError(RemoteProtocolError):
    """A root URI (or path argument) is not acceptable; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, jsonrpc_code=-32602)


def _decode(path: str) -> str:
    out = bytearray()
    i = 0
    while i < len(path):
        c = path[i]
        if c == "%":
            h = path[i + 1:i + 3]
            if len(h) != 2 or not set(h) <= _HEX:
                raise RootError(f"malformed percent-escape at position {i}")
            b = int(h, 16)
            if b == 0x2F:
                raise RootError("an escaped '/' (%2F) would change the path's structure")
            if b == 0x5C:
                raise RootError("an escaped backslash (%5C) is refused")
            if b < 0x20 or b == 0x7F:
                raise RootError(f"an escaped control character (%{h}) is refused")
            out.append(b)
            i += 3
        else:
            out.extend(c.encode("utf-8", "surrogatepass"))
            i += 1
    try:
        decoded = out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RootError("percent-escapes do not form UTF-8") from exc
    for ch in decoded:
        if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F:
            raise RootError(f"control character U+{ord(ch):04X} in path")
    return decoded


def normalize_segments(path: str) -> str:
    """Resolve ``.``, ``..`` and repeated slashes lexically (no file system); ``..`` above ``/`` is refused."""
    parts: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not parts:
                raise RootError("'..' climbs above /")
            parts.pop()
        else:
            parts.append(seg)
    return "/" + "/".join(parts)


def normalize_file_uri(uri: str) -> str:
    """Return the normalised absolute path a root URI names, or raise :class:`RootError`."""
    if not isinstance(uri, str):
        raise RootError("root URI is not a string")
    if len(uri) > MAX_URI_LENGTH:
        raise RootError(f"root URI longer than {MAX_URI_LENGTH} characters")
    if any(ord(c) <= 0x20 or 0x7F <= ord(c) <= 0x9F for c in uri):
        raise RootError("root URI contains whitespace or control characters (they must be percent-encoded)")
    if not uri.startswith("file:"):
        scheme = uri.split(":", 1)[0] if ":" in uri else ""
        raise RootError(f"only file:// roots are accepted, not {scheme + ':' if scheme else 'a relative reference'}")
    if not uri.startswith("file://"):
        raise RootError("root must be written file:///absolute/path")
    rest = uri[len("file://"):]
    if not rest.startswith("/"):
        host = rest.split("/", 1)[0]
        raise RootError(f"root names host {host!r}; only local roots (file:///path) are accepted")
    if rest.startswith("//"):
        raise RootError("root path starts with '//' (a network share)")
    if "?" in rest or "#" in rest:
        raise RootError("root URI has a query or fragment")
    if "\\" in rest:
        raise RootError("root URI contains a backslash")
    return normalize_segments(_decode(rest))


def file_uri_path(uri: str) -> str:
    """The path a ``file://`` URI names as a server opening it would use it: validated like
    :func:`normalize_file_uri` (same errors), percent-decoded, but ``.``/``..`` kept -- the kernel resolves a ``..``
    after the symlink before it, which lexical normalization does not."""
    normalize_file_uri(uri)
    return _decode(uri[len("file://"):])


def path_to_file_uri(path: str) -> str:
    """The canonical ``file://`` URI of a normalised absolute path (UTF-8, percent-encoded)."""
    return "file://" + urllib.parse.quote(path, safe="/-._~!$&'()*+,;=:@")
