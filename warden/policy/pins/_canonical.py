"""RFC 8785 canonical JSON and SHA-256 digests: the one hash every pin, approval and confirmation uses.

A digest covers the *whole* value it is given (for a tool: name, title, description, inputSchema, outputSchema,
annotations, icons, ``_meta`` and any field a later spec adds), so no part of what the host is shown can change
without the digest changing. Hashing only the description (mcp-scan) or leaving annotations out (MCPProxy) lets a
server flip what policy or the model relies on without re-approval.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from warden import canonical
from warden.errors import RemoteProtocolError

DIGEST_PREFIX = "sha256:"


def canonical_json(value: Any) -> bytes:
    """Return the RFC 8785 (JCS) bytes of ``value`` (:func:`warden.canonical.canonical_json`).

    Raises:
        RemoteProtocolError: the value cannot be canonicalized (an integer outside the I-JSON range, a float NaN or
            infinity, a lone surrogate, a non-string key, nesting deeper than 64 levels). Such a definition can
            never be pinned, so the entry it came from is refused; the peer that sent it is at fault.
    """
    try:
        return canonical.canonical_json(value)
    except canonical.CanonicalizationError as exc:
        raise RemoteProtocolError(f"value cannot be canonicalized for pinning: {exc}",
                                  jsonrpc_code=-32602) from exc


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value`` (see :func:`canonical_json` for what it raises)."""
    return DIGEST_PREFIX + hashlib.sha256(canonical_json(value)).hexdigest()


def arguments_digest(arguments: Mapping[str, Any] | None) -> str:
    """Digest a call's arguments; absent arguments hash like ``{}`` because the server sees no difference."""
    return digest(dict(arguments) if arguments is not None else {})


def short(d: str) -> str:
    """The first 12 hex digits of a digest, for display next to the full value (never instead of it)."""
    return d.removeprefix(DIGEST_PREFIX)[:12]
