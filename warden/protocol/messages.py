"""JSON-RPC 2.0 messages as MCP uses them: parse a minimal envelope, keep the wire bytes, classify.

warden forwards what it does not need to understand untouched. Parsing therefore stops at the envelope: ``id``,
``params``, ``result`` and ``error`` are kept as the exact JSON text the peer sent (``msgspec.Raw``), and the
encoders splice raw text back in. What must be read is decoded once: checking a message means decoding its id and
params (a number no double holds is valid JSON syntax that no later decode could read), so :func:`parse_message`
keeps what that check decoded on the :class:`Request` or :class:`Notification` it returns
(:meth:`Request.decoded_params`, :meth:`Request.key`) instead of leaving every reader to decode the same bytes again.

Classification never raises on peer input: whatever bytes arrive, :func:`parse_message` returns one of
:class:`Request`, :class:`Notification`, :class:`Response`, :class:`ErrorResponse` or :class:`Invalid` (which
carries the JSON-RPC error code to answer with, and the id when one could be found).
"""

from __future__ import annotations

import itertools
import json
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Final, final

import msgspec

from warden.protocol.framing import OVERSIZED_PREFIX_BYTES

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
REQUEST_TIMEOUT: Final = -32001
"""Implementation-defined (the -32000..-32019 band): the upstream did not answer in time. The SDKs use it too."""
CONNECTION_CLOSED: Final = -32000
"""Implementation-defined: the upstream server went away while the request was in flight."""


@final
@dataclass(frozen=True, slots=True)
class Request:
    """A request. ``id`` and ``params`` are raw JSON text; ``params`` is None when absent.

    ``value`` and ``id_key`` are what :func:`parse_message` decoded of them while checking the message (None for a
    request built elsewhere): read them through :meth:`decoded_params` and :meth:`key`, which decode only when
    nothing was kept. The decoded params are the message's one copy: readers must not change them.
    """

    id: bytes
    method: str
    params: bytes | None
    raw: bytes
    value: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    id_key: tuple[str, object] | None = field(default=None, compare=False, repr=False)

    def decoded_params(self) -> dict[str, Any]:
        """The params as an object (``{}`` when absent), decoded once.

        Raises:
            msgspec.DecodeError: only for a request not made by :func:`parse_message` whose params do not decode.
        """
        return self.value if self.value is not None else decode_object(self.params)

    def key(self) -> tuple[str, object]:
        """:func:`id_key` of the decoded id: what tells this request's id from every other in flight.

        Raises:
            msgspec.DecodeError: only for a request not made by :func:`parse_message` whose id does not decode.
        """
        return self.id_key if self.id_key is not None else id_key(decode_json(self.id))


@final
@dataclass(frozen=True, slots=True)
class Notification:
    """A notification; ``value`` as on :class:`Request`."""

    method: str
    params: bytes | None
    raw: bytes
    value: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def decoded_params(self) -> dict[str, Any]:
        """As :meth:`Request.decoded_params`."""
        return self.value if self.value is not None else decode_object(self.params)


@final
@dataclass(frozen=True, slots=True)
class Response:
    """A success response. ``result`` is the raw JSON object text."""

    id: bytes
    result: bytes
    raw: bytes


@final
@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """An error response. ``error`` is the raw error object; ``code`` and ``message`` are decoded from it."""

    id: bytes | None
    code: int
    message: str
    error: bytes
    raw: bytes


@final
@dataclass(frozen=True, slots=True)
class Invalid:
    """Bytes that are not a valid message. Answer with ``code`` if ``id`` is known and it was a request."""

    code: int
    reason: str
    id: bytes | None
    is_request: bool
    raw: bytes


Message = Request | Notification | Response | ErrorResponse | Invalid


class _Envelope(msgspec.Struct):
    jsonrpc: Any = msgspec.UNSET
    id: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    method: Any = msgspec.UNSET
    params: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    result: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


class _ErrorObject(msgspec.Struct):
    code: int
    message: str
    data: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_decode_envelope = msgspec.json.Decoder(_Envelope).decode
_decode_error_object = msgspec.json.Decoder(_ErrorObject).decode


def _unparseable(reason: str, data: bytes) -> Invalid:
    """A parse error; the id is known only if the message's start is readable enough to show it."""
    id_raw, has_method = scan_prefix(data[:OVERSIZED_PREFIX_BYTES])
    return Invalid(PARSE_ERROR, reason, id_raw, has_method, data)


