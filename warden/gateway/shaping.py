"""Reshaping results and capabilities between eras. Pure functions over decoded JSON (and, where a result passes
byte for byte, over its raw text).

A legacy host must not see modern-only fields (``resultType``, ``ttlMs``, ``cacheScope``, the server-info and
subscription ``_meta`` keys); a modern host must get them (absent ``resultType`` means complete, but warden states
it, and cacheable results always carry freshness fields — a result warden cannot vouch for is ``ttlMs: 0`` and
``cacheScope: "private"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from warden.errors import RemoteProtocolError
from warden.gateway.tasks import presented
from warden.protocol.eras import (
    CACHEABLE_METHODS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    Era,
    result_type,
)
from warden.protocol.messages import INTERNAL_ERROR, decode_object, encode_json
from warden.protocol.probe import shown_server_info

_MODERN_RESULT_KEYS: Final = ("resultType", "ttlMs", "cacheScope")
_MODERN_RESULT_META: Final = (META_SERVER_INFO, META_SUBSCRIPTION_ID)
#: The ``serverInfo`` fields a host fetches or opens, as they appear in JSON text: a result holding one is read.
_URL_FIELDS: Final = (b'"icons"', b'"websiteUrl"')
_SERVER_INFO_KEY: Final = b'"' + META_SERVER_INFO.encode() + b'"'
_HOST_META: Final = (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, "progressToken")

SERVER_FEATURES: Final = ("tools", "prompts", "resources", "completions", "logging")
"""Server capabilities warden passes on as they are. Tasks pass only where host and server speak the same form
(:func:`warden.gateway.tasks.presented`); other extensions and ``experimental`` are withheld: warden does not
forward what it cannot check."""

CLIENT_FEATURES: Final = ("roots", "sampling", "elicitation")
"""Client capabilities warden can route from a server to its host."""


def strip_host_meta(params: Mapping[str, Any]) -> dict[str, Any]:
    """A host request's params minus the ``_meta`` keys that describe the host's hop (warden sets its own)."""
    out = dict(params)
    meta = out.get("_meta")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if k not in _HOST_META}
        if kept:
            out["_meta"] = kept
        else:
            del out["_meta"]
    return out


def to_legacy_result(result: dict[str, Any]) -> dict[str, Any]:
    """Drop modern-only fields from a result bound for a legacy host."""
    for key in _MODERN_RESULT_KEYS:
        result.pop(key, None)
    meta = result.get("_meta")
    if isinstance(meta, dict):
        for key in _MODERN_RESULT_META:
            meta.pop(key, None)
        if not meta:
            del result["_meta"]
    return result


class _ResultType(msgspec.Struct):
    resultType: str | None = None


_peek_result_type = msgspec.json.Decoder(_ResultType).decode


def result_kind(raw: bytes, *, tasks: bool = False) -> tuple[str, bool]:
    """A 2026 server's result's type (absent means complete, LC16; unknown is invalid, LC17; ``"task"`` only on a
    request that declared the tasks extension, ``tasks``) and whether it was stated, read without decoding the
    rest of the result.

    Raises:
        RemoteProtocolError: the result's ``resultType`` is not a string, or not one warden knows.
    """
    try:
        stated = _peek_result_type(raw).resultType
    except msgspec.DecodeError as exc:
        raise RemoteProtocolError("the server's resultType is not a string", jsonrpc_code=INTERNAL_ERROR) from exc
    return result_type({} if stated is None else {"resultType": stated}, tasks_declared=tasks), stated is not None


def state_complete(raw: bytes) -> bytes:
    """A modern result that left ``resultType`` out means complete (LC16); a 2026 host expects it stated. The raw
    object text is spliced, not re-encoded, so everything else passes byte for byte."""
    body = raw[1:].lstrip()
    return b'{"resultType":"complete"' + (b"," + body if body[:1] != b"}" else b"}")


def cache_scope(private: bool, principal: str | None) -> str:
    """The ``cacheScope`` of a cacheable result warden answers a 2026 host: ``"private"`` when its source said so,
    and whenever it is answered to an authenticated ``principal``: what warden shows or lets through is decided per
    principal (policy, approvals), so what one was told is no other's to share (PX21, SEC06)."""
    return "private" if private or principal is not None else "public"


