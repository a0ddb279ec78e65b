"""The ``Mcp-*`` request headers of 2026-07-28 Streamable HTTP: value encoding, ``x-mcp-header``, validation.

A modern HTTP request mirrors parts of its JSON-RPC body into headers, so that load balancers and gateways can
route without parsing the body: ``MCP-Protocol-Version`` (the ``_meta`` version), ``Mcp-Method`` (``method``),
``Mcp-Name`` (``params.name`` / ``params.uri`` / ``params.taskId``) and one ``Mcp-Param-{Name}`` per tool
argument whose property schema carries ``"x-mcp-header": "{Name}"``. Because something may route or decide on a
header while the server executes the body, a server (and warden, which enforces policy) must refuse any request
whose headers and body disagree. This module is the one source of truth for both directions:

* :func:`encode_header_value` / :func:`decode_header_value`: the ``=?base64?…?=`` sentinel;
* :func:`check_tool_headers` / :func:`check_input_schema`: whether a tool's ``x-mcp-header`` annotations are
  valid, and which headers they designate (warden excludes an invalid tool on HTTP and flags it on stdio);
* :func:`param_headers` / :func:`request_headers`: what warden, as a client, puts on an upstream request;
* :func:`validate_request_headers`: what warden, as a server, answers a downstream request whose headers lie,
  as a :class:`Rejection` carrying the JSON-RPC error and its HTTP status.

Pure: no I/O, no clock, no environment. Header names compare case-insensitively, values case-sensitively.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, TypeAlias, final

from warden.errors import LocalProtocolError, RemoteProtocolError
from warden.protocol.eras import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSIONS
from warden.protocol.messages import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)

__all__ = [
    "HTTP_FIELD_VALUE",
    "HTTP_STATUS",
    "HTTP_TOKEN",
    "MAX_SAFE_INTEGER",
    "METHOD_HEADER",
    "NAME_FIELDS",
    "NAME_HEADER",
    "PARAM_HEADER_PREFIX",
    "PROTOCOL_VERSION_HEADER",
    "X_MCP_HEADER",
    "HeaderValueError",
    "ParamHeader",
    "Rejection",
    "ToolHeaders",
    "check_input_schema",
    "check_tool_headers",
    "decode_header_value",
    "encode_header_value",
    "param_headers",
    "request_headers",
    "unrecognized_param_headers",
    "validate_request_headers",
]

PROTOCOL_VERSION_HEADER: Final = "MCP-Protocol-Version"
METHOD_HEADER: Final = "Mcp-Method"
NAME_HEADER: Final = "Mcp-Name"
PARAM_HEADER_PREFIX: Final = "Mcp-Param-"
X_MCP_HEADER: Final = "x-mcp-header"

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""Mirrored integers lie within ±(2^53−1), so every implementation (JavaScript too) reads them exactly."""

NAME_FIELDS: Final[Mapping[str, str]] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    # tasks extension (SEP-2663): the task id routes like a name
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
"""Methods that carry ``Mcp-Name``, and the ``params`` field it mirrors."""

HTTP_STATUS: Final[Mapping[int, int]] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
"""The HTTP status a modern server sends with each JSON-RPC error code (streamable-http.mdx, basic/index)."""


_PREFIX: Final = "=?base64?"
_SUFFIX: Final = "?="
#: RFC 9110 §5.6.2 token: what a header name (and an x-mcp-header value, which becomes part of one) may be.
HTTP_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A plain (unencoded) value: printable ASCII and space; no tab, no control character, nothing beyond ASCII.
_PLAIN: Final = re.compile(r"[\x20-\x7e]*")
#: What a field value may hold once the whitespace around it is removed (RFC 9110 §5.5, ASCII only).
HTTP_FIELD_VALUE: Final = re.compile(r"[\t\x20-\x7e]*")
_FIELD_VALUE_BYTES: Final = re.compile(rb"[\t\x20-\x7e]*")
_DECIMAL: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_PRIMITIVE_TYPES: Final = frozenset({"string", "integer", "boolean"})
# Keywords whose values are instance data, not schemas: an "x-mcp-header" key inside them is only data.
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples", "example"})
_MAX_SHOWN: Final = 64
_MAX_POINTER_STEPS: Final = 12


