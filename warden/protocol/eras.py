"""The two eras of MCP: versions, what each era puts on the wire, and which side may send which method.

Legacy = 2024-11-05 … 2025-11-25 (``initialize`` handshake, a session per connection). Modern = 2026-07-28
(``server/discover``, no handshake, ``_meta`` with version and client capabilities on every request, results that
carry ``resultType`` and, for cacheable ones, ``ttlMs`` and ``cacheScope``). warden speaks both on both faces.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from warden.errors import RemoteProtocolError
from warden.protocol.messages import INVALID_PARAMS

LEGACY_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS: Final = ("2026-07-28",)
LATEST_LEGACY: Final = LEGACY_VERSIONS[-1]
LATEST_MODERN: Final = MODERN_VERSIONS[-1]

META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"

LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class Era(enum.Enum):
    LEGACY = "legacy"
    MODERN = "modern"


# Methods by direction and era. A request outside its table is answered with -32601 and never forwarded.
CLIENT_REQUESTS: Final[Mapping[Era, frozenset[str]]] = {
    Era.LEGACY: frozenset({
        "initialize", "ping", "tools/list", "tools/call", "prompts/list", "prompts/get", "resources/list",
        "resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe",
        "completion/complete", "logging/setLevel", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
    }),
    Era.MODERN: frozenset({
        "server/discover", "tools/list", "tools/call", "prompts/list", "prompts/get", "resources/list",
        "resources/templates/list", "resources/read", "completion/complete", "subscriptions/listen",
        "tasks/get", "tasks/update", "tasks/cancel",
    }),
}
CLIENT_NOTIFICATIONS: Final[Mapping[Era, frozenset[str]]] = {
    Era.LEGACY: frozenset({
        "notifications/initialized", "notifications/cancelled", "notifications/progress",
        "notifications/roots/list_changed", "notifications/tasks/status",
    }),
    Era.MODERN: frozenset({"notifications/cancelled"}),
}
SERVER_REQUESTS: Final[Mapping[Era, frozenset[str]]] = {
    Era.LEGACY: frozenset({"ping", "roots/list", "sampling/createMessage", "elicitation/create"}),
    Era.MODERN: frozenset(),  # 2026 servers ask through MRTR input requests, never on the wire
}
SERVER_NOTIFICATIONS: Final[Mapping[Era, frozenset[str]]] = {
    Era.LEGACY: frozenset({
        "notifications/cancelled", "notifications/progress", "notifications/message",
        "notifications/resources/updated", "notifications/resources/list_changed",
        "notifications/tools/list_changed", "notifications/prompts/list_changed",
        "notifications/elicitation/complete", "notifications/tasks/status",
    }),
    Era.MODERN: frozenset({
        "notifications/cancelled", "notifications/progress", "notifications/message",
        "notifications/resources/updated", "notifications/resources/list_changed",
        "notifications/tools/list_changed", "notifications/prompts/list_changed",
        "notifications/subscriptions/acknowledged", "notifications/tasks",
    }),
}
INPUT_REQUEST_METHODS: Final = frozenset({"elicitation/create", "sampling/createMessage", "roots/list"})
"""Questions a server asks the client: wire requests in legacy, ``inputRequests`` entries in modern."""

MRTR_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
"""The only requests a modern server may answer with ``input_required``."""

CACHEABLE_METHODS: Final = frozenset({
    "server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read",
})
"""Results of these carry ``ttlMs`` and ``cacheScope`` in the modern era."""

LIST_METHODS: Final[Mapping[str, str]] = {
    "tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}
"""Paginated list methods and the result key holding their items."""

RESULT_TYPES: Final = frozenset({"complete", "input_required"})


def result_type(result: Mapping[str, Any], *, tasks_declared: bool = False) -> str:
    """The ``resultType`` of a modern result: absent means ``"complete"``; anything unknown is invalid.

    Raises:
        RemoteProtocolError: an unrecognised ``resultType`` (LC17), or ``"task"`` on a request that did not declare
            the tasks extension.
    """
    value = result.get("resultType", "complete")
    if value in RESULT_TYPES or (value == "task" and tasks_declared):
        return str(value)
    raise RemoteProtocolError(f"server answered with unrecognised resultType {value!r}", jsonrpc_code=-32603)


def request_meta(version: str, capabilities: Mapping[str, Any], client_info: Mapping[str, Any],
                 *, log_level: str | None = None) -> dict[str, Any]:
    """The reserved ``_meta`` keys a modern request carries (LC12, LC13, LC15, MS19)."""
    meta: dict[str, Any] = {
        META_PROTOCOL_VERSION: version,
        META_CLIENT_CAPABILITIES: dict(capabilities),
        META_CLIENT_INFO: dict(client_info),
    }
    if log_level is not None:
        meta[META_LOG_LEVEL] = log_level
    return meta


def read_request_meta(params: Mapping[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The protocol version and client capabilities a request's ``_meta`` claims, if any.

    Returns ``(None, None)`` for a request without modern ``_meta`` (a legacy host).

    Raises:
        RemoteProtocolError: (-32602) ``_meta`` is present with a version but malformed capabilities, or the
            reverse: the 2026 spec says such a request is malformed.
    """
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return None, None
    version = meta.get(META_PROTOCOL_VERSION)
    capabilities = meta.get(META_CLIENT_CAPABILITIES)
    if version is None and capabilities is None:
        return None, None
    if not isinstance(version, str) or not isinstance(capabilities, dict):
        raise RemoteProtocolError(
            f"_meta must carry both {META_PROTOCOL_VERSION} (a string) and {META_CLIENT_CAPABILITIES} (an object)",
            jsonrpc_code=INVALID_PARAMS)
    return version, capabilities


def negotiate_legacy(requested: object) -> str:
    """The version a legacy server answers ``initialize`` with: the requested one if spoken, else the latest."""
    return requested if isinstance(requested, str) and requested in LEGACY_VERSIONS else LATEST_LEGACY