def _valid_id(raw: bytes) -> bool:
    # msgspec already checked the JSON syntax; MCP ids are strings or numbers, never null, bools or structures.
    first = raw[:1]
    return first == b'"' or first == b"-" or first.isdigit()


def _decoded(raw: bytes) -> tuple[Any, str | None]:
    """A raw ``id``/``params``/``result`` span the envelope decoder kept undecoded, decoded: ``(value, None)``, or
    ``(None, why)`` when warden cannot read it.

    The envelope decoder checks JSON syntax only; a number like ``1e400`` is valid JSON that no double holds, and
    would make every later decode of that span raise. Such a message is refused here, once, so no code path that
    reads it later meets the error; what this decodes is kept (ids and params) so no reader decodes it again.
    """
    try:
        return msgspec.json.decode(raw), None
    except (msgspec.DecodeError, RecursionError) as exc:
        return None, f"it holds a value warden cannot read ({exc})"


def _object(span: bytes, what: str, code: int, raw_id: bytes | None, is_request: bool,
            data: bytes) -> tuple[Any, Invalid | None]:
    """A ``params`` or ``result`` span decoded, or the :class:`Invalid` (with ``code``) that refuses the message:
    it is not an object, or :func:`_decoded` cannot read it."""
    if span[:1] != b"{":
        return None, Invalid(code, f"{what} must be an object", raw_id, is_request, data)
    value, problem = _decoded(span)
    if problem is not None:
        return None, Invalid(code, f"{what}: {problem}", raw_id, is_request, data)
    return value, None


#: The deepest a message may nest (objects and arrays, the envelope included). msgspec's own limit is the
#: interpreter's recursion limit less the frames already on the stack, so a message the framing read (near the top
#: of the stack) could fail to decode again deeper down, where warden shapes, screens and records it: a hostile peer
#: ended a face that way more than once. Refused here, once, far below any such depth; MCP's own messages (a tool's
#: schema, a structured result) nest a few dozen levels.
MAX_NESTING: Final = 256
_STEPS: Final = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_QUOTES_OR_BRACKETS: Final = bytes(range(256)).translate(None, b'"[]{}')


