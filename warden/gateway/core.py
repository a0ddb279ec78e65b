"""warden's server face for one upstream: the protocol logic every host transport shares.

:class:`Gateway` answers what warden answers itself (``initialize``, ``server/discover``, ``ping``), forwards the
rest to the :class:`~warden.upstream.connection.Upstream`, and reshapes results when host and server are of
different eras. It is also the upstream's :class:`UpstreamHandler`: server notifications flow to every connected
host that can take them, and server questions (sampling, elicitation, roots) reach a host only if it declared that
exact capability — otherwise the server gets an error at once, never silence.

A transport (stdio in :mod:`warden.gateway.stdio`, HTTP in :mod:`warden.gateway.http`) owns one
:class:`HostLink` per downstream peer and calls :meth:`Gateway.handle` for each request with a :class:`Sink` —
where messages tied to that request (progress, logs, questions) are written before its response.

Ids: every host request keeps its own id on the host side; the upstream sees warden's ids; questions warden asks
a host carry ids of the form ``"warden-N"``. A response to an id warden did not issue is dropped and logged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, final

import msgspec
import trio

from warden import audit
from warden.errors import AuditError, PolicyError, RemoteProtocolError, UpstreamError, UpstreamTimeout, WardenError
from warden.gateway.guard import Guard
from warden.gateway.link import Context, HostLink, Sink, host_name
from warden.gateway.mrtr import Exchange, Questions
from warden.gateway.recorder import Recorder
from warden.gateway.shaping import (
    present_capabilities,
    routable_client_capabilities,
    strip_host_meta,
    to_legacy_result,
    to_modern_result,
)
from warden.policy import Decision, Effect, EntryKind, HostCapabilities
from warden.policy.pins import digest as pin_digest
from warden.protocol.eras import (
    CLIENT_REQUESTS,
    INPUT_REQUEST_METHODS,
    LIST_METHODS,
    LOG_LEVELS,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    MODERN_VERSIONS,
    SERVER_NOTIFICATIONS,
    Era,
    read_request_meta,
    result_type,
)
from warden.protocol.messages import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    UNSUPPORTED_PROTOCOL_VERSION,
    Notification,
    Request,
    decode_json,
    decode_object,
    encode_error,
    encode_error_object,
    encode_json,
    encode_notification,
    encode_result,
)
from warden.protocol.request_state import StateClaims, StateSigner, binding_of, is_ours
from warden.upstream.connection import Reply, ServerDescription, Upstream

log = logging.getLogger(__name__)

MAX_PAGES: Final = 1000
"""A list longer than this many pages is refused rather than followed forever."""
MAX_INPUT_ROUNDS: Final = 16
"""How many input_required rounds warden relays for one request before giving up."""
MRTR_REQUESTS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})


_LIST_CHANGED: Final[Mapping[str, tuple[str, ...]]] = {
    "notifications/tools/list_changed": ("tools/list",),
    "notifications/prompts/list_changed": ("prompts/list",),
    "notifications/resources/list_changed": ("resources/list", "resources/templates/list"),
}


_OUTCOMES: Final[Mapping[type[WardenError], audit.Outcome]] = {UpstreamTimeout: audit.Outcome.TIMEOUT}


class _NullSink:
    """Where messages of warden's own requests go: nowhere (no host is waiting on them)."""

    async def send(self, message: bytes) -> None:
        return None


_NO_SINK: Final = _NullSink()

_LISTEN_KEYS: Final[Mapping[str, str]] = {"toolsListChanged": "tools", "promptsListChanged": "prompts",
                                           "resourcesListChanged": "resources"}
_LISTEN_NOTIFICATIONS: Final[Mapping[str, str]] = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}


@final
@dataclass(slots=True, eq=False)
class _Listener:
    """A host's open ``subscriptions/listen``: where to send, its id (the subscription id), what it asked for."""

    sink: Sink
    id: Any
    honored: dict[str, Any]


URL_ELICITATION_REQUIRED: Final = -32042
"""2025-11-25 only: "the user must visit a URL first". Never relayed to a 2026 host (PX09)."""

Asker = Callable[[str, Mapping[str, Any]], Awaitable[Reply]]


def _wire_asker(link: HostLink, sink: Sink) -> Asker:
    """Ask ``link``'s host on the wire (``sink``): a legacy host takes questions as requests."""
    async def ask(method: str, params: Mapping[str, Any]) -> Reply:
        return await link.ask(sink, method, params)
    return ask


def _for_modern_host(question: Mapping[str, Any]) -> dict[str, Any]:
    """An input request as a 2026 host takes it: no ``elicitationId`` (PX10), no JSON-RPC envelope."""
    params = dict(question.get("params") or {})
    params.pop("elicitationId", None)
    return {"method": question["method"], "params": params}


def _state_complete(raw: bytes) -> bytes:
    """A modern result that left ``resultType`` out means complete (LC16); a 2026 host expects it stated. The raw
    object text is spliced, not re-encoded, so everything else passes byte for byte."""
    body = raw[1:].lstrip()
    return b'{"resultType":"complete"' + (b"," + body if body[:1] != b"}" else b"}")


class _ResultType(msgspec.Struct):
    resultType: str | None = None