class HeaderValueError(RemoteProtocolError):
    """A received ``Mcp-Name`` / ``Mcp-Param-*`` value is malformed (bad characters or a broken Base64 payload).

    The sender is at fault; a server answers HTTP 400 with ``-32020`` (HeaderMismatch).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, jsonrpc_code=HEADER_MISMATCH)


def _show(value: str) -> str:
    """A short quoted rendering of a peer-supplied string for messages (never all of a long value)."""
    if len(value) > _MAX_SHOWN:
        return repr(value[:_MAX_SHOWN]) + "…"
    return repr(value)


def _is_sentinel(value: str) -> bool:
    return len(value) >= len(_PREFIX) + len(_SUFFIX) and value.startswith(_PREFIX) and value.endswith(_SUFFIX)


# ----------------------------------------------------------------------------------------------- value encoding


def encode_header_value(value: str) -> str:
    """The header form of ``value``: itself when it is safe plain text, else ``=?base64?{Base64(UTF-8)}?=``.

    Plain means printable ASCII and space only, no leading or trailing space (HTTP parsers strip it), and not
    itself shaped like the sentinel. Everything else is encoded: non-ASCII, control characters (CR and LF too,
    so a value can never inject a header) and tabs anywhere. The spec prose allows an inner tab, but SEP-2243,
    the conformance suite and the SDKs encode it, and an encoded tab is never misread. ``""`` stays ``""``.

    Raises :class:`~warden.errors.LocalProtocolError` if ``value`` has no UTF-8 form (a lone surrogate).
    """
    if _PLAIN.fullmatch(value) and value == value.strip(" ") and not _is_sentinel(value):
        return value
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(
            f"cannot mirror {_show(value)} into a header: it is not valid Unicode text",
            jsonrpc_code=INVALID_PARAMS,
        ) from exc
    return _PREFIX + base64.b64encode(raw).decode("ascii") + _SUFFIX


def decode_header_value(value: str) -> str:
    """The text a received ``Mcp-Name`` / ``Mcp-Param-*`` value stands for.

    Only the exact lowercase markers make a sentinel: ``=?BASE64?…?=``, or a value missing either marker, is
    literal. A sentinel's payload must be canonical padded Base64 of valid UTF-8: anything looser would let two
    different header values stand for one body value. ``value`` is the field value with the whitespace around it
    already removed, as every HTTP parser does.

    Raises :class:`HeaderValueError` for characters no field value may hold (control characters other than tab,
    non-ASCII) and for a sentinel whose payload does not decode.
    """
    if not HTTP_FIELD_VALUE.fullmatch(value):
        raise HeaderValueError(f"header value {_show(value)} holds characters an HTTP field may not carry")
    if not _is_sentinel(value):
        return value
    payload = value[len(_PREFIX) : -len(_SUFFIX)]
    try:
        raw = base64.b64decode(payload, validate=True)
    except binascii.Error as exc:
        raise HeaderValueError(f"header value {_show(value)} is not valid Base64 inside its markers") from exc
    if base64.b64encode(raw).decode("ascii") != payload:
        raise HeaderValueError(f"header value {_show(value)} is not canonical Base64")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderValueError(f"header value {_show(value)} does not decode to UTF-8 text") from exc


# -------------------------------------------------------------------------------------- x-mcp-header annotations


@final
@dataclass(frozen=True, slots=True)
class ParamHeader:
    """One valid ``x-mcp-header`` annotation: the argument at ``path`` is mirrored into ``Mcp-Param-{name}``.

    ``path`` is the chain of ``properties`` keys from the schema root (``("region",)``, longer for a nested
    object); ``type`` is the property's declared JSON type: ``string``, ``integer`` or ``boolean``.
    """

    path: tuple[str, ...]
    name: str
    type: str

    @property
    def header(self) -> str:
        """The header's name: ``Mcp-Param-`` + the annotation (``Method`` gives ``Mcp-Param-Method``)."""
        return PARAM_HEADER_PREFIX + self.name