def nested_deeper_than(data: bytes, limit: int) -> bool:
    """Whether the valid JSON text ``data`` nests objects and arrays more than ``limit`` deep (brackets inside
    strings do not count). Text with no more opening brackets than ``limit`` is not looked at; other text costs a
    few passes in C and one over its brackets.

    How: escaped backslashes and quotes go first (outside strings valid JSON has no backslash; inside, each escape
    is a pair, so removing ``\\\\`` and then ``\\"`` from left to right leaves every unescaped quote and nothing
    else). Of the rest only quotes and brackets are kept, and two adjacent quotes are dropped (that changes no
    bracket's count of quotes before it, which says whether it lies in a string): every other piece between the
    quotes left lies outside the strings. Its brackets become steps of +1 and -1 (``2`` and ``0``, less one), whose
    running sum is the depth.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = unescaped.translate(None, _NOT_QUOTES_OR_BRACKETS).replace(b'""', b"")
    steps = b"".join(marks.split(b'"')[::2]).translate(_STEPS)
    return max(itertools.accumulate(map(operator.sub, steps, itertools.repeat(1))), default=0) > limit


def parse_message(data: bytes) -> Message:
    """Classify one framed message. Never raises on peer input; every raw span of a request, notification or
    response it returns decodes (an ``Invalid`` keeps its id as sent, to echo in the error), and a request's or
    notification's decoded id and params come with it."""
    try:
        env = _decode_envelope(data)
    except msgspec.ValidationError:
        stripped = data.lstrip()
        what = "a batch (JSON array)" if stripped[:1] == b"[" else "not a JSON object"
        return Invalid(INVALID_REQUEST, f"message is {what}; MCP sends one JSON object per message",
                       None, False, data)
    except msgspec.DecodeError as exc:
        return _unparseable(f"not valid JSON: {exc}", data)
    except RecursionError:  # msgspec's nesting limit (about a thousand levels)
        return Invalid(INVALID_REQUEST, "message is nested too deeply to read", None, False, data)
    if not data.isascii():
        # JSON text is UTF-8 (RFC 8259). msgspec does not check inside the raw spans it keeps, so check here,
        # once, rather than forward bytes a peer's parser may read differently.
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _unparseable(f"not valid UTF-8 at byte {exc.start}", data)

    unset = msgspec.UNSET
    method, error = env.method, env.error
    raw_id = None if env.id is unset else bytes(env.id)
    has_method = method is not unset
    if env.jsonrpc != "2.0":
        return Invalid(INVALID_REQUEST, 'missing or wrong "jsonrpc" (must be "2.0")', raw_id, has_method, data)
    id_value: object = None
    if raw_id is not None:
        if not _valid_id(raw_id):
            if raw_id == b"null" and not has_method and error is not unset:
                raw_id = None  # JSON-RPC: an error about an unreadable request carries id null
            else:
                return Invalid(INVALID_REQUEST, "id must be a string or a number", None, has_method, data)
        else:
            id_value, problem = _decoded(raw_id)
            if problem is not None:
                return Invalid(INVALID_REQUEST, f"id: {problem}", raw_id, has_method, data)

    if nested_deeper_than(data, MAX_NESTING):
        return Invalid(INVALID_REQUEST, f"message is nested deeper than {MAX_NESTING} levels", raw_id, has_method,
                       data)

    if has_method:
        if not isinstance(method, str) or not method:
            return Invalid(INVALID_REQUEST, "method must be a non-empty string", raw_id, True, data)
        if env.result is not unset or error is not unset:
            return Invalid(INVALID_REQUEST, "a request cannot carry result or error", raw_id, True, data)
        params: bytes | None = None
        value: dict[str, Any] | None = None
        if env.params is not unset:
            params = bytes(env.params)
            value, refusal = _object(params, "params", INVALID_PARAMS, raw_id, True, data)
            if refusal is not None:
                return refusal
        if raw_id is None:
            return Notification(method, params, data, value)
        return Request(raw_id, method, params, data, value, id_key(id_value))

    if env.result is not unset:
        if error is not unset:
            return Invalid(INVALID_REQUEST, "a response cannot carry both result and error", raw_id, False, data)
        if raw_id is None:
            return Invalid(INVALID_REQUEST, "a response needs an id", None, False, data)
        result = bytes(env.result)
        # Checked by decoding, and not kept: a result is forwarded as it came, and most are never read.
        _, refusal = _object(result, "result", INVALID_REQUEST, raw_id, False, data)
        return Response(raw_id, result, data) if refusal is None else refusal

    if error is not unset:
        error_raw = bytes(error)
        try:
            obj = _decode_error_object(error_raw)
        except (msgspec.DecodeError, RecursionError):
            return Invalid(INVALID_REQUEST, "error must be an object with integer code and string message",
                           raw_id, False, data)
        return ErrorResponse(raw_id, obj.code, obj.message, error_raw, data)

    return Invalid(INVALID_REQUEST, "neither a request, a notification nor a response", raw_id, False, data)


_ID_KINDS: Final = {str: "str", int: "int", float: "int"}


def id_key(value: object) -> tuple[str, object]:
    """A hashable key for a JSON-RPC id decoded to Python, so ``1`` and ``"1"`` stay apart (``1`` and ``1.0`` are
    the same number, and the same request, to every JSON parser that matters). Runs per message: the types a
    decoded id has are looked up, anything else takes the general rule."""
    kind = _ID_KINDS.get(type(value))
    if kind is not None:
        return kind, value
    return (type(value).__name__ if not isinstance(value, float) else "int",
            value if isinstance(value, str | int | float) else repr(value))


# --- encoding -----------------------------------------------------------------------------------------------------

_json_encode = msgspec.json.encode


def encode_request(id_raw: bytes, method: str, params: bytes | None) -> bytes:
    """A request with the given raw id and raw params text (spliced in untouched)."""
    head = b'{"jsonrpc":"2.0","id":' + id_raw + b',"method":' + _json_encode(method)
    return head + (b',"params":' + params + b"}" if params is not None else b"}")


def encode_notification(method: str, params: bytes | None) -> bytes:
    head = b'{"jsonrpc":"2.0","method":' + _json_encode(method)
    return head + (b',"params":' + params + b"}" if params is not None else b"}")


def encode_result(id_raw: bytes, result: bytes) -> bytes:
    """A success response carrying ``result`` (raw object text) for ``id_raw``."""
    return b'{"jsonrpc":"2.0","id":' + id_raw + b',"result":' + result + b"}"