_peek_result_type = msgspec.json.Decoder(_ResultType).decode


@final
@dataclass(slots=True, eq=False)
class _InFlight:
    """A forwarded request that may make the server ask its host something."""

    link: HostLink
    sink: Sink
    ctx: Context
    exchange: Exchange | None = None


def _rpc_error(id_raw: bytes, exc: WardenError) -> bytes:
    if isinstance(exc, RemoteProtocolError):
        return encode_error(id_raw, exc.jsonrpc_code, exc.message)
    if isinstance(exc, UpstreamTimeout):
        return encode_error(id_raw, REQUEST_TIMEOUT, exc.message)
    if isinstance(exc, PolicyError):
        # The message says why and what approves it: hosts show the message, not always the data.
        message = f"{exc.message}. To allow it: {exc.hint}" if exc.hint else exc.message
        return encode_error(id_raw, INVALID_PARAMS, message, {"hint": exc.hint} if exc.hint else None)
    code = CONNECTION_CLOSED if isinstance(exc, UpstreamError) else INTERNAL_ERROR
    return encode_error(id_raw, code, exc.message, {"hint": exc.hint} if exc.hint else None)


@final
class Gateway:
    """The protocol logic between hosts and one upstream. Construct, :meth:`bind` the upstream (which takes this
    gateway as its handler), then call :meth:`handle` per host request."""

    def __init__(self, *, name: str, guard: Guard, recorder: Recorder, signer: StateSigner,
                 background: trio.Nursery, question_timeout: float = 120.0) -> None:
        self._name = name
        self.guard = guard
        self.recorder = recorder
        self._signer = signer
        self._background = background
        self._question_timeout = question_timeout
        self._exchanges: dict[str, Exchange] = {}
        self._listeners: set[_Listener] = set()
        self._stale: dict[str, trio.Event] = {}
        self._wanted_upstream: dict[str, bool] = {}
        self._upstream: Upstream | None = None
        self._links: set[HostLink] = set()
        self._in_flight: set[_InFlight] = set()
        self._tools: dict[str, dict[str, Any]] = {}
        self._observed: ServerDescription | None = None

    def bind(self, upstream: Upstream) -> None:
        self._upstream = upstream

    @property
    def upstream(self) -> Upstream:
        assert self._upstream is not None, "Gateway.bind() was not called"
        return self._upstream

    async def _connected(self) -> ServerDescription:
        """The live server's description; the first time warden sees a (re)connected server, its instructions are
        checked against their pin, so a server restarted with new instructions is caught before it is used."""
        description = await self.upstream.wait_connected()
        if description is not self._observed:
            await self.recorder.pins(await self.guard.observe_instructions(description.instructions))
            self._observed = description
        return description

    def known_tool(self, name: str) -> dict[str, Any] | None:
        """The definition of ``name`` from the last complete ``tools/list`` warden answered (for validating the
        ``Mcp-Param-*`` headers of a call to it), or None."""
        return self._tools.get(name)

    def attach(self, link: HostLink) -> None:
        self._links.add(link)

    def detach(self, link: HostLink) -> None:
        self._links.discard(link)

    # -- requests from hosts ------------------------------------------------------------------------------------

    async def handle(self, request: Request, link: HostLink, sink: Sink) -> bytes:
        """Answer one host request; returns the encoded response. Never raises a :class:`WardenError`."""
        try:
            return await self._dispatch(request, link, sink)
        except WardenError as exc:
            return _rpc_error(request.id, exc)

    async def _dispatch(self, request: Request, link: HostLink, sink: Sink) -> bytes:
        method = request.method
        if method == "initialize":
            return encode_result(request.id, encode_json(await self._initialize(link)))
        params = decode_object(request.params)
        if not isinstance(params.get("_meta", {}), dict):
            return encode_error(request.id, INVALID_PARAMS, "params._meta must be an object")
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
            ctx = Context(Era.MODERN, version, capabilities, level, meta.get("progressToken"),
                          client=host_name(meta.get(META_CLIENT_INFO)))
            self.upstream.set_legacy_capabilities({})
        elif link.legacy is not None:
            token = params.get("_meta", {}).get("progressToken")
            ctx = Context(Era.LEGACY, link.legacy.version, link.legacy.capabilities, link.legacy.log_level, token,
                          client=link.legacy.client)
        else:
            return encode_error(request.id, INVALID_PARAMS,
                                "send initialize first, or carry the 2026-07-28 _meta (protocolVersion and "
                                "clientCapabilities) on every request")
        if method not in CLIENT_REQUESTS[ctx.era]:
            return encode_error(request.id, METHOD_NOT_FOUND, f"Method not found: {method}")
        ctx = dataclasses.replace(ctx, upstream=await self._lane(ctx, link))
        if method == "ping":
            return encode_result(request.id, b"{}")
        if method == "server/discover":
            return encode_result(request.id, encode_json(await self._discover()))
        if method in LIST_METHODS:
            return await self._list(request, ctx, params, link, sink)
        if method == "logging/setLevel":
            return await self._set_level(request, link, params, sink)
        if method == "subscriptions/listen":
            return await self._listen(request, params, link, sink)
        if method.startswith("tasks/") or (method in ("resources/subscribe", "resources/unsubscribe")
                                           and ctx.upstream is not ctx.era):
                return encode_error(request.id, METHOD_NOT_FOUND, f"warden does not carry {method} to this server")
        if method in MRTR_REQUESTS:
            try:
                return await self._audited(request, ctx, params, link, sink)
            except PolicyError as exc:
                if method != "resources/read":
                    raise
                # To the host an unreadable resource is a resource not found: -32602 with its uri (SEP-2164).
                return encode_error(request.id, INVALID_PARAMS, f"{exc.message}. To allow it: {exc.hint}",
                                    {"uri": params.get("uri"), "hint": exc.hint})
        return (await self._forward(request, ctx, params, sink))[0]

    async def _audited(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                       sink: Sink) -> bytes:
        """Decide, record the decision durably, only then forward; record the outcome (write-ahead)."""
        description = await self._connected()
        if ctx.era is Era.MODERN and (ctx.upstream is Era.LEGACY or await self._needs_human(request.method, params,
                                                                                           ctx)):
            return await self._exchange(request, ctx, params, link, description)
        entry = _InFlight(link, sink, ctx)  # the server may ask this request's host something (PX01)
        self._in_flight.add(entry)
        try:
            return await self._decided_and_forwarded(request, ctx, params, link, sink)
        finally:
            self._in_flight.discard(entry)

    async def _lane(self, ctx: Context, link: HostLink) -> Era:
        """The server session a request travels on: the server's own era, except that a legacy host in front of a
        dual-era server gets that server's legacy session (opened on first need)."""
        description = await self._connected()
        if ctx.era is Era.LEGACY and description.era is Era.MODERN and link.legacy is not None and \
                await self.upstream.legacy_lane(routable_client_capabilities(link.legacy.capabilities)):
            return Era.LEGACY
        return description.era

    async def _needs_human(self, method: str, params: Mapping[str, Any], ctx: Context) -> bool:
        """A 2026 host that can show a form, for a request the policy wants a human for: warden asks it through
        an ``input_required`` round (an exchange), since it cannot put a question on the wire."""
        if not HostCapabilities.from_client_capabilities(ctx.capabilities).elicitation_form:
            return False
        await self._know_lists(method)
        return self._decide(method, params, channel=True).effect in (Effect.ASK, Effect.CONFIRM)

    async def _decided_and_forwarded(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                                     sink: Sink) -> bytes:
        asker = _wire_asker(link, sink) if self._can_ask_in_band(link, ctx) else None
        index = await self._authorize(request, params, asker, ctx.client)
        try:
            response, reply = await self._forward(request, ctx, params, sink)
        except WardenError as exc:
            self.recorder.outcome(index, method=request.method, result=None, error=exc.message,
                                  outcome=_OUTCOMES.get(type(exc), audit.Outcome.FAILED))
            raise
        except trio.Cancelled:
            self.recorder.outcome(index, method=request.method, result=None, error="cancelled by the host",
                                  outcome=audit.Outcome.CANCELLED)
            raise
        self.recorder.outcome(index, method=request.method, result=reply.result, error=reply.message or None)
        return response

    async def _initialize(self, link: HostLink) -> dict[str, Any]:
        assert link.legacy is not None, "the transport calls HostLink.accept_initialize first"
        self.upstream.set_legacy_capabilities(routable_client_capabilities(link.legacy.capabilities))
        description = await self._connected()
        lane = await self._lane(Context(Era.LEGACY, link.legacy.version, link.legacy.capabilities, None), link)
        result: dict[str, Any] = {
            "protocolVersion": link.legacy.version,
            "capabilities": present_capabilities(description.capabilities, upstream_era=lane, host_era=Era.LEGACY),
            "serverInfo": dict(description.server_info),
        }
        instructions = self.guard.approved_instructions(description.instructions)
        if instructions is not None:
            result["instructions"] = instructions
        return result

    async def _discover(self) -> dict[str, Any]:
        description = await self._connected()
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": list(MODERN_VERSIONS),
            "capabilities": present_capabilities(description.capabilities, upstream_era=description.era,
                                                 host_era=Era.MODERN),
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {META_SERVER_INFO: dict(description.server_info)},
        }
        instructions = self.guard.approved_instructions(description.instructions)
        if instructions is not None:
            result["instructions"] = instructions
        return result

    async def _set_level(self, request: Request, link: HostLink, params: dict[str, Any], sink: Sink) -> bytes:
        assert link.legacy is not None
        level = params.get("level")
        if level not in LOG_LEVELS:
            return encode_error(request.id, INVALID_PARAMS, f"unknown log level {level!r}")
        lane = await self._lane(Context(Era.LEGACY, link.legacy.version, {}, None), link)
        if lane is Era.LEGACY:
            return (await self._forward(request, Context(Era.LEGACY, link.legacy.version, {}, None, upstream=lane),
                                        params, sink))[0]
        link.legacy.log_level = str(level)  # modern servers take the level per request (MS19)
        return encode_result(request.id, b"{}")

    # -- forwarding ---------------------------------------------------------------------------------------------

    async def _call_upstream(self, method: str, params: Mapping[str, Any], ctx: Context, sink: Sink) -> Reply:
        async def progress(update: dict[str, Any]) -> None:
            if ctx.progress_token is None:
                return
            forwarded = dict(update)
            forwarded["progressToken"] = ctx.progress_token
            with contextlib.suppress(trio.ClosedResourceError):
                await sink.send(encode_notification("notifications/progress", encode_json(forwarded)))

        return await self.upstream.request(
            method, params, capabilities=routable_client_capabilities(ctx.capabilities), log_level=ctx.log_level,
            on_progress=progress, lane=ctx.upstream)

    async def _forward(self, request: Request, ctx: Context, params: dict[str, Any],
                       sink: Sink) -> tuple[bytes, Reply]:
        """Send the request upstream and shape the answer for the host's era; returns the encoded response and
        the server's final reply."""
        description = await self._connected()
        forwarded = strip_host_meta(params)
        reply = await self._call_upstream(request.method, forwarded, ctx, sink)
        for _ in range(MAX_INPUT_ROUNDS):
            if not reply.ok:
                assert reply.error is not None
                return encode_error_object(reply.error, request.id), reply
            assert reply.result is not None
            if ctx.upstream is ctx.era and ctx.era is Era.LEGACY:
                return encode_result(request.id, reply.result), reply
            if ctx.upstream is Era.MODERN:
                kind, stated = self._result_type(reply.result)
                if ctx.era is Era.MODERN:
                    result = reply.result if stated else _state_complete(reply.result)
                    return encode_result(request.id, result), reply
                if kind == "input_required":
                    reply = await self._relay_input_required(request.method, forwarded, ctx, sink,
                                                             reply.result_dict())
                    continue
                return encode_result(request.id, encode_json(to_legacy_result(reply.result_dict()))), reply
            return encode_result(request.id, encode_json(
                to_modern_result(reply.result_dict(), request.method, description.server_info))), reply
        raise RemoteProtocolError(f"the server asked for input more than {MAX_INPUT_ROUNDS} times",
                                  jsonrpc_code=INTERNAL_ERROR)

    # -- multi-round requests warden runs itself (PX07) ----------------------------------------------------------

    async def _exchange(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                        description: ServerDescription) -> bytes:
        """A 2026 host that warden must ask something (consent for this request, or a legacy server's question):
        run the request in the background (or continue it, when the host brings back warden's ``requestState``)
        and answer with its result or with the questions it raised."""
        original = {k: v for k, v in params.items() if k not in ("_meta", "requestState", "inputResponses")}
        binding = binding_of(request.method, pin_digest(original))  # the retry must repeat the same request
        state = params.get("requestState")
        if is_ours(state):
            assert isinstance(state, str)
            exchange = self._exchanges.get(self._signer.open(state, host=link.id, binding=binding,
                                                             now=trio.current_time()))
            if exchange is None:
                raise RemoteProtocolError("the request this requestState continues has ended; send it afresh",
                                          jsonrpc_code=INVALID_PARAMS)
            exchange.deliver(params.get("inputResponses"))
        else:
            exchange = Exchange(question_timeout=self._question_timeout)
            self._exchanges[exchange.id] = exchange
            forwarded = {k: v for k, v in params.items() if k not in ("requestState", "inputResponses")}
            self._background.start_soon(self._run_exchange, exchange, request, forwarded, ctx, link)
        step = await exchange.next_step()
        if isinstance(step, Questions):
            expires = trio.current_time() + self._question_timeout
            result: dict[str, Any] = {
                "resultType": "input_required",
                "inputRequests": {key: _for_modern_host(q) for key, q in step.requests.items()},
                "requestState": self._signer.mint(StateClaims(exchange.id, link.id, binding, expires)),
            }
            return encode_result(request.id, encode_json(result))
        if not step.ok:
            assert step.error is not None
            return encode_error_object(step.error, request.id)
        assert step.result is not None
        if ctx.upstream is Era.MODERN:  # the server's own result, input_required included, passes through
            return encode_result(request.id, step.result if self._result_type(step.result)[1]
                                 else _state_complete(step.result))
        return encode_result(request.id, encode_json(
            to_modern_result(step.result_dict(), request.method, description.server_info)))

    async def _run_exchange(self, exchange: Exchange, request: Request, params: dict[str, Any], ctx: Context,
                            link: HostLink) -> None:
        """Warden's side of an exchange: the decision (asking consent through the exchange if the host can show
        a form), the durable record, then the call with the server's questions routed to the exchange; a -32042
        (URL elicitation required, 2025-11-25) becomes URL-mode questions and a retry, never an error (PX09)."""
        method = request.method
        entry = _InFlight(link, _NO_SINK, ctx, exchange)
        self._in_flight.add(entry)
        result: Reply | WardenError = Reply.failure(INTERNAL_ERROR, "the call did not run")
        index: int | None = None
        try:
            asker = exchange.ask if HostCapabilities.from_client_capabilities(ctx.capabilities).elicitation_form \
                else None
            index = await self._authorize(request, params, asker, ctx.client)
            forwarded = strip_host_meta(params)
            for _ in range(MAX_INPUT_ROUNDS):
                result = await self._call_upstream(method, forwarded, ctx, _NO_SINK)
                if result.ok or result.code != URL_ELICITATION_REQUIRED:
                    break
                data = result.error_data()
                wanted = data.get("elicitations") if isinstance(data, dict) else None
                if not isinstance(wanted, list) or not wanted:
                    break
                answers = [await self._ask(link, None, "elicitation/create",
                                           question if isinstance(question, dict) else {}, ctx.capabilities,
                                           ctx.client, asker=exchange.ask) for question in wanted]
                if not all(answer.ok for answer in answers):
                    break
        except WardenError as exc:
            result = exc
        finally:
            self._in_flight.discard(entry)
        exchange.finish(result)
        if isinstance(result, Reply):
            self.recorder.outcome(index, method=method, result=result.result, error=result.message or None)
        else:
            self.recorder.outcome(index, method=method, result=None, error=result.message,
                                  outcome=audit.Outcome.FAILED)
        with trio.move_on_after(self._question_timeout):
            await exchange.collected.wait()
        self._exchanges.pop(exchange.id, None)

    def _result_type(self, raw: bytes) -> tuple[str, bool]:
        """The result's type (absent means complete, LC16; unknown is invalid, LC17) and whether it was stated."""
        try:
            stated = _peek_result_type(raw).resultType
        except msgspec.DecodeError as exc:
            raise RemoteProtocolError("the server's resultType is not a string", jsonrpc_code=INTERNAL_ERROR) from exc
        return result_type({} if stated is None else {"resultType": stated}), stated is not None

    async def _relay_input_required(self, method: str, params: dict[str, Any], ctx: Context, sink: Sink,
                                    result: dict[str, Any]) -> Reply:
        """PX08: a modern server asked for input and the host is legacy: ask each input request on the wire, then
        retry upstream with the answers and the server's own ``requestState``, byte for byte (MS36–MS40)."""
        requests = result.get("inputRequests") or {}
        if not isinstance(requests, dict):
            raise RemoteProtocolError("inputRequests must be an object", jsonrpc_code=INTERNAL_ERROR)
        link = self._link_of(sink)
        responses: dict[str, Any] = {}
        for key, question in requests.items():
            if not isinstance(question, dict) or question.get("method") not in INPUT_REQUEST_METHODS:
                raise RemoteProtocolError(f"input request {key!r} is not a question warden can ask",
                                          jsonrpc_code=INTERNAL_ERROR)
            answer = await self._ask(link, sink, str(question["method"]), question.get("params") or {},
                                     ctx.capabilities, ctx.client)
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
        return await self._call_upstream(method, retry, ctx, sink)

    def _link_of(self, sink: Sink) -> HostLink:
        for entry in self._in_flight:
            if entry.sink is sink:
                return entry.link
        raise RemoteProtocolError("the server asked for input outside a request that may ask",
                                  jsonrpc_code=INTERNAL_ERROR)

    async def _list(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                    sink: Sink) -> bytes:
        """Follow every page upstream, record the list against the pins, and answer with the visible part only."""
        if params.get("cursor") is not None:
            return encode_error(request.id, INVALID_PARAMS, "invalid cursor (warden returns complete lists)")
        fetched = await self._fetch_all(request.method, strip_host_meta(params), ctx, sink)
        if isinstance(fetched, Reply):
            assert fetched.error is not None
            return encode_error_object(fetched.error, request.id)
        items, ttl, private = fetched
        await self.recorder.pins(await self.guard.observe_list(request.method, items))
        if self._can_ask_in_band(link, ctx):
            consent = self.guard.pending_consent(self.guard.kind_of(request.method))
            if consent is not None:
                answer = await link.ask(sink, "elicitation/create", consent.params)
                if answer.ok:
                    await self.recorder.approved(await self.guard.apply_consent(consent, answer.result_dict()))
        visible = self.guard.visible(request.method, items)
        if request.method == "tools/list":
            self._tools = {t["name"]: t for t in visible}
        result: dict[str, Any] = {LIST_METHODS[request.method]: visible}
        if ctx.era is Era.MODERN:
            result["resultType"] = "complete"
            result["ttlMs"] = int(ttl)
            result["cacheScope"] = "private" if private else "public"
        return encode_result(request.id, encode_json(result))

    async def _fetch_all(self, method: str, params: Mapping[str, Any], ctx: Context,
                         sink: Sink) -> tuple[list[Any], int, bool] | Reply:
        """Every page of an upstream list (MS14, MS15): the items, the smallest ``ttlMs`` and whether any page was
        private (PX21); or the upstream's error reply."""
        key = LIST_METHODS[method]
        items: list[Any] = []
        ttl: int | None = None
        private = ctx.upstream is Era.LEGACY
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page_params = dict(params)
            if cursor is not None:
                page_params["cursor"] = cursor
            reply = await self._call_upstream(method, page_params, ctx, sink)
            if not reply.ok:
                return reply
            page = reply.result_dict()
            if ctx.upstream is Era.MODERN:
                result_type(page)
                page_ttl = page.get("ttlMs")
                page_ttl = page_ttl if isinstance(page_ttl, int) and page_ttl > 0 else 0
                ttl = page_ttl if ttl is None else min(ttl, page_ttl)
                private = private or page.get("cacheScope") != "public"
            page_items = page.get(key)
            if not isinstance(page_items, list):  # absent is malformed too, not "nothing": it would unlist all
                raise RemoteProtocolError(f"{method}: the server's answer has no {key!r} list",
                                          jsonrpc_code=INTERNAL_ERROR)
            items.extend(page_items)
            next_cursor = page.get("nextCursor")
            if next_cursor is None or (next_cursor == "" and ctx.upstream is Era.LEGACY):
                return items, ttl or 0, private
            if not isinstance(next_cursor, str) or next_cursor == cursor:
                raise RemoteProtocolError(f"{method}: the server's nextCursor does not advance",
                                          jsonrpc_code=INTERNAL_ERROR)
            cursor = next_cursor
        raise RemoteProtocolError(f"{method} has more than {MAX_PAGES} pages", jsonrpc_code=INTERNAL_ERROR)

    async def _refresh(self, method: str) -> None:
        """Re-read an upstream list on warden's own account (a call before any list, or ``list_changed``)."""
        description = await self._connected()
        ctx = Context(description.era, description.version, {}, None, upstream=description.era)
        fetched = await self._fetch_all(method, {}, ctx, _NO_SINK)
        if isinstance(fetched, Reply):
            raise RemoteProtocolError(f"the server refused {method}: {fetched.message}",
                                      jsonrpc_code=fetched.code or INTERNAL_ERROR)
        await self.recorder.pins(await self.guard.observe_list(method, fetched[0]))

    # -- policy on requests -------------------------------------------------------------------------------------

    @staticmethod
    def _can_ask_in_band(link: HostLink, ctx: Context) -> bool:
        """A human can be asked on the wire for this request: a legacy host that declared form elicitation. (A
        2026 host that can show a form is asked through an ``input_required`` round instead: :meth:`_needs_human`.)"""
        return ctx.era is Era.LEGACY and link.legacy is not None and \
            HostCapabilities.from_client_capabilities(link.legacy.capabilities).elicitation_form

    async def _authorize(self, request: Request, params: Mapping[str, Any], asker: Asker | None,
                         client: str | None) -> int | None:
        """Decide a ``tools/call`` / ``prompts/get`` / ``resources/read`` from the host named ``client``; ask a
        human (through ``asker``, when there is a way to reach one) when the policy says so. The decision is
        recorded durably either way; an allowed request's record index is returned (its outcome is tied to it), a
        refusal is raised.

        Raises:
            PolicyError: refused (never forwarded): the message says why and which command approves it.
        """
        method = request.method
        await self._know_lists(method)
        channel = asker is not None
        name = params.get("uri" if method == "resources/read" else "name")
        if not isinstance(name, str):
            raise RemoteProtocolError(f"{method} needs a string {'uri' if method == 'resources/read' else 'name'}",
                                      jsonrpc_code=INVALID_PARAMS)
        arguments = params.get("arguments") if method == "tools/call" else None
        arguments = arguments if isinstance(arguments, dict) else None
        confirmed: str | None = None
        kind: EntryKind = "tool" if method == "tools/call" else "prompt" if method == "prompts/get" else "resource"
        for _ in range(3):
            decision = self._decide(method, params, channel=channel, confirmed=confirmed)
            if decision.effect is Effect.ALLOW:
                return await self.recorder.decided(
                    method=method, target=name, decision=decision, approval=self.guard.approval(kind, name),
                    request=request.raw, arguments=arguments, confirmed=confirmed is not None, client=client)
            if decision.effect is Effect.DENY:
                break
            if decision.effect is Effect.ASK:
                consent = self.guard.pending_consent(kind, name if kind != "resource" else None)
                if consent is None or asker is None:
                    break
                answer = await asker("elicitation/create", consent.params)
                approved = await self.guard.apply_consent(consent, answer.result_dict()) if answer.ok else []
                await self.recorder.approved(approved)
                if not approved:
                    break
            else:  # CONFIRM: bound to the digest of exactly these arguments
                if asker is None:
                    break
                confirmation = self.guard.call_confirmation(name, arguments)
                answer = await asker("elicitation/create", confirmation.params)
                confirmed = self.guard.confirmed(confirmation, answer.result_dict()) if answer.ok else None
                if confirmed is None:
                    await self.recorder.decided(method=method, target=name, decision=decision, approval=None,
                                                request=None, arguments=arguments, client=client)
                    raise PolicyError(f"the user did not confirm the call to {name!r}",
                                      hint="nothing was sent to the server")
        log.warning("%s: %s refused: %s", self._name, method, decision.reason)
        await self.recorder.decided(method=method, target=name, decision=decision, approval=None, request=None,
                                    arguments=arguments, client=client)
        raise self.guard.refuse(decision)

    async def _know_lists(self, method: str) -> None:
        """The lists a decision on ``method`` depends on are known and current (re-read if the server changed
        them, read if never seen: a call before any list is decided on what warden would have listed)."""
        list_method = {"tools/call": "tools/list", "prompts/get": "prompts/list"}.get(method)
        for stale in [e for m, e in self._stale.items() if m in (list_method, "resources/list",
                                                                    "resources/templates/list")]:
            await stale.wait()  # a change announced by the server is re-read before anything is decided on it
        if method == "resources/read":
            for lm in ("resources/list", "resources/templates/list"):
                if not self.guard.knows(lm) and self._offers_resources():
                    await self._refresh(lm)
        elif list_method is not None and not self.guard.knows(list_method):
            await self._refresh(list_method)

    def _decide(self, method: str, params: Mapping[str, Any], *, channel: bool,
                confirmed: str | None = None) -> Decision:
        name = params.get("uri" if method == "resources/read" else "name")
        if not isinstance(name, str):
            raise RemoteProtocolError(f"{method} needs a string {'uri' if method == 'resources/read' else 'name'}",
                                      jsonrpc_code=INVALID_PARAMS)
        if method == "tools/call":
            arguments = params.get("arguments")
            return self.guard.decide_call(name, arguments if isinstance(arguments, dict) else None, channel=channel,
                                          confirmed_digest=confirmed)
        if method == "prompts/get":
            return self.guard.decide_prompt(name, channel=channel)
        return self.guard.decide_read(name, channel=channel)

    def _offers_resources(self) -> bool:
        description = self.upstream.description
        return description is not None and isinstance(description.capabilities.get("resources"), dict)

    # -- notifications from hosts -------------------------------------------------------------------------------

    async def host_notification(self, note: Notification, link: HostLink) -> None:
        """A host notification other than ``notifications/cancelled`` (which the transport maps to its task)."""
        if note.method == "notifications/initialized":
            if link.legacy is not None:
                link.legacy.initialized = True
        elif note.method == "notifications/roots/list_changed":
            description = self.upstream.description
            if link.legacy is not None and description is not None and description.era is Era.LEGACY:
                await self.upstream.notify(note.method)
        else:
            log.debug("host notification %s not forwarded", note.method)

    # -- the upstream's traffic (UpstreamHandler) ---------------------------------------------------------------

    async def on_notification(self, method: str, params: bytes | None) -> None:
        """Runs inside the server's reader, so it never waits for the server: a list change is re-read in the
        background, and requests that depend on that list wait for the re-read (quarantine before use)."""
        if method == "notifications/subscriptions/acknowledged":
            self._check_acknowledgement(params)
            return
        changed = [m for m in _LIST_CHANGED.get(method, ()) if self.guard.knows(m)]
        if changed:
            done = trio.Event()
            for list_method in changed:
                self._stale[list_method] = done
            self._background.start_soon(self._refresh_then_tell, changed, done, method, params)
            return
        await self._tell_hosts(method, params)

    async def _refresh_then_tell(self, lists: list[str], done: trio.Event, method: str, params: bytes | None) -> None:
        try:
            for list_method in lists:
                await self._refresh(list_method)
        except WardenError as exc:
            log.warning("%s: could not re-read the changed list: %s", self._name, exc.message)
        finally:
            for list_method in lists:
                if self._stale.get(list_method) is done:
                    del self._stale[list_method]
            done.set()
        await self._tell_hosts(method, params)

    async def _tell_hosts(self, method: str, params: bytes | None) -> None:
        message = encode_notification(method, params)
        for link in list(self._links):
            if link.unsolicited is None or link.legacy is None or method not in SERVER_NOTIFICATIONS[link.era]:
                continue
            with contextlib.suppress(trio.ClosedResourceError):
                await link.unsolicited.send(message)
        await self._to_listeners(method, params)

    # -- subscriptions/listen (2026 hosts, and warden's own listen on a 2026 server) ---------------------------

    async def _listen(self, request: Request, params: dict[str, Any], link: HostLink, sink: Sink) -> bytes:
        """Serve a host's ``subscriptions/listen`` whatever the server's era: acknowledge what warden can deliver
        (MS28), then forward matching change notifications tagged with the listen's id (MS29) until the host
        ends it (``notifications/cancelled`` or closing the stream; the request then gets no response)."""
        wanted = params.get("notifications")
        wanted = wanted if isinstance(wanted, dict) else {}
        description = await self._connected()
        capabilities = description.capabilities
        honored: dict[str, Any] = {}
        for key, feature in _LISTEN_KEYS.items():
            offered = capabilities.get(feature)
            if wanted.get(key) is True and isinstance(offered, dict) and offered.get("listChanged"):
                honored[key] = True
        uris = [u for u in wanted.get("resourceSubscriptions") or [] if isinstance(u, str)]
        resources = capabilities.get("resources")
        if uris and description.era is Era.LEGACY and isinstance(resources, dict) and resources.get("subscribe"):
            subscribed = [uri for uri in uris if (await self.upstream.request("resources/subscribe", {"uri": uri})).ok]
            if subscribed:
                honored["resourceSubscriptions"] = subscribed
        listener = _Listener(sink, decode_json(request.id), honored)
        meta = {META_SUBSCRIPTION_ID: listener.id}
        await sink.send(encode_notification("notifications/subscriptions/acknowledged",
                                            encode_json({"notifications": honored, "_meta": meta})))
        self._listeners.add(listener)
        try:
            await trio.sleep_forever()
        finally:
            self._listeners.discard(listener)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _to_listeners(self, method: str, params: bytes | None) -> None:
        key = _LISTEN_NOTIFICATIONS.get(method)
        if not self._listeners or (key is None and method != "notifications/resources/updated"):
            return
        body = decode_object(params) if params else {}
        uri = body.get("uri")
        for listener in list(self._listeners):
            if key is not None and not listener.honored.get(key):
                continue
            if key is None and uri not in (listener.honored.get("resourceSubscriptions") or ()):
                continue
            given = body.get("_meta")
            tagged = dict(body)  # a server's non-object _meta is not carried (nothing could be added to it)
            tagged["_meta"] = {**(given if isinstance(given, dict) else {}), META_SUBSCRIPTION_ID: listener.id}
            with contextlib.suppress(trio.ClosedResourceError):
                await listener.sink.send(encode_notification(method, encode_json(tagged)))

    async def listen_upstream(self) -> None:
        """Keep a ``subscriptions/listen`` open on a 2026 server for the change notifications it offers, so a
        changed list is quarantined at once and hosts hear of it (a 2026 server sends them nowhere else, MS27)."""
        while True:
            try:
                description = await self._connected()
            except WardenError:
                return  # the server cannot run; its requests report why
            if description.era is not Era.MODERN:
                return
            wanted = {key: True for key, feature in _LISTEN_KEYS.items()
                      if isinstance(description.capabilities.get(feature), dict)
                      and description.capabilities[feature].get("listChanged")}
            if not wanted:
                return
            self._wanted_upstream = wanted
            try:
                await self.upstream.request("subscriptions/listen", {"notifications": wanted}, stream=True,
                                            with_progress_token=False)
            except UpstreamError as exc:
                log.info("%s: the listen stream ended (%s); listening again", self._name, exc.message)
            await trio.sleep(1.0)

    def _check_acknowledgement(self, params: bytes | None) -> None:
        """MS28: what the server acknowledged is what warden is subscribed to; anything else is not."""
        acknowledged = decode_object(params).get("notifications") if params else None
        acknowledged = acknowledged if isinstance(acknowledged, dict) else {}
        missing = [k for k in self._wanted_upstream if acknowledged.get(k) is not True]
        if missing:
            log.warning("%s: the server did not acknowledge %s; those changes will not be heard",
                        self._name, ", ".join(missing))

    async def on_server_request(self, method: str, params: dict[str, Any]) -> Reply:
        """A legacy server's question: to the one legacy host whose request is in flight, else the only one."""
        links = {entry.link: entry for entry in self._in_flight}
        if len(links) == 1:
            entry = next(iter(links.values()))
            if entry.exchange is not None:
                return await self._ask(entry.link, None, method, params, entry.ctx.capabilities,
                                       entry.ctx.client, asker=entry.exchange.ask)
            if entry.link.legacy is not None:
                return await self._ask(entry.link, entry.sink, method, params, entry.link.legacy.capabilities,
                                       entry.link.legacy.client)
        elif not links:
            legacy = [link for link in self._links if link.legacy is not None and link.unsolicited is not None]
            if len(legacy) == 1 and legacy[0].legacy is not None and legacy[0].unsolicited is not None:
                return await self._ask(legacy[0], legacy[0].unsolicited, method, params,
                                       legacy[0].legacy.capabilities, legacy[0].legacy.client)
        return Reply.failure(METHOD_NOT_FOUND, "no single legacy client can be asked this question through warden")

    async def _ask(self, link: HostLink, sink: Sink | None, method: str, params: Mapping[str, Any],
                   capabilities: Mapping[str, Any], client: str | None, *, asker: Asker | None = None) -> Reply:
        """Ask a host (named ``client``) a server's question if it declared the capability (PX01–PX04) and policy
        allows it: on the wire (``sink``), or through an exchange (``asker``) for a 2026 host."""
        decision = self.guard.decide_question(method, params, capabilities)
        if not decision.allowed:
            log.warning("%s: %s refused: %s", self._name, method, decision.reason)
            await self.recorder.decided(method=method, target=method, decision=decision, approval=None,
                                        request=None, client=client)
            # EL08 asks for -32602 for an undeclared elicitation mode; tools without sampling.tools is likewise a
            # bad request (SA07); a question the host cannot take at all is "method not found" to it.
            bad_params = method == "elicitation/create" or "tools" in params or "toolChoice" in params
            return Reply.failure(INVALID_PARAMS if bad_params else METHOD_NOT_FOUND, f"refused: {decision.reason}")
        try:
            index = await self.recorder.decided(method=method, target=method, decision=decision, approval=None,
                                                request=encode_json(dict(params)), client=client)
        except AuditError as exc:
            return Reply.failure(INTERNAL_ERROR, f"warden cannot record this request, so it refuses it: {exc}")
        body = dict(params)
        if method == "sampling/createMessage" and "includeContext" in body:
            body["includeContext"] = decision.include_context or "none"  # PX04, PX06
        if asker is not None:
            answer = await asker(method, body)
        else:
            assert sink is not None
            answer = await link.ask(sink, method, body)
        if method == "roots/list" and answer.ok:
            answer = Reply(result=encode_json(self.guard.filter_roots_answer(answer.result_dict())))
        self.recorder.outcome(index, method=method, result=answer.result, error=answer.message or None)
        return answer

    async def on_lifecycle(self, event: str, detail: str) -> None:
        if event == "launched":
            await self.recorder.launched(detail)
        elif event == "ended":
            await self.recorder.exited(detail)
        else:
            await self.recorder.refused(detail)