@final
@dataclass(frozen=True, slots=True)
class ToolHeaders:
    """The outcome of checking one tool definition's ``x-mcp-header`` annotations.

    ``problem`` is None for a valid definition, else the first reason it is invalid (for the warning that names
    the excluded or flagged tool). ``params`` lists a valid definition's designated headers; empty otherwise.
    """

    params: tuple[ParamHeader, ...]
    problem: str | None = None

    @property
    def valid(self) -> bool:
        return self.problem is None


def _pointer(steps: tuple[str, ...]) -> str:
    """An RFC 6901 JSON pointer for messages ("" is the root); only the last steps of a very deep one."""
    shown = "".join("/" + step.replace("~", "~0").replace("/", "~1") for step in steps[-_MAX_POINTER_STEPS:])
    return ("…" if len(steps) > _MAX_POINTER_STEPS else "") + shown


# A path as a linked list (parent, step), so that descending one level costs O(1) however deep the schema is.
_Link: TypeAlias = "tuple[_Link, str] | None"


def _steps(link: _Link) -> tuple[str, ...]:
    steps: list[str] = []
    while link is not None:
        link, step = link
        steps.append(step)
    return tuple(reversed(steps))


def check_input_schema(input_schema: object) -> ToolHeaders:
    """Check every ``x-mcp-header`` annotation in a tool's ``inputSchema`` (2026-07-28 server/tools.mdx).

    An annotation is valid only on a property reached from the root through ``properties`` keys alone; its value
    is a non-empty RFC 9110 token (no spaces, colons, non-ASCII or control characters); the property's ``type``
    is exactly ``string``, ``integer`` or ``boolean`` (``number``, ``object``, ``array``, ``null``, a missing
    type and a type array such as ``["string", "null"]`` are not); and no two values in the schema are equal
    ignoring case. An ``x-mcp-header`` key anywhere else makes the definition invalid: on the root, under
    ``items`` or another array keyword, ``oneOf``/``anyOf``/``allOf``/``not``, ``if``/``then``/``else``,
    ``$defs`` (what ``$ref`` points at) or an unknown keyword. Only instance data (``const``, ``enum``,
    ``default``, ``examples``) is not searched. ``$ref`` is never followed. The walk is iterative and linear in
    the size of the schema, so neither nesting depth nor breadth can overflow it or make it quadratic.
    """
    params: list[ParamHeader] = []
    seen: dict[str, str] = {}
    # (on a pure `properties` chain?, JSON-pointer path, node). On the chain, a property's name is the last
    # step of its pointer and the step before it is "properties", so the chain is recovered from the pointer.
    stack: list[tuple[bool, _Link, object]] = [(True, None, input_schema)]
    while stack:
        on_chain, where, node = stack.pop()
        if isinstance(node, list):
            stack.extend((False, (where, str(i)), item) for i, item in reversed(list(enumerate(node))))
            continue
        if not isinstance(node, dict):
            continue
        if X_MCP_HEADER in node:
            found = _check_annotation(node, on_chain, _steps(where), seen)
            if isinstance(found, str):
                return ToolHeaders(params=(), problem=found)
            params.append(found)
        children: list[tuple[bool, _Link, object]] = []
        for key, value in node.items():
            if key in _DATA_KEYWORDS or key == X_MCP_HEADER or not isinstance(value, dict | list):
                continue
            if key == "properties" and isinstance(value, dict):
                inner: _Link = (where, key)
                children.extend((on_chain, (inner, prop), sub) for prop, sub in value.items())
            else:
                children.append((False, (where, key), value))
        stack.extend(reversed(children))
    return ToolHeaders(params=tuple(params))


def _check_annotation(
    schema: Mapping[str, Any], on_chain: bool, where: tuple[str, ...], seen: dict[str, str]
) -> ParamHeader | str:
    """The :class:`ParamHeader` an annotated schema designates, or why its annotation is invalid."""
    at = _pointer(where)
    if not where:
        return "x-mcp-header on the schema root: only a property may carry it"
    if not on_chain:
        return f"x-mcp-header at {at} is not on a property reached through `properties` keys alone"
    name = schema[X_MCP_HEADER]
    if not isinstance(name, str):
        return f"x-mcp-header at {at} is a {type(name).__name__}, not a string"
    if not name:
        return f"x-mcp-header at {at} is empty"
    if not HTTP_TOKEN.fullmatch(name):
        return f"x-mcp-header {_show(name)} at {at} is not an HTTP token (letters, digits, !#$%&'*+-.^_`|~)"
    declared = schema.get("type")
    if not isinstance(declared, str) or declared not in _PRIMITIVE_TYPES:
        return (
            f"x-mcp-header {name!r} at {at} is on a property of type {declared!r}; "
            "only 'string', 'integer' or 'boolean' may be mirrored"
        )
    folded = name.lower()
    if folded in seen:
        return f"x-mcp-header {name!r} at {at} repeats {seen[folded]!r} (values must differ ignoring case)"
    seen[folded] = name
    return ParamHeader(path=where[1::2], name=name, type=declared)