def passed_complete(raw: bytes, *, stated: bool, method: str, principal: str | None) -> bytes:
    """A 2026 server's complete result (raw) as warden passes it to a 2026 host of ``principal``: its
    ``resultType`` stated (:func:`state_complete`), the server's ``serverInfo`` in its ``_meta`` cut to what hosts
    are told of it (:func:`~warden.protocol.probe.shown_server_info`: no URL), and, for a cacheable result answered
    to a principal, its ``cacheScope`` per :func:`cache_scope`. Read once, and only when one of the last two may
    change it (a URL field is looked for in C first); otherwise byte for byte.

    Raises:
        RemoteProtocolError: the result must be changed and cannot be read here (nested too deeply): it is not
            passed on, since it would say it may be shared, or carry a URL a host would fetch.
    """
    passed = raw if stated else state_complete(raw)
    rescope = principal is not None and method in CACHEABLE_METHODS
    if not rescope and not (_SERVER_INFO_KEY in passed and any(key in passed for key in _URL_FIELDS)):
        return passed
    try:
        result = decode_object(passed)
    except msgspec.DecodeError as exc:
        raise RemoteProtocolError(f"the server's {method} result cannot be read here (nested too deeply)",
                                  jsonrpc_code=INTERNAL_ERROR) from exc
    meta = result.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    if isinstance(meta, dict) and isinstance(info, dict):
        meta[META_SERVER_INFO] = shown_server_info(info, fallback_name=str(info.get("name", "")))
    if rescope:
        result["cacheScope"] = cache_scope(result.get("cacheScope") != "public", principal)
    return encode_json(result)


def to_modern_result(result: dict[str, Any], method: str, server_info: Mapping[str, Any] | None) -> dict[str, Any]:
    """Add what a modern host expects to a legacy server's result."""
    result["resultType"] = "complete"
    if method in CACHEABLE_METHODS:
        # a 2025-11-25 server has no say in either (warden cannot vouch for its result): what it says is not carried
        result["ttlMs"] = 0
        result["cacheScope"] = "private"
    if server_info is not None:
        meta = result.setdefault("_meta", {})
        if isinstance(meta, dict):
            meta.setdefault(META_SERVER_INFO, dict(server_info))
    return result


def present_capabilities(capabilities: Mapping[str, Any], *, upstream_era: Era, host_era: Era,
                         upstream_version: str | None = None, host_version: str | None = None) -> dict[str, Any]:
    """The server capabilities warden shows its host: the upstream's, limited to what warden forwards (tasks only
    at matching forms and versions: ``upstream_version`` and ``host_version`` are the negotiated ones).

    Change signals cross eras through warden (its own ``subscriptions/listen`` on a 2026 server, the legacy
    session's notifications for a 2026 host's listen); per-resource subscriptions cross only from a legacy server
    to a 2026 host, so ``resources.subscribe`` is withheld from a legacy host in front of a 2026 server.
    """
    out: dict[str, Any] = {}
    for key in SERVER_FEATURES:
        value = capabilities.get(key)
        if not isinstance(value, dict):
            continue
        value = dict(value)
        if upstream_era is Era.MODERN and host_era is Era.LEGACY:
            value.pop("subscribe", None)
        out[key] = value
    tasks = presented(capabilities, upstream_era=upstream_era, upstream_version=upstream_version,
                      host_era=host_era, host_version=host_version)
    if tasks is not None:
        out[tasks[0]] = tasks[1]
    return out


def routable_client_capabilities(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a host's client capabilities warden can honour by forwarding questions to that host."""
    return {k: capabilities[k] for k in CLIENT_FEATURES if isinstance(capabilities.get(k), dict)}