def encode_error_object(error: bytes, id_raw: bytes | None) -> bytes:
    """An error response carrying an already-encoded error object (forwarded untouched)."""
    return b'{"jsonrpc":"2.0","id":' + (id_raw if id_raw is not None else b"null") + b',"error":' + error + b"}"


def error_object(code: int, message: str, data: Any = None) -> bytes:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return _json_encode(body)


def encode_error(id_raw: bytes | None, code: int, message: str, data: Any = None) -> bytes:
    return encode_error_object(error_object(code, message, data), id_raw)


def encode_json(value: Any) -> bytes:
    """Encode a value warden built itself (compact, key order kept)."""
    return _json_encode(value)


def decode_json(raw: bytes) -> Any:
    """Decode raw JSON text warden needs to read.

    Raises:
        msgspec.DecodeError: malformed input, or input nested too deeply to decode from here. (msgspec's depth
            limit is the interpreter's recursion limit less the frames already on the stack, so text the framing
            decoded may not decode deeper down: that is the peer's input refused, never a RecursionError.)
    """
    try:
        return msgspec.json.decode(raw)
    except RecursionError as exc:
        raise msgspec.DecodeError("JSON nested too deeply") from exc


def decode_object(raw: bytes | None) -> dict[str, Any]:
    """Decode raw ``params``/``result`` text into a dict (``{}`` when absent).

    Raises:
        TypeError: the text is not a JSON object. (Framed messages are checked already, so this means a caller
            passed something else.)
        msgspec.DecodeError: as :func:`decode_json`.
    """
    if raw is None:
        return {}
    value = decode_json(raw)
    if not isinstance(value, dict):
        raise TypeError("expected a JSON object")
    return value


# --- finding the id of an oversized message -----------------------------------------------------------------------

_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def scan_prefix(prefix: bytes) -> tuple[bytes | None, bool]:
    """Look through the start of a (too long) JSON object for its top-level ``id`` and ``method`` keys.

    Returns ``(id_raw, has_method)``: the id's raw text if a complete string or number value for the top-level key
    ``"id"`` lies within ``prefix``, and whether a top-level ``"method"`` key was seen. Stops, without raising, at
    the first thing it does not understand or at the end of the prefix.
    """
    found_id: bytes | None = None
    has_method = False
    pos = _WS.match(prefix, 0).end()  # type: ignore[union-attr]
    if prefix[pos:pos + 1] != b"{":
        return None, False
    pos += 1
    while pos < len(prefix):
        pos = _WS.match(prefix, pos).end()  # type: ignore[union-attr]
        key_match = _STRING.match(prefix, pos)
        if key_match is None:
            break
        try:
            key = json.loads(key_match.group())
        except ValueError:  # invalid UTF-8 or a lone surrogate inside the key
            break
        pos = _WS.match(prefix, key_match.end()).end()  # type: ignore[union-attr]
        if prefix[pos:pos + 1] != b":":
            break
        pos = _WS.match(prefix, pos + 1).end()  # type: ignore[union-attr]
        has_method = has_method or key == "method"
        end = _skip_value(prefix, pos)
        if end is None:
            break
        if key == "id":
            value = prefix[pos:end]
            found_id = value if value[:1] == b'"' or _NUMBER.fullmatch(value) else None
        pos = _WS.match(prefix, end).end()  # type: ignore[union-attr]
        if prefix[pos:pos + 1] != b",":
            break
        pos += 1
    return found_id, has_method


def _skip_value(buf: bytes, pos: int) -> int | None:
    """End offset of the JSON value starting at ``pos``, or None if it does not end inside ``buf``."""
    first = buf[pos:pos + 1]
    if first == b'"':
        match = _STRING.match(buf, pos)
        return match.end() if match else None
    if first in (b"{", b"["):
        depth = 0
        i = pos
        while i < len(buf):
            ch = buf[i:i + 1]
            if ch == b'"':
                match = _STRING.match(buf, i)
                if match is None:
                    return None
                i = match.end()
                continue
            if ch in (b"{", b"["):
                depth += 1
            elif ch in (b"}", b"]"):
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return None
    match = _NUMBER.match(buf, pos)
    if match:
        return match.end() if match.end() < len(buf) else None
    for literal in (b"true", b"false", b"null"):
        if buf.startswith(literal, pos):
            return pos + len(literal)
    return None