def check_tool_headers(tool: Mapping[str, Any]) -> ToolHeaders:
    """Check a tool definition (one ``tools/list`` entry) by its ``inputSchema``: :func:`check_input_schema`.

    A tool without an ``inputSchema`` designates no headers. Over HTTP an invalid tool must be excluded from the
    tool list (the server's other tools stay usable); over stdio warden flags it.
    """
    return check_input_schema(tool.get("inputSchema"))


# ---------------------------------------------------------------------------------- client: building headers

_ABSENT: Final = object()


def _argument_at(arguments: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    """The argument at ``path``, or ``_ABSENT`` when a step is missing or not an object, or it is null."""
    node: Any = arguments
    for step in path:
        if not isinstance(node, Mapping) or step not in node:
            return _ABSENT
        node = node[step]
    return _ABSENT if node is None else node


def _integral(value: int | float) -> int | None:
    """``value`` as an int if it is a JSON integer (no fraction) within ±(2^53−1), else None."""
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None


def _render(value: Any) -> str | None:
    """The text a header carries for an argument: strings as they are, integers in decimal, ``true``/``false``.

    None for what cannot be mirrored: objects, arrays, numbers with a fraction, integers beyond ±(2^53−1).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        integral = _integral(value)
        return None if integral is None else str(integral)
    return None


def param_headers(tool: ToolHeaders, arguments: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The ``Mcp-Param-*`` headers of a ``tools/call`` of ``tool`` with ``arguments``, values encoded.

    One header per designated property whose argument is present and not null; an absent or null argument, or
    a path that runs into a non-object, gives no header.

    Raises :class:`~warden.errors.LocalProtocolError` (``-32602``) for an invalid ``tool`` (it must not be
    called over HTTP at all) and for an argument that cannot be mirrored: an object, an array, a number with a
    fraction, an integer beyond ±(2^53−1).
    """
    if tool.problem is not None:
        raise LocalProtocolError(
            f"the tool cannot be called over HTTP, its x-mcp-header annotations are invalid: {tool.problem}",
            jsonrpc_code=INVALID_PARAMS,
        )
    headers: list[tuple[str, str]] = []
    for param in tool.params:
        value = _argument_at(arguments, param.path)
        if value is _ABSENT:
            continue
        rendered = _render(value)
        if rendered is None:
            raise LocalProtocolError(
                f"argument {'.'.join(param.path)!r} is mirrored into {param.header}, but its value (a "
                f"{type(value).__name__}) is not a string, a boolean or an integer within ±(2^53−1)",
                jsonrpc_code=INVALID_PARAMS,
            )
        headers.append((param.header, encode_header_value(rendered)))
    return headers


def request_headers(
    method: str, params: Mapping[str, Any] | None, *, tool: ToolHeaders | None = None
) -> list[tuple[str, str]]:
    """Every ``Mcp-*`` header of a modern request: version, method, the name where it has one, tool params.

    ``MCP-Protocol-Version`` comes from the request's own ``_meta`` (never a constant). ``tool`` is the checked
    definition of the tool a ``tools/call`` names; leave it out for other methods. ``Accept``,
    ``Content-Type`` and credentials are the transport's business.

    Raises :class:`~warden.errors.LocalProtocolError` when the request has no ``_meta`` version, when a
    name-bearing method has no string name, and as :func:`param_headers` does.
    """
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, Mapping) else None
    if not isinstance(params, Mapping) or not isinstance(version, str):
        raise LocalProtocolError(f"{method} request has no _meta protocol version to mirror into a header")
    headers = [(PROTOCOL_VERSION_HEADER, version), (METHOD_HEADER, method)]
    field = NAME_FIELDS.get(method)
    if field is not None:
        name = params.get(field)
        if not isinstance(name, str):
            raise LocalProtocolError(f"{method} request has no string params.{field}", jsonrpc_code=INVALID_PARAMS)
        headers.append((NAME_HEADER, encode_header_value(name)))
    if method == "tools/call" and tool is not None:
        arguments = params.get("arguments")
        headers.extend(param_headers(tool, arguments if isinstance(arguments, Mapping) else None))
    return headers


