"""One host connected to one upstream server: warden's server face.

:class:`HostSession` reads the host's messages, answers what warden answers itself (``initialize``,
``server/discover``, ``ping``), forwards the rest to the :class:`~warden.upstream.connection.Upstream`, and reshapes
results when host and server are of different eras. It is also the upstream's :class:`UpstreamHandler`: server
notifications flow to the host, and server questions (sampling, elicitation, roots) reach the host only if it
declared that exact capability — otherwise the server gets an error at once, never silence.

Ids: every host request keeps its own id on the host side; the upstream sees warden's ids; questions warden asks
the host carry ids of the form ``"warden-N"``. A response to an id warden did not issue is dropped and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, final

import msgspec
import trio

from warden.errors import PolicyError, RemoteProtocolError, UpstreamError, UpstreamTimeout, WardenError
from warden.gateway.questions import check_question, scope_sampling
from warden.gateway.shaping import (
    present_capabilities,
    routable_client_capabilities,
    strip_host_meta,
    to_legacy_result,
    to_modern_result,
)
from warden.protocol.eras import (
    CLIENT_REQUESTS,
    INPUT_REQUEST_METHODS,
    LIST_METHODS,
    LOG_LEVELS,
    META_LOG_LEVEL,
    META_SERVER_INFO,
    MODERN_VERSIONS,
    SERVER_NOTIFICATIONS,
    Era,
    negotiate_legacy,
    read_request_meta,
    result_type,
)
from warden.protocol.framing import Oversized
from warden.protocol.messages import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    Response,
    decode_json,
    decode_object,
    encode_error,
    encode_error_object,
    encode_json,
    encode_notification,
    encode_request,
    encode_result,
    scan_prefix,
)
from warden.transport.channel import MessageChannel
from warden.upstream.connection import Reply, ServerDescription, Upstream

log = logging.getLogger(__name__)

MAX_PAGES: Final = 1000
"""A list longer than this many pages is refused rather than followed forever."""
MAX_INPUT_ROUNDS: Final = 16
"""How many input_required rounds warden relays for one request before giving up."""


class _ResultType(msgspec.Struct):
    resultType: str = "complete"


_peek_result_type = msgspec.json.Decoder(_ResultType).decode


@final
@dataclass(slots=True)
class _LegacyHost:
    version: str
    capabilities: dict[str, Any]
    client_info: Any
    log_level: str | None = None
    initialized: bool = False


@final
@dataclass(frozen=True, slots=True)
class _Context:
    """What one host request declared: its era, version, capabilities, requested log level, progress token."""

    era: Era
    version: str
    capabilities: Mapping[str, Any]
    log_level: str | None
    progress_token: Any = None


@final
@dataclass(slots=True)
class _Question:
    event: trio.Event = field(default_factory=trio.Event)
    reply: Reply | None = None


def _id_key(value: object) -> tuple[str, object]:
    return (type(value).__name__, value if isinstance(value, str | int | float) else repr(value))


def _rpc_error(id_raw: bytes, exc: WardenError) -> bytes:
    if isinstance(exc, RemoteProtocolError):
        return encode_error(id_raw, exc.jsonrpc_code, exc.message)
    if isinstance(exc, UpstreamTimeout):
        return encode_error(id_raw, REQUEST_TIMEOUT, exc.message)
    if isinstance(exc, PolicyError):
        return encode_error(id_raw, INVALID_PARAMS, exc.message, {"hint": exc.hint} if exc.hint else None)
    code = CONNECTION_CLOSED if isinstance(exc, UpstreamError) else INTERNAL_ERROR
    return encode_error(id_raw, code, exc.message, {"hint": exc.hint} if exc.hint else None)


@final
class HostSession:
    """Serve one host over ``channel`` in front of ``upstream``. Run :meth:`serve`; it returns when the host leaves.

    The session must be the upstream's handler (``Upstream(handler=session, ...)``); construct the session first
    with :meth:`bind` to break the cycle.
    """

    def __init__(self, channel: MessageChannel, *, name: str, question_timeout: float = 600.0) -> None:
        self._channel = channel
        self._name = name
        self._upstream: Upstream | None = None
        self._legacy: _LegacyHost | None = None
        self._tasks: dict[tuple[str, object], trio.CancelScope] = {}
        self._questions: dict[bytes, _Question] = {}
        self._next_question = 0
        self._question_timeout = question_timeout
        self._nursery: trio.Nursery | None = None

    def bind(self, upstream: Upstream) -> None:
        self._upstream = upstream

    @property
    def upstream(self) -> Upstream:
        assert self._upstream is not None, "HostSession.bind() was not called"
        return self._upstream

    # -- the host's messages ------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Read the host until it closes its side; then cancel whatever it still had in flight."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                batch = await self._channel.receive_batch()
                if not batch:
                    break
                for message in batch:
                    if isinstance(message, Request):
                        self._start_request(message, nursery)
                    elif isinstance(message, Notification):
                        await self._on_notification(message)
                    elif isinstance(message, Response):
                        self._answer_question(message.id, Reply(result=message.result))
                    elif isinstance(message, ErrorResponse):
                        if message.id is not None:
                            self._answer_question(message.id, Reply(error=message.error, code=message.code,
                                                                    message=message.message))
                    else:
                        await self._on_invalid(message)
            nursery.cancel_scope.cancel()

    def _start_request(self, request: Request, nursery: trio.Nursery) -> None:
        key = _id_key(decode_json(request.id))
        if key in self._tasks:
            nursery.start_soon(self._send, encode_error(request.id, INVALID_REQUEST, "request id already in use"))
            return
        if request.method == "initialize":
            refused = self._accept_initialize(request)
            if refused is not None:
                nursery.start_soon(self._send, refused)
                return
        scope = trio.CancelScope()
        self._tasks[key] = scope
        nursery.start_soon(self._run_request, request, key, scope)

    async def _run_request(self, request: Request, key: tuple[str, object], scope: trio.CancelScope) -> None:
        out: bytes | None = None
        with scope:
            try:
                out = await self._dispatch(request)
            except WardenError as exc:
                out = _rpc_error(request.id, exc)
            finally:
                self._tasks.pop(key, None)
        if out is not None and not scope.cancelled_caught:
            await self._send(out)
        # A request the host cancelled gets no response.

    async def _on_notification(self, note: Notification) -> None:
        if note.method == "notifications/cancelled":
            params = decode_object(note.params)
            scope = self._tasks.get(_id_key(params.get("requestId")))
            if scope is not None:
                scope.cancel()  # PX19: the upstream request is cancelled as its task unwinds
        elif note.method == "notifications/initialized":
            if self._legacy is not None:
                self._legacy.initialized = True
        elif note.method == "notifications/roots/list_changed":
            if self._legacy is not None and self.upstream.description is not None \
                    and self.upstream.description.era is Era.LEGACY:
                await self.upstream.notify(note.method)
        else:
            log.debug("host notification %s not forwarded", note.method)

    async def _on_invalid(self, message: Invalid | Oversized) -> None:
        if isinstance(message, Oversized):
            id_raw, is_request = scan_prefix(message.prefix)
            code = INVALID_REQUEST
            reason = f"message of {message.size}+ bytes exceeds the {self._channel.max_message_size}-byte limit"
        else:
            id_raw, is_request, code, reason = message.id, message.is_request, message.code, message.reason
        log.warning("invalid message from the host: %s", reason)
        if id_raw is not None and is_request:
            await self._send(encode_error(id_raw, code, reason))

    async def _send(self, message: bytes) -> None:
        try:
            await self._channel.send(message)
        except trio.ClosedResourceError:
            log.debug("host went away before a message could be sent")

    # -- dispatch -----------------------------------------------------------------------------------------------

    async def _dispatch(self, request: Request) -> bytes:
        method = request.method
        if method == "initialize":
            return encode_result(request.id, await self._initialize())
        params = decode_object(request.params)
        version, capabilities = read_request_meta(params)
        if version is not None:
            assert capabilities is not None
            if version not in MODERN_VERSIONS:
                return encode_error(request.id, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                                    {"supported": list(MODERN_VERSIONS), "requested": version})
            meta = params["_meta"]
            level = meta.get(META_LOG_LEVEL)
            if level is not None and level not in LOG_LEVELS:
                return encode_error(request.id, INVALID_PARAMS, f"unknown log level {level!r}")
            ctx = _Context(Era.MODERN, version, capabilities, level, meta.get("progressToken"))
            self.upstream.set_legacy_capabilities({})
        elif self._legacy is not None:
            meta = params.get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            ctx = _Context(Era.LEGACY, self._legacy.version, self._legacy.capabilities, self._legacy.log_level, token)
        else:
            return encode_error(request.id, INVALID_PARAMS,
                                "send initialize first, or carry the 2026-07-28 _meta (protocolVersion and "
                                "clientCapabilities) on every request")
        if method not in CLIENT_REQUESTS[ctx.era]:
            return encode_error(request.id, METHOD_NOT_FOUND, f"Method not found: {method}")
        if method == "ping":
            return encode_result(request.id, b"{}")
        if method == "server/discover":
            return encode_result(request.id, encode_json(await self._discover()))
        if method in LIST_METHODS:
            return await self._list(request, ctx, params)
        if method == "logging/setLevel":
            return await self._set_level(request, params)
        if method in ("resources/subscribe", "resources/unsubscribe", "subscriptions/listen") \
                or method.startswith("tasks/"):
            description = await self.upstream.wait_connected()
            if description.era is not ctx.era or method.startswith("tasks/"):
                return encode_error(request.id, METHOD_NOT_FOUND, f"warden does not carry {method} to this server")
        return await self._forward(request, ctx, params)

    def _accept_initialize(self, request: Request) -> bytes | None:
        """Take the legacy handshake's state at once, in the reader, so requests pipelined behind ``initialize``
        already see a legacy host. Returns an error to send instead, if the handshake is refused."""
        if self._legacy is not None:
            return encode_error(request.id, INVALID_REQUEST, "initialize was already received")
        params = decode_object(request.params)
        capabilities = params.get("capabilities")
        self._legacy = _LegacyHost(negotiate_legacy(params.get("protocolVersion")),
                                   capabilities if isinstance(capabilities, dict) else {}, params.get("clientInfo"))
        self.upstream.set_legacy_capabilities(routable_client_capabilities(self._legacy.capabilities))
        return None

    async def _initialize(self) -> bytes:
        assert self._legacy is not None
        description = await self.upstream.wait_connected()
        result: dict[str, Any] = {
            "protocolVersion": self._legacy.version,
            "capabilities": present_capabilities(description.capabilities, upstream_era=description.era,
                                                 host_era=Era.LEGACY),
            "serverInfo": dict(description.server_info),
        }
        if description.instructions is not None:
            result["instructions"] = description.instructions
        return encode_json(result)

    async def _discover(self) -> dict[str, Any]:
        description = await self.upstream.wait_connected()
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": list(MODERN_VERSIONS),
            "capabilities": present_capabilities(description.capabilities, upstream_era=description.era,
                                                 host_era=Era.MODERN),
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {META_SERVER_INFO: dict(description.server_info)},
        }
        if description.instructions is not None:
            result["instructions"] = description.instructions
        return result

    async def _set_level(self, request: Request, params: dict[str, Any]) -> bytes:
        assert self._legacy is not None
        level = params.get("level")
        if level not in LOG_LEVELS:
            return encode_error(request.id, INVALID_PARAMS, f"unknown log level {level!r}")
        description = await self.upstream.wait_connected()
        if description.era is Era.LEGACY:
            return await self._forward(request, _Context(Era.LEGACY, self._legacy.version, {}, None), params)
        self._legacy.log_level = str(level)  # modern servers take the level per request (MS19)
        return encode_result(request.id, b"{}")

    # -- forwarding ---------------------------------------------------------------------------------------------

    async def _call_upstream(self, method: str, params: Mapping[str, Any], ctx: _Context) -> Reply:
        async def progress(update: dict[str, Any]) -> None:
            if ctx.progress_token is None:
                return
            forwarded = dict(update)
            forwarded["progressToken"] = ctx.progress_token
            await self._send(encode_notification("notifications/progress", encode_json(forwarded)))

        return await self.upstream.request(
            method, params, capabilities=routable_client_capabilities(ctx.capabilities), log_level=ctx.log_level,
            on_progress=progress)

    async def _forward(self, request: Request, ctx: _Context, params: dict[str, Any]) -> bytes:
        description = await self.upstream.wait_connected()
        forwarded = strip_host_meta(params)
        reply = await self._call_upstream(request.method, forwarded, ctx)
        for _ in range(MAX_INPUT_ROUNDS):
            if not reply.ok:
                assert reply.error is not None
                return encode_error_object(reply.error, request.id)
            assert reply.result is not None
            if description.era is ctx.era and ctx.era is Era.LEGACY:
                return encode_result(request.id, reply.result)
            if description.era is Era.MODERN:
                kind = self._result_type(reply.result)
                if ctx.era is Era.MODERN:
                    return encode_result(request.id, reply.result)
                if kind == "input_required":
                    reply = await self._relay_input_required(request.method, forwarded, ctx, reply.result_dict())
                    continue
                return encode_result(request.id, encode_json(to_legacy_result(reply.result_dict())))
            return encode_result(request.id, encode_json(
                to_modern_result(reply.result_dict(), request.method, description.server_info)))
        return encode_error(request.id, INTERNAL_ERROR,
                            f"the server asked for input more than {MAX_INPUT_ROUNDS} times")

    def _result_type(self, raw: bytes) -> str:
        try:
            return result_type({"resultType": _peek_result_type(raw).resultType})
        except msgspec.DecodeError as exc:
            raise RemoteProtocolError("the server's resultType is not a string", jsonrpc_code=INTERNAL_ERROR) from exc

    async def _relay_input_required(self, method: str, params: dict[str, Any], ctx: _Context,
                                    result: dict[str, Any]) -> Reply:
        """PX08: a modern server asked for input and the host is legacy: ask each input request on the wire, then
        retry upstream with the answers and the server's own ``requestState``, byte for byte (MS36–MS40)."""
        requests = result.get("inputRequests") or {}
        if not isinstance(requests, dict):
            raise RemoteProtocolError("inputRequests must be an object", jsonrpc_code=INTERNAL_ERROR)
        responses: dict[str, Any] = {}
        for key, question in requests.items():
            if not isinstance(question, dict) or question.get("method") not in INPUT_REQUEST_METHODS:
                raise RemoteProtocolError(f"input request {key!r} is not a question warden can ask",
                                          jsonrpc_code=INTERNAL_ERROR)
            answer = await self.ask_host(str(question["method"]), question.get("params") or {}, ctx.capabilities)
            if not answer.ok:
                raise RemoteProtocolError(f"the client could not answer the server's {question['method']}: "
                                          f"{answer.message}", jsonrpc_code=answer.code or INTERNAL_ERROR)
            responses[key] = answer.result_dict()
        retry = dict(params)
        retry.pop("inputResponses", None)
        retry.pop("requestState", None)
        if responses:
            retry["inputResponses"] = responses
        if "requestState" in result:
            retry["requestState"] = result["requestState"]
        return await self._call_upstream(method, retry, ctx)

    async def _list(self, request: Request, ctx: _Context, params: dict[str, Any]) -> bytes:
        """Follow every page upstream (MS14, MS15) and answer with one complete list."""
        if params.get("cursor") is not None:
            return encode_error(request.id, INVALID_PARAMS, "invalid cursor (warden returns complete lists)")
        description = await self.upstream.wait_connected()
        key = LIST_METHODS[request.method]
        forwarded = strip_host_meta(params)
        items: list[Any] = []
        ttl: float | None = None
        private = description.era is Era.LEGACY
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page_params = dict(forwarded)
            if cursor is not None:
                page_params["cursor"] = cursor
            reply = await self._call_upstream(request.method, page_params, ctx)
            if not reply.ok:
                assert reply.error is not None
                return encode_error_object(reply.error, request.id)
            page = reply.result_dict()
            if description.era is Era.MODERN:
                result_type(page)
                page_ttl = page.get("ttlMs")
                page_ttl = page_ttl if isinstance(page_ttl, int) and page_ttl > 0 else 0
                ttl = page_ttl if ttl is None else min(ttl, page_ttl)
                private = private or page.get("cacheScope") != "public"
            page_items = page.get(key, [])
            if not isinstance(page_items, list):
                raise RemoteProtocolError(f"{request.method}: {key} is not a list", jsonrpc_code=INTERNAL_ERROR)
            items.extend(page_items)
            next_cursor = page.get("nextCursor")
            if next_cursor is None or (next_cursor == "" and description.era is Era.LEGACY):
                break
            if not isinstance(next_cursor, str) or next_cursor == cursor:
                raise RemoteProtocolError(f"{request.method}: the server's nextCursor does not advance",
                                          jsonrpc_code=INTERNAL_ERROR)
            cursor = next_cursor
        else:
            return encode_error(request.id, INTERNAL_ERROR, f"{request.method} has more than {MAX_PAGES} pages")
        result: dict[str, Any] = {key: items}
        if ctx.era is Era.MODERN:
            result["resultType"] = "complete"
            result["ttlMs"] = int(ttl or 0)
            result["cacheScope"] = "private" if private else "public"
        return encode_result(request.id, encode_json(result))

    # -- the upstream's traffic (UpstreamHandler) ---------------------------------------------------------------

    async def on_notification(self, method: str, params: bytes | None) -> None:
        host_era = Era.LEGACY if self._legacy is not None else Era.MODERN
        if method not in SERVER_NOTIFICATIONS[host_era]:
            log.debug("server notification %s not forwarded to a %s host", method, host_era.value)
            return
        await self._send(encode_notification(method, params))

    async def on_server_request(self, method: str, params: dict[str, Any]) -> Reply:
        if self._legacy is None:
            return Reply.failure(METHOD_NOT_FOUND, "the client is a 2026-07-28 client; it takes no requests")
        return await self.ask_host(method, params, self._legacy.capabilities)

    async def ask_host(self, method: str, params: Mapping[str, Any], capabilities: Mapping[str, Any]) -> Reply:
        """Ask the host a server's question under a warden id (PX17), if it declared the capability (PX01–PX04)."""
        refusal = check_question(method, params, capabilities)
        if refusal is not None:
            log.info("%s: %s refused: %s", self._name, method, refusal.reason)
            return Reply.failure(refusal.code, refusal.reason)
        body = scope_sampling(dict(params)) if method == "sampling/createMessage" else dict(params)
        self._next_question += 1
        id_raw = b'"warden-%d"' % self._next_question
        question = _Question()
        self._questions[id_raw] = question
        try:
            await self._channel.send(encode_request(id_raw, method, encode_json(body)))
            with trio.move_on_after(self._question_timeout):
                await question.event.wait()
        except trio.ClosedResourceError:
            pass
        finally:
            self._questions.pop(id_raw, None)
        if question.reply is None:
            await self._send(encode_notification("notifications/cancelled", encode_json(
                {"requestId": id_raw.decode().strip('"'), "reason": "no answer in time"})))
            return Reply.failure(REQUEST_TIMEOUT, f"the client did not answer {method} in time")
        return question.reply

    def _answer_question(self, id_raw: bytes, reply: Reply) -> None:
        question = self._questions.pop(id_raw, None)
        if question is None:
            log.warning("dropped a response from the host to unknown id %s", id_raw[:64].decode("utf-8", "replace"))
            return
        question.reply = reply
        question.event.set()

    async def describe(self) -> ServerDescription:
        return await self.upstream.wait_connected()
