"""RFC 8785 (JCS) canonical JSON, fast: the one canonical encoding behind pins, approvals and audit records.

The ``rfc8785`` package is the reference, but it is pure Python (~70 µs for a typical record). ``msgspec`` with
``order="sorted"`` produces byte-identical output (checked exhaustively for string escaping, and by hypothesis in
``tests/audit``) for every value *except*:

* floats (RFC 8785 prints ``1.0`` as ``1`` and uses ECMAScript exponent rules),
* integers outside ±(2^53 - 1) (RFC 8785 refuses them),
* object keys outside the Basic Multilingual Plane (RFC 8785 sorts by UTF-16 code units, msgspec by code points;
  the orders differ only when such keys meet keys in U+E000..U+FFFF).

:func:`canonical_json` walks the value once; if any of those appear it hands the value to ``rfc8785``,
otherwise to ``msgspec``. The audit record itself (:mod:`warden.audit._records`) never contains floats, big
integers or non-ASCII keys, so it is always encoded by ``msgspec`` directly.

Values nested deeper than 64 levels are refused: a peer's tool definition that deep is an attack on whoever
walks it (recursion limits, serializers), not a schema anyone writes.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
import rfc8785

from warden.errors import ProtocolError

__all__ = ["MAX_SAFE_INTEGER", "CanonicalizationError", "canonical_json"]

MAX_SAFE_INTEGER: Final = (1 << 53) - 1
_ENCODER: Final = msgspec.json.Encoder(order="sorted")
_MAX_DEPTH: Final = 64


class CanonicalizationError(ProtocolError, ValueError):
    """A value cannot be written as RFC 8785 JSON (NaN, infinity, an integer beyond ±2^53, a non-JSON type). Still a
    ``ValueError`` for callers that validate with it."""


def _needs_reference(value: Any, depth: int = 0) -> bool:
    """True when ``value`` holds something msgspec would encode differently from RFC 8785 (see module doc).

    Always walks the whole value, so the depth limit and the refusals hold on the ``rfc8785`` path too.
    """
    if depth > _MAX_DEPTH:
        raise CanonicalizationError(f"JSON value nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return False
    if isinstance(value, int):
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return False
        raise CanonicalizationError(f"integer {value} is outside the range RFC 8785 can represent exactly")
    if isinstance(value, float):
        return True
    needs = False
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise CanonicalizationError(f"object key {k!r} is not a string")
            needs = _needs_reference(v, depth + 1) or needs or (
                not k.isascii() and any(ord(c) > 0xFFFF for c in k))
        return needs
    if isinstance(value, list | tuple):
        for v in value:
            needs = _needs_reference(v, depth + 1) or needs
        return needs
    raise CanonicalizationError(f"{type(value).__name__} is not a JSON type")


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 canonical UTF-8 encoding of a JSON value (dict, list, str, int, float, bool, None).

    Raises:
        CanonicalizationError: the value is not representable (NaN, infinity, big integer, non-JSON type).
    """
    if _needs_reference(value):
        try:
            return rfc8785.dumps(value)
        except (ValueError, TypeError) as exc:  # rfc8785.CanonicalizationError is a ValueError
            raise CanonicalizationError(f"cannot canonicalize JSON value: {exc}") from exc
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:  # e.g. a lone surrogate in a string
        raise CanonicalizationError(f"cannot canonicalize JSON value: {exc}") from exc