# ------------------------------------------------------------------------------- server: validating headers


@final
@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a request is refused: the JSON-RPC error to answer with, and the HTTP status to send it under."""

    code: int
    message: str
    data: Any = None

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 400)


def _mismatch(message: str) -> Rejection:
    return Rejection(HEADER_MISMATCH, "Header mismatch: " + message)


def _fold(headers: Iterable[tuple[bytes, bytes]]) -> dict[bytes, list[bytes]]:
    folded: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        folded.setdefault(name.lower(), []).append(value)
    return folded


def _single(folded: Mapping[bytes, list[bytes]], name: str) -> str | Rejection | None:
    """The one value of header ``name``, whitespace around it removed, or None when it is absent.

    A header sent twice is refused (first-copy and last-copy readers would disagree), as is one holding bytes
    no field value may carry.
    """
    values = folded.get(name.lower().encode("ascii"))
    if values is None:
        return None
    if len(values) > 1:
        return _mismatch(f"{name} header appears {len(values)} times")
    raw = values[0].strip(b" \t")
    if not _FIELD_VALUE_BYTES.fullmatch(raw):
        return _mismatch(f"{name} header holds characters an HTTP field may not carry")
    return raw.decode("ascii")


def _decoded(folded: Mapping[bytes, list[bytes]], name: str) -> str | Rejection | None:
    value = _single(folded, name)
    if not isinstance(value, str):
        return value
    try:
        return decode_header_value(value)
    except HeaderValueError as exc:
        return _mismatch(f"{name}: {exc}")


def _repeats(sent: str | Rejection | None, header: str, body_value: str) -> Rejection | None:
    """None when ``header`` (as read by :func:`_single` or :func:`_decoded`) is present and repeats the body's
    value exactly; else the rejection."""
    if isinstance(sent, Rejection):
        return sent
    if sent is None:
        return _mismatch(f"{header} header is missing")
    if sent != body_value:
        return _mismatch(f"{header} header value {_show(sent)} does not match body value {_show(body_value)}")
    return None


def _param_mismatch(param: ParamHeader, value: Any, header: str) -> str | None:
    """Why a decoded ``Mcp-Param-*`` value does not stand for the body's ``value``; None when it does.

    Numbers compare numerically (``42.0`` equals ``42``), booleans as ``true``/``false``, strings exactly.
    """
    where = ".".join(param.path)
    if isinstance(value, bool | str):
        if header == _render(value):
            return None
        return f"{param.header} value {_show(header)} does not match argument {where!r}"
    if isinstance(value, int | float):
        integral = _integral(value)
        if integral is None:
            return f"argument {where!r} (mirrored into {param.header}) is not an integer within ±(2^53−1)"
        if _DECIMAL.fullmatch(header) and Decimal(header) == integral:
            return None
        return f"{param.header} value {_show(header)} does not equal argument {where!r}"
    return f"argument {where!r} (mirrored into {param.header}) is a {type(value).__name__}: no header form"


def _check_params(folded: Mapping[bytes, list[bytes]], tool: ToolHeaders, arguments: Any) -> Rejection | None:
    if arguments is not None and not isinstance(arguments, Mapping):
        return Rejection(INVALID_PARAMS, "params.arguments must be an object")
    for param in tool.params:
        value = _argument_at(arguments, param.path)
        header = _decoded(folded, param.header)
        if isinstance(header, Rejection):
            return header
        where = ".".join(param.path)
        if value is _ABSENT:
            if header is not None:
                return _mismatch(f"{param.header} header is present but argument {where!r} is absent or null")
            continue
        if header is None:
            return _mismatch(f"{param.header} header is missing but argument {where!r} is present")
        problem = _param_mismatch(param, value, header)
        if problem is not None:
            return _mismatch(problem)
    return None


def validate_request_headers(
    headers: Iterable[tuple[bytes, bytes]],
    method: str,
    params: Mapping[str, Any] | None,
    *,
    tool: ToolHeaders | None = None,
    supported_versions: Collection[str] = MODERN_VERSIONS,
) -> Rejection | None:
    """Check a modern request's headers against its body: None when it may proceed, else a :class:`Rejection`.

    ``headers`` are the raw (name, value) pairs as the ASGI server hands them over (a folded mapping would hide
    a repeated header); ``method`` and ``params`` come from the body; ``tool`` is the checked definition of the
    tool a ``tools/call`` names, as warden lists it (None when unknown: the caller refuses that call anyway).

    The checks, first failure wins (the order the 2026-07-28 SDKs and the conformance suite use):

    1. ``params._meta`` holds the protocol version (a string) and client capabilities (an object), else
       ``-32602``;
    2. ``MCP-Protocol-Version`` equals the ``_meta`` version, ``Mcp-Method`` equals ``method`` and, for a
       name-bearing method, ``Mcp-Name`` (decoded) equals the body's name, uri or taskId, each sent once and
       free of bad characters, else ``-32020``;
    3. for ``tools/call``, each designated ``Mcp-Param-*`` header is present exactly when its argument is
       present and not null, decodes, and equals the argument (integers numerically), else ``-32020``. Headers
       the tool does not designate are ignored here and forwarded (:func:`unrecognized_param_headers`);
    4. the version is one warden serves, else ``-32022`` with ``data = {"supported", "requested"}``.

    Each of these maps to HTTP 400 (:attr:`Rejection.http_status`). Whether the method exists (404 with
    ``-32601``) and whether the client declared a capability it needs (``-32021``) are the router's to decide.
    """
    # ``params`` is typed as a mapping, but it comes from a peer's body: by-position params (a list) are refused too.
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(params, Mapping) or not isinstance(meta, Mapping):
        return Rejection(INVALID_PARAMS, "params._meta is required on every 2026-07-28 request")
    version = meta.get(META_PROTOCOL_VERSION)
    if not isinstance(version, str):
        return Rejection(INVALID_PARAMS, f"params._meta[{META_PROTOCOL_VERSION!r}] must be a string")
    if not isinstance(meta.get(META_CLIENT_CAPABILITIES), Mapping):
        return Rejection(INVALID_PARAMS, f"params._meta[{META_CLIENT_CAPABILITIES!r}] must be an object")

    folded = _fold(headers)
    rejected = (_repeats(_single(folded, PROTOCOL_VERSION_HEADER), PROTOCOL_VERSION_HEADER, version)
                or _repeats(_single(folded, METHOD_HEADER), METHOD_HEADER, method))
    if rejected is not None:
        return rejected

    field = NAME_FIELDS.get(method)
    if field is not None:
        name = params.get(field)
        if not isinstance(name, str):
            return Rejection(INVALID_PARAMS, f"params.{field} must be a string")
        rejected = _repeats(_decoded(folded, NAME_HEADER), NAME_HEADER, name)
        if rejected is not None:
            return rejected
        if method == "tools/call" and tool is not None and tool.valid:
            rejected = _check_params(folded, tool, params.get("arguments"))
            if rejected is not None:
                return rejected

    if version not in supported_versions:
        return Rejection(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(supported_versions), "requested": version},
        )
    return None


def unrecognized_param_headers(
    headers: Iterable[tuple[bytes, bytes]], tool: ToolHeaders | None
) -> list[tuple[bytes, bytes]]:
    """The ``Mcp-Param-*`` headers of a request that ``tool`` does not designate: raw, in order.

    An intermediary forwards these untouched and otherwise ignores them (2026-07-28 streamable-http.mdx, after
    RFC 9110); the headers ``tool`` designates are rebuilt from the body instead of being copied.
    """
    known = {param.header.lower().encode("ascii") for param in tool.params} if tool is not None else set()
    prefix = PARAM_HEADER_PREFIX.lower().encode("ascii")
    return [(name, value) for name, value in headers if name.lower().startswith(prefix) and name.lower() not in known]
