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
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, final

import msgspec
import trio

from warden import audit
from warden.consent import ApprovalRequest, WebhookApprovals
from warden.errors import AuditError, PolicyError, RemoteProtocolError, UpstreamError, UpstreamTimeout, WardenError
from warden.gateway.guard import Guard
from warden.gateway.link import Answer, Caller, Context, HostLink, Sink, Started, host_name
from warden.gateway.mrtr import Exchange, Questions
from warden.gateway.pinwatch import watch_file
from warden.gateway.recorder import Recorder
from warden.gateway.shaping import (
    present_capabilities,
    strip_host_meta,
    to_legacy_result,
    to_modern_result,
)
from warden.gateway.tasks import (
    LEGACY_TASKS_VERSION,
    TASKS_EXTENSION,
    TERMINAL,
    TaskEntry,
    TaskTable,
    created_task,
    declares_extension,
    legacy_task_capability,
)
from warden.policy import ContentFinding, Decision, Effect, EntryKind, HostCapabilities
from warden.policy.pins import arguments_digest
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
    MISSING_REQUIRED_CLIENT_CAPABILITY,
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
from warden.protocol.paging import Pager
from warden.protocol.request_state import StateClaims, StateSigner, binding_of, is_ours
from warden.protocol.session import Reply
from warden.upstream.connection import Sent, ServerDescription, Upstream

log = logging.getLogger(__name__)

MAX_INPUT_ROUNDS: Final = 16
"""How many input_required rounds warden relays for one request before giving up."""


_LIST_CHANGED: Final[Mapping[str, tuple[str, ...]]] = {
    "notifications/tools/list_changed": ("tools/list",),
    "notifications/prompts/list_changed": ("prompts/list",),
    "notifications/resources/list_changed": ("resources/list", "resources/templates/list"),
}


_KIND_CHANGED: Final[Mapping[EntryKind, str]] = {
    "tool": "notifications/tools/list_changed", "prompt": "notifications/prompts/list_changed",
    "resource": "notifications/resources/list_changed", "resource_template": "notifications/resources/list_changed",
}
"""What a host is told when the entries of a kind it may see change (an approval made anywhere)."""

_OUTCOMES: Final[Mapping[type[WardenError], audit.Outcome]] = {UpstreamTimeout: audit.Outcome.TIMEOUT}


class NullSink:
    """Where messages of warden's own requests go: nowhere (no host is waiting on them)."""

    async def send(self, message: bytes) -> None:
        return None


NO_SINK: Final = NullSink()

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
    principal: str | None = None
    """Whom the face authenticated for it: what an approval changed is told to the principals it changed for."""


URL_ELICITATION_REQUIRED: Final = -32042
"""2025-11-25 only: "the user must visit a URL first". Never relayed to a 2026 host (PX09)."""

Asker = Callable[[str, Mapping[str, Any]], Awaitable[Reply]]
_Handler = Callable[[Request, Context, dict[str, Any], HostLink, Sink], Awaitable[bytes]]
"""How the gateway answers one host request it treats itself (see ``Gateway._handler_table``)."""


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


def _content_when_accepted(result: dict[str, Any], *, url_mode: bool) -> dict[str, Any] | None:
    """An elicitation answer as the server gets it: ``content`` only with ``accept`` in form mode (EL05), never in
    URL mode, where accepting is consent alone (EL16). None: it goes as it is."""
    if "content" not in result or (result.get("action") == "accept" and not url_mode):
        return None
    return {k: v for k, v in result.items() if k != "content"}


def _accepted_content_only(answer: Reply, *, url_mode: bool) -> Reply:
    """:func:`_content_when_accepted` for an answer on the wire."""
    try:
        shaped = _content_when_accepted(answer.result_dict(), url_mode=url_mode)
    except (msgspec.DecodeError, TypeError):
        return answer
    return answer if shaped is None else Reply(result=encode_json(shaped))


class _Refused(NamedTuple):
    """A server question :meth:`Gateway._admit` refused: the answer to the server, and the rule that refused."""

    reply: Reply
    rule: str


_INPUT_REQUIRED_FIELDS: Final = frozenset({"resultType", "inputRequests", "requestState", "_meta"})
"""An ``InputRequiredResult`` as a 2026 host gets it from a 2026 server: nothing else of the server's result."""

REMEMBERED_ELICITATIONS: Final = 256
"""How many URL-mode elicitation ids warden remembers the host of, to route their completion (PX12)."""


def _state_complete(raw: bytes) -> bytes:
    """A modern result that left ``resultType`` out means complete (LC16); a 2026 host expects it stated. The raw
    object text is spliced, not re-encoded, so everything else passes byte for byte."""
    body = raw[1:].lstrip()
    return b'{"resultType":"complete"' + (b"," + body if body[:1] != b"}" else b"}")


def _reports_error(raw: bytes, era: Era) -> bool:
    """Whether a finished task's tool result says the tool failed (``isError``): a 2026 ``tasks/get`` carries it
    under ``result``, a 2025-11-25 ``tasks/result`` is the tool result itself."""
    body = decode_object(raw)
    result = body.get("result") if era is Era.MODERN else body
    return isinstance(result, dict) and result.get("isError") is True


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


@final
@dataclass(slots=True, eq=False)
class _Screen:
    """The content rules on one ``tools/call`` result (``warden.policy.screen_result``): what the host may see,
    and what was cut out, kept for the outcome record (by digest)."""

    guard: Guard
    tool: str
    findings: list[ContentFinding] = dataclasses.field(default_factory=list)

    def __call__(self, raw: bytes) -> bytes:
        screened = self.guard.screen_result(self.tool, raw)
        self.findings.extend(screened.findings)
        if screened.refused is not None or screened.raw is None:
            what = f"tool {self.tool!r}" if self.tool else "this request"
            raise PolicyError(f"warden refused the result of {what}: {screened.refused}",
                              hint="nothing of the result reached the host; the audit log holds the digests of what "
                                   "was found")
        return screened.raw

    def redactions(self) -> list[tuple[str, str]]:
        return [(f.rule, f.digest) for f in self.findings]


def _screen_of(guard: Guard, method: str, params: Mapping[str, Any]) -> _Screen | None:
    """Tool results go through the content rules of that tool; prompts and resource contents through the rules
    that apply to every tool (``tools = ["*"]``, the built-in detectors)."""
    name = params.get("name")
    if method == "tools/call" and isinstance(name, str):
        return _Screen(guard, name)
    return _Screen(guard, "") if method in ("prompts/get", "resources/read") else None


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
class _Forwarding:
    """A ``tools/call`` on the engine-driven path (:meth:`Gateway.start`), from its forward to its answer: the
    upstream session's :class:`~warden.upstream.connection.Waiter` (settled in the server's reader, expired by its
    timer, failed by its end) and the face's :class:`~warden.gateway.link.Started` (cancelled by the host). What
    happens to an answer is what :meth:`Gateway._decided_and_forwarded` does after its forward, through the same
    methods: shaped and screened (:meth:`Gateway._shape`), its task checked, its outcome recorded; and exactly
    once, whichever comes first."""

    __slots__ = ("_answer", "_ctx", "_description", "_done", "_gateway", "_link", "_params", "_request", "_sink",
                 "entry", "index", "screen", "sent")

    cancel_on_timeout: Final = True

    def __init__(self, gateway: Gateway, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                 sink: Sink, answer: Answer) -> None:
        self._gateway = gateway
        self._request = request
        self._ctx = ctx
        self._params = params
        self._link = link
        self._sink = sink
        self._answer = answer
        self._description = gateway.upstream.description
        self._done = False
        self.entry = _InFlight(link, sink, ctx)
        self.screen = _Screen(gateway.guard, params["name"])
        self.index: int | None = None
        self.sent: Sent | None = None

    def _finish(self) -> bool:
        """Mark the request finished (False when it already was): it no longer takes server questions, and it lets
        go of its pending entry (which holds it as its waiter), so no reference cycle is left for the collector."""
        if self._done:
            return False
        self._done = True
        self._gateway._in_flight.discard(self.entry)
        self.sent = None
        return True

    def failed(self, exc: WardenError) -> bytes:
        """The error response for ``exc``, its outcome recorded (as :meth:`Gateway._decided_and_forwarded`)."""
        if self._finish():
            self._gateway.recorder.outcome(self.index, method=self._request.method, result=None, error=exc.message,
                                           outcome=_OUTCOMES.get(type(exc), audit.Outcome.FAILED),
                                           redactions=self.screen.redactions())
        return _rpc_error(self._request.id, exc)

    def cancelled(self) -> None:
        if self._finish():
            self._gateway.recorder.outcome(self.index, method=self._request.method, result=None,
                                           error="cancelled by the host", outcome=audit.Outcome.CANCELLED)

    def _response(self, reply: Reply, shaped: bytes) -> bytes:
        self._gateway._note_task(self._params, self._ctx, self._link, reply, self.index, tasks=False)
        if self._finish():
            self._gateway.recorder.outcome(self.index, method=self._request.method, result=reply.result,
                                           error=reply.message or None, redactions=self.screen.redactions())
        return shaped

    def _shaped(self, reply: Reply) -> bytes | None:
        assert self._description is not None
        return self._gateway._shape(self._request, self._ctx, reply, self._description, self.screen, tasks=False)

    # -- the upstream session's side (Waiter) -------------------------------------------------------------------

    async def progress(self, params: dict[str, Any]) -> None:
        await self._gateway._relay_progress(params, self._ctx, self._sink, self._link)

    async def settled(self, reply: Reply) -> None:
        try:
            shaped = self._shaped(reply)
            if shaped is None:  # a 2026 server's input_required: its questions vetted (recording waits for nothing)
                shaped = encode_result(self._request.id, await self._gateway._passed_input_required(reply, self._ctx))
            response = self._response(reply, shaped)
        except WardenError as exc:
            response = self.failed(exc)
        await self._answer.send(response, hold=True)  # the server's reader flushes once done with what it read

    async def expired(self) -> None:
        await self._answer.send(self.failed(UpstreamTimeout(
            f"{self._request.method} got no answer from the server within its deadline")))

    def closed(self, reply: Reply) -> None:
        try:
            shaped = self._shaped(reply)
            assert shaped is not None, "a failure is shaped at once"
            response = self._response(reply, shaped)
        except WardenError as exc:
            response = self.failed(exc)
        self._answer.send_soon(response)

    # -- the face's side (Started) ------------------------------------------------------------------------------

    async def cancel(self) -> None:
        sent = self.sent
        if self._done:
            return
        self.cancelled()
        if sent is not None:
            await sent.abandon("cancelled by warden (timeout or caller)")


@final
class Gateway:
    """The protocol logic between hosts and one upstream. Construct, :meth:`bind` the upstream (which takes this
    gateway as its handler), then call :meth:`handle` per host request."""

    def __init__(self, *, name: str, guard: Guard, recorder: Recorder, signer: StateSigner,
                 background: trio.Nursery, question_timeout: float = 120.0,
                 approvals: WebhookApprovals | None = None, fast_path: bool = False) -> None:
        self._name = name
        self._fast_path = fast_path
        """Take :meth:`start` (no task per call) when a face offers it. Only worth it while recording a decision
        does not wait (audit off): with the audit log on, each decision waits for its group commit, which must
        not hold the host's reader, so calls keep a task each. Correctness does not rest on it: :meth:`start`
        awaits the record like :meth:`handle` does."""
        self._legacy_tasks_offered: tuple[ServerDescription, bool] | None = None
        """Whether the server described offers task-augmented ``tools/call`` (2025-11-25), by description."""
        self._approvals = approvals  # where a call to confirm goes when no one can be asked in-band
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
        self._visible: dict[str | None, dict[EntryKind, frozenset[str]]] = {}
        """What each connected principal's hosts may see of each kind (a pin approved for one principal changes
        only its lists)."""
        self._elicited: OrderedDict[str, HostLink] = OrderedDict()
        """The host each URL-mode elicitation went to, by ``elicitationId``: its completion goes there only."""
        self._tasks = TaskTable()
        """Which host owns which task of this server: task requests and notifications go to the owner only."""
        self._handlers = self._handler_table()

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

    # -- approvals made anywhere (issue 10 item 5) ---------------------------------------------------------------

    async def watch_pins(self) -> None:
        """Watch the pin store for the gateway's lifetime (in the background nursery): the guard then re-reads it
        only when it changed, and every connected host hears what an approval made anywhere changed."""
        self._visible = {None: {kind: self.guard.visible_keys(kind) for kind in _KIND_CHANGED}}
        self.guard.watched(await self._background.start(watch_file, self.guard.store.path, self._pins_changed))

    async def _pins_changed(self) -> None:
        if not self.guard.pins_changed():
            return  # warden's own write (a list it observed): what hosts see is answered with that list
        principals = {None, *(link.principal for link in self._links),
                      *(listener.principal for listener in self._listeners)}
        told: dict[str, set[str | None]] = {}
        visible: dict[str | None, dict[EntryKind, frozenset[str]]] = {}
        for principal in principals:
            visible[principal] = now = {kind: self.guard.visible_keys(kind, principal) for kind in _KIND_CHANGED}
            if principal not in self._visible:
                continue  # not attached while pins were watched: it has nothing to list again
            before = self._visible[principal]
            for kind, keys in now.items():
                if keys != before.get(kind):
                    told.setdefault(_KIND_CHANGED[kind], set()).add(principal)
        self._visible = visible
        for method in sorted(told):
            log.info("%s: pins changed; telling hosts (%s)", self._name, method)
            await self._tell_hosts(method, None, principals=told[method])

    def _waiting_notice(self) -> str | None:
        """What hosts are shown while entries wait for approval: the exact command that reviews them."""
        waiting = self.guard.waiting()
        if not waiting:
            return None
        what = "1 entry waits" if waiting == 1 else f"{waiting} entries wait"
        return (f"warden: {what} for approval before this server's tools, prompts or resources can be used; "
                f"run `warden pins review {self._name}` in a terminal")

    def _with_notice(self, instructions: str | None) -> str | None:
        notice = self._waiting_notice()
        if notice is None:
            return instructions
        return f"{instructions}\n\n{notice}" if instructions else notice

    def known_tool(self, name: str) -> dict[str, Any] | None:
        """The definition of ``name`` from the last complete ``tools/list`` warden answered (for validating the
        ``Mcp-Param-*`` headers of a call to it), or None."""
        return self._tools.get(name)

    def attach(self, link: HostLink) -> None:
        self._links.add(link)
        if self._visible and link.principal not in self._visible:  # pins are watched: know what it sees now
            self._visible[link.principal] = {kind: self.guard.visible_keys(kind, link.principal)
                                             for kind in _KIND_CHANGED}

    def expect_legacy_host(self) -> None:
        """The one host in front (stdio) speaks the legacy era: see :meth:`Upstream.expect_legacy_host`."""
        self.upstream.expect_legacy_host()

    def detach(self, link: HostLink) -> None:
        self._links.discard(link)

    # -- requests from hosts ------------------------------------------------------------------------------------

    async def handle(self, request: Request, link: HostLink, sink: Sink) -> bytes:
        """Answer one host request; returns the encoded response. Never raises a :class:`WardenError`."""
        try:
            return await self._dispatch(request, link, sink)
        except WardenError as exc:
            return _rpc_error(request.id, exc)

    async def start(self, request: Request, link: HostLink, sink: Sink, answer: Answer) -> Started | None:
        """The engine-driven path (issue 13 item 4): a ``tools/call`` that has nothing to wait for before it is
        forwarded is decided and recorded in the host's reader and sent upstream with a continuation
        (:class:`_Forwarding`) that the server's reader, the session's timer or its end completes, writing the
        response to ``answer``; no task, cancel scope or event of its own. Returns None for anything else — a
        request whose decision needs a human, whose list must be read or re-read, whose lane must be opened, a
        flow source (its taint mark is written before the answer), a task, era translation, a refusal — which
        then takes :meth:`handle` in a task. Both paths decide, record and shape with the same methods.
        """
        if not self._fast_path or request.method != "tools/call":
            return None
        try:
            taken = self._taken(request, link)
        except WardenError:
            return None  # a malformed _meta, an unreadable pin store: handle() answers it as it always did
        if taken is None:
            return None
        ctx, params, name, decision = taken
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else None
        forwarding = _Forwarding(self, request, ctx, params, link, sink, answer)
        try:
            forwarding.index = await self._allowed(request, "tool", name, decision, arguments,
                                                   self.guard.screen_arguments(name, arguments)[1], ctx.caller)
            forwarded = self._answered(strip_host_meta(self._screened_arguments(request.method, params)), ctx)
            self._in_flight.add(forwarding.entry)  # the server may ask this request's host something (PX01)
            forwarding.sent = await self.upstream.start_request(request.method, forwarded, forwarding,
                                                                capabilities=self._declared(ctx),
                                                                log_level=ctx.log_level, lane=ctx.upstream,
                                                                hold=True)
        except WardenError as exc:
            await answer.send(forwarding.failed(exc))
        except trio.Cancelled:
            forwarding.cancelled()
            raise
        return forwarding

    def _taken(self, request: Request, link: HostLink) -> tuple[Context, dict[str, Any], str, Decision] | None:
        """What :meth:`start` needs of a call it takes (context, params, tool, an ALLOW decided as
        :meth:`_authorize` decides it), or None when the call is not one it takes."""
        prepared = self._prepared(request, link)
        if isinstance(prepared, bytes):
            return None
        ctx, params = prepared
        lane = self._lane_now(ctx, link)
        if lane is None:
            return None
        ctx = self._on_lane(ctx, lane, params, link)
        name = params.get("name")
        if not isinstance(name, str) or "task" in params or ctx.upstream is not ctx.era \
                or self._tasks_carried(ctx, link) or not self._lists_current(request.method) \
                or self.guard.flow_role(name).source is not None:
            return None
        arguments = params.get("arguments")
        self.guard.screen_arguments(name, arguments if isinstance(arguments, dict) else None, raw=request.params)
        in_band = self._can_ask_in_band(link, ctx)
        decision = self._decide(request.method, params, channel=in_band, session=link.session_key,
                                approval_channel=not in_band and self._approvals is not None,
                                principal=ctx.caller.principal)
        return (ctx, params, name, decision) if decision.effect is Effect.ALLOW else None

    async def _dispatch(self, request: Request, link: HostLink, sink: Sink) -> bytes:
        if request.method == "initialize":
            return encode_result(request.id, encode_json(await self._initialize(link)))
        prepared = self._prepared(request, link)
        if isinstance(prepared, bytes):
            return prepared
        ctx, params = prepared
        ctx = self._on_lane(ctx, await self._lane(ctx, link), params, link)
        method = request.method
        if method in ("resources/subscribe", "resources/unsubscribe") and ctx.upstream is not ctx.era:
            return encode_error(request.id, METHOD_NOT_FOUND, f"warden does not carry {method} to this server")
        handler = self._handlers.get(method, self._forwarded)
        return await handler(request, ctx, params, link, sink)

    def _prepared(self, request: Request, link: HostLink) -> tuple[Context, dict[str, Any]] | bytes:
        """A request's params and context (its ``upstream`` set by :meth:`_on_lane` once the lane is known), or
        the error response for a request warden refuses on its face (bad ``_meta``, unknown version or method)."""
        method = request.method
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
                          caller=Caller(host_name(meta.get(META_CLIENT_INFO)), link.principal))
            self.upstream.set_legacy_capabilities({})
        elif link.legacy is not None:
            ctx = link.legacy.context()
        else:
            return encode_error(request.id, INVALID_PARAMS,
                                "send initialize first, or carry the 2026-07-28 _meta (protocolVersion and "
                                "clientCapabilities) on every request")
        if method not in CLIENT_REQUESTS[ctx.era]:
            return encode_error(request.id, METHOD_NOT_FOUND, f"Method not found: {method}")
        return ctx, params

    @staticmethod
    def _on_lane(ctx: Context, lane: Era, params: dict[str, Any], link: HostLink) -> Context:
        """``ctx`` travelling on ``lane``: a legacy host's context comes from its link (built once per lane)."""
        if ctx.era is Era.LEGACY and link.legacy is not None:
            return link.legacy.context(params.get("_meta", {}).get("progressToken"), lane)
        return ctx if lane is ctx.upstream else dataclasses.replace(ctx, upstream=lane)

    # -- the handlers: one per method warden treats itself; everything else is forwarded as it is ---------------

    def _handler_table(self) -> dict[str, _Handler]:
        table: dict[str, _Handler] = {
            "ping": self._ping,
            "server/discover": self._discover_request,
            "logging/setLevel": self._set_level,
            "subscriptions/listen": self._listen,
            "tools/call": self._audited,
            "prompts/get": self._audited,
            "resources/read": self._read,
        }
        table.update(dict.fromkeys(LIST_METHODS, self._list))
        table.update(dict.fromkeys(("tasks/get", "tasks/result", "tasks/update", "tasks/cancel"), self._task_request))
        table["tasks/list"] = self._task_list
        return table

    async def _ping(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                    sink: Sink) -> bytes:
        return encode_result(request.id, b"{}")

    async def _discover_request(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                                sink: Sink) -> bytes:
        return encode_result(request.id, encode_json(await self._discover(link.principal)))

    async def _forwarded(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                         sink: Sink) -> bytes:
        return (await self._forward(request, ctx, params, sink))[0]

    async def _read(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                    sink: Sink) -> bytes:
        try:
            return await self._audited(request, ctx, params, link, sink)
        except PolicyError as exc:
            # To the host an unreadable resource is a resource not found: -32602 with its uri (SEP-2164).
            return encode_error(request.id, INVALID_PARAMS, f"{exc.message}. To allow it: {exc.hint}",
                                {"uri": params.get("uri"), "hint": exc.hint})

    async def _audited(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                       sink: Sink) -> bytes:
        """Decide, record the decision durably, only then forward; record the outcome (write-ahead)."""
        description = await self._connected()
        if "task" in params and request.method == "tools/call" and ctx.era is Era.LEGACY and \
                not self._tasks_carried(ctx, link):
            raise RemoteProtocolError("this server offers no task-augmented tools/call through warden; call it "
                                      "without the task parameter", jsonrpc_code=INVALID_PARAMS)
        if ctx.era is Era.MODERN and (ctx.upstream is Era.LEGACY or await self._needs_human(request.method, params,
                                                                                           ctx, link)):
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
                await self.upstream.legacy_lane(self.guard.declarable(link.legacy.capabilities, era=Era.LEGACY)):
            return Era.LEGACY
        return description.era

    def _lane_now(self, ctx: Context, link: HostLink) -> Era | None:
        """:meth:`_lane` when it is known without waiting (the server is connected and its instructions were
        checked, and a dual-era server's legacy session is up or was refused); None otherwise."""
        description = self.upstream.description
        if description is None or description is not self._observed or self.upstream.session_now() is None:
            return None
        if ctx.era is Era.LEGACY and description.era is Era.MODERN and link.legacy is not None:
            lane = self.upstream.legacy_lane_now()
            return None if lane is None else Era.LEGACY if lane else Era.MODERN
        return description.era

    async def _needs_human(self, method: str, params: Mapping[str, Any], ctx: Context, link: HostLink) -> bool:
        """A 2026 host that can show a form, for a request the policy wants a human for: warden asks it through
        an ``input_required`` round (an exchange), since it cannot put a question on the wire."""
        if not HostCapabilities.from_client_capabilities(ctx.capabilities).elicitation_form:
            return False
        await self._know_lists(method)
        return self._decide(method, params, channel=True, session=link.session_key,
                            principal=link.principal).effect in (Effect.ASK, Effect.CONFIRM)

    async def _decided_and_forwarded(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                                     sink: Sink) -> bytes:
        asker = _wire_asker(link, sink) if self._can_ask_in_band(link, ctx) else None
        index = await self._authorize(request, params, asker, ctx.caller, link.session_key)
        screen = _screen_of(self.guard, request.method, params)
        tasks = request.method == "tools/call" and self._tasks_carried(ctx, link)
        try:
            response, reply = await self._forward(request, ctx, self._screened_arguments(request.method, params),
                                                  sink, screen, tasks=tasks, link=link)
            self._note_task(params, ctx, link, reply, index, tasks=tasks)
            await self._tainted_by(request.method, params, link, index, ctx.caller)
        except WardenError as exc:
            self.recorder.outcome(index, method=request.method, result=None, error=exc.message,
                                  outcome=_OUTCOMES.get(type(exc), audit.Outcome.FAILED),
                                  redactions=screen.redactions() if screen else ())
            raise
        except trio.Cancelled:
            self.recorder.outcome(index, method=request.method, result=None, error="cancelled by the host",
                                  outcome=audit.Outcome.CANCELLED)
            raise
        self.recorder.outcome(index, method=request.method, result=reply.result, error=reply.message or None,
                              redactions=screen.redactions() if screen else ())
        return response

    def _screened_arguments(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The params to forward: arguments with what the content rules redact cut out (a ``deny`` finding was
        refused when the call was decided)."""
        name, arguments = params.get("name"), params.get("arguments")
        if method != "tools/call" or not isinstance(name, str) or not isinstance(arguments, dict):
            return params
        screened, findings = self.guard.screen_arguments(name, arguments)
        return {**params, "arguments": screened} if findings else params

    async def _initialize(self, link: HostLink) -> dict[str, Any]:
        assert link.legacy is not None, "the transport calls HostLink.accept_initialize first"
        self.upstream.set_legacy_capabilities(self.guard.declarable(link.legacy.capabilities, era=Era.LEGACY))
        description = await self._connected()
        lane = await self._lane(Context(Era.LEGACY, link.legacy.version, link.legacy.capabilities, None), link)
        result: dict[str, Any] = {
            "protocolVersion": link.legacy.version,
            "capabilities": present_capabilities(description.capabilities, upstream_era=lane, host_era=Era.LEGACY,
                                                 upstream_version=description.version,
                                                 host_version=link.legacy.version),
            "serverInfo": dict(description.server_info),
        }
        instructions = self._with_notice(self.guard.approved_instructions(description.instructions, link.principal))
        if instructions is not None:
            result["instructions"] = instructions
        return result

    async def _discover(self, principal: str | None) -> dict[str, Any]:
        description = await self._connected()
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": list(MODERN_VERSIONS),
            "capabilities": present_capabilities(description.capabilities, upstream_era=description.era,
                                                 host_era=Era.MODERN, upstream_version=description.version),
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {META_SERVER_INFO: dict(description.server_info)},
        }
        instructions = self._with_notice(self.guard.approved_instructions(description.instructions, principal))
        if instructions is not None:
            result["instructions"] = instructions
        return result

    async def _set_level(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                         sink: Sink) -> bytes:
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

    async def _call_upstream(self, method: str, params: Mapping[str, Any], ctx: Context, sink: Sink, *,
                             tasks: bool = False, link: HostLink | None = None) -> Reply:
        """Send one request upstream for a host request of ``ctx``. ``tasks``: tasks are carried for it (the 2026
        extension is declared; a ``tools/call`` that becomes a task keeps its progress token routed until the task
        ends, MS11 — to ``link``'s own channel once the request's stream is gone)."""
        async def progress(update: dict[str, Any]) -> None:
            await self._relay_progress(update, ctx, sink, link)

        def task_of(reply: Reply) -> str | None:
            try:
                created = created_task(reply.result_dict(), ctx.era) if reply.ok else None
            except (RemoteProtocolError, msgspec.DecodeError, TypeError):
                return None
            return created[0] if created is not None else None

        capabilities = self._declared(ctx)
        if tasks:
            capabilities["extensions"] = {TASKS_EXTENSION: {}}
        keep = task_of if tasks and method == "tools/call" and ctx.progress_token is not None else None
        return await self.upstream.request(method, params, capabilities=capabilities, log_level=ctx.log_level,
                                           on_progress=progress, lane=ctx.upstream, keep_progress=keep)

    def _declared(self, ctx: Context) -> dict[str, Any]:
        """What warden declares to a 2026 server on a request of ``ctx`` (``_meta``); a legacy session was told
        once, at ``initialize``, so nothing is built for a request travelling on one."""
        return self.guard.declarable(ctx.capabilities, era=Era.MODERN) if ctx.upstream is Era.MODERN else {}

    async def _relay_progress(self, update: dict[str, Any], ctx: Context, sink: Sink, link: HostLink | None) -> None:
        """The server's progress on a request of ``ctx``, under the host's own token, on the request's sink (or,
        once that is gone, ``link``'s own channel: a task's progress outlives its request, MS11)."""
        if ctx.progress_token is None:
            return
        forwarded = dict(update)
        forwarded["progressToken"] = ctx.progress_token
        message = encode_notification("notifications/progress", encode_json(forwarded))
        try:
            await sink.send(message)
        except trio.ClosedResourceError:
            if link is not None and link.unsolicited is not None and link.unsolicited is not sink:
                with contextlib.suppress(trio.ClosedResourceError):
                    await link.unsolicited.send(message)

    async def _forward(self, request: Request, ctx: Context, params: dict[str, Any],
                       sink: Sink, screen: _Screen | None = None, *, tasks: bool = False,
                       link: HostLink | None = None) -> tuple[bytes, Reply]:
        """Send the request upstream and shape the answer for the host's era; returns the encoded response and
        the server's final reply (as the server sent it). ``screen``: the content rules the final result passes
        through before anything of it is encoded for the host (they may refuse it: PolicyError). ``tasks``: the
        request declares the tasks extension, so a ``"task"`` result is valid."""
        description = await self._connected()
        forwarded = self._answered(strip_host_meta(params), ctx)
        reply = await self._call_upstream(request.method, forwarded, ctx, sink, tasks=tasks, link=link)
        for _ in range(MAX_INPUT_ROUNDS):
            shaped = self._shape(request, ctx, reply, description, screen, tasks=tasks)
            if shaped is not None:
                return shaped, reply
            if ctx.era is Era.MODERN:
                return encode_result(request.id, await self._passed_input_required(reply, ctx)), reply
            reply = await self._relay_input_required(request.method, forwarded, ctx, sink, reply.result_dict())
        raise RemoteProtocolError(f"the server asked for input more than {MAX_INPUT_ROUNDS} times",
                                  jsonrpc_code=INTERNAL_ERROR)

    def _shape(self, request: Request, ctx: Context, reply: Reply, description: ServerDescription,
               screen: _Screen | None, *, tasks: bool) -> bytes | None:
        """The server's reply as the host's response, shaped for its era, a result through ``screen`` first; None
        for a 2026 server's ``input_required`` result, which needs a round of its own (:meth:`_forward`).

        Raises:
            PolicyError: the content rules refused the result.
            RemoteProtocolError: the server's result is not one warden can carry.
        """
        if not reply.ok:
            assert reply.error is not None
            return encode_error_object(reply.error, request.id)
        assert reply.result is not None
        kind, stated = self._result_type(reply.result, tasks=tasks) if ctx.upstream is Era.MODERN \
            else ("complete", True)
        if kind == "input_required":
            return None
        shown = reply if screen is None else Reply(result=screen(reply.result))
        assert shown.result is not None
        if ctx.upstream is ctx.era and ctx.era is Era.LEGACY:
            return encode_result(request.id, shown.result)
        if ctx.upstream is Era.MODERN:
            if ctx.era is Era.MODERN:
                return encode_result(request.id, shown.result if stated else _state_complete(shown.result))
            return encode_result(request.id, encode_json(to_legacy_result(shown.result_dict())))
        return encode_result(request.id, encode_json(
            to_modern_result(shown.result_dict(), request.method, description.server_info)))

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
        if ctx.upstream is Era.MODERN:  # the server's own result passes through, its questions vetted
            tasks = request.method == "tools/call" and self._tasks_carried(ctx, link)
            kind, stated = self._result_type(step.result, tasks=tasks)
            if kind == "input_required":
                return encode_result(request.id, await self._passed_input_required(step, ctx))
            return encode_result(request.id, step.result if stated else _state_complete(step.result))
        return encode_result(request.id, encode_json(
            to_modern_result(step.result_dict(), request.method, description.server_info)))

    async def _run_exchange(self, exchange: Exchange, request: Request, params: dict[str, Any], ctx: Context,
                            link: HostLink) -> None:
        """Warden's side of an exchange: the decision (asking consent through the exchange if the host can show
        a form), the durable record, then the call with the server's questions routed to the exchange; a -32042
        (URL elicitation required, 2025-11-25) becomes URL-mode questions and a retry, never an error (PX09)."""
        method = request.method
        entry = _InFlight(link, NO_SINK, ctx, exchange)
        self._in_flight.add(entry)
        result: Reply | WardenError = Reply.failure(INTERNAL_ERROR, "the call did not run")
        index: int | None = None
        screen = _screen_of(self.guard, method, params)
        shown: Reply | None = None
        tasks = method == "tools/call" and self._tasks_carried(ctx, link)
        try:
            asker = exchange.ask if HostCapabilities.from_client_capabilities(ctx.capabilities).elicitation_form \
                else None
            index = await self._authorize(request, params, asker, ctx.caller, link.session_key)
            forwarded = strip_host_meta(self._screened_arguments(method, params))
            for _ in range(MAX_INPUT_ROUNDS):
                result = await self._call_upstream(method, forwarded, ctx, NO_SINK, tasks=tasks)
                if result.ok or result.code != URL_ELICITATION_REQUIRED:
                    break
                data = result.error_data()
                wanted = data.get("elicitations") if isinstance(data, dict) else None
                if not isinstance(wanted, list) or not wanted:
                    break
                answers = [await self._ask(link, None, "elicitation/create",
                                           question if isinstance(question, dict) else {}, ctx.capabilities,
                                           ctx.caller, asker=exchange.ask) for question in wanted]
                if not all(answer.ok for answer in answers):
                    break
            if screen is not None and isinstance(result, Reply) and result.ok and result.result is not None and (
                    ctx.upstream is not Era.MODERN or self._result_type(result.result, tasks=tasks)[0]
                    != "input_required"):
                shown = Reply(result=screen(result.result))
            if isinstance(result, Reply):
                self._note_task(params, ctx, link, result, index, tasks=tasks)
            await self._tainted_by(method, params, link, index, ctx.caller)
        except WardenError as exc:
            result = exc
        finally:
            self._in_flight.discard(entry)
        exchange.finish(shown if shown is not None and isinstance(result, Reply) else result)
        redactions = screen.redactions() if screen else ()
        if isinstance(result, Reply):
            self.recorder.outcome(index, method=method, result=result.result, error=result.message or None,
                                  redactions=redactions)
        else:
            self.recorder.outcome(index, method=method, result=None, error=result.message,
                                  outcome=audit.Outcome.FAILED, redactions=redactions)
        with trio.move_on_after(self._question_timeout):
            await exchange.collected.wait()
        self._exchanges.pop(exchange.id, None)

    def _result_type(self, raw: bytes, *, tasks: bool = False) -> tuple[str, bool]:
        """The result's type (absent means complete, LC16; unknown is invalid, LC17; ``"task"`` only on a request
        that declared the tasks extension, ``tasks``) and whether it was stated."""
        try:
            stated = _peek_result_type(raw).resultType
        except msgspec.DecodeError as exc:
            raise RemoteProtocolError("the server's resultType is not a string", jsonrpc_code=INTERNAL_ERROR) from exc
        return result_type({} if stated is None else {"resultType": stated}, tasks_declared=tasks), stated is not None

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
            asked = question.get("params") or {}
            if question["method"] == "elicitation/create" and isinstance(asked, dict) and \
                    asked.get("mode") == "url" and "elicitationId" not in asked:
                asked = {**asked, "elicitationId": secrets.token_urlsafe(16)}  # PX11: a legacy host needs one
            answer = await self._ask(link, sink, str(question["method"]), asked, ctx.capabilities, ctx.caller)
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

    # -- tasks (issue 15 item 2): carried where host and server speak the same form; each task has one owner ------

    def _tasks_carried(self, ctx: Context, link: HostLink) -> bool:
        """Whether this request of ``link`` may take part in tasks: host and server speak the same form on the
        lane it travels (2026: both declared the extension, the host on this very request, MS33; 2025-11-25: both
        negotiated that version and the server offers task-augmented ``tools/call``). Otherwise there is no
        defined translation, and tasks are not carried at all."""
        description = self.upstream.description
        if description is None or ctx.upstream is not ctx.era or description.era is not ctx.era:
            return False
        if ctx.era is Era.MODERN:
            return declares_extension(description.capabilities) and declares_extension(ctx.capabilities)
        if link.legacy is None or link.legacy.version != LEGACY_TASKS_VERSION \
                or description.version != LEGACY_TASKS_VERSION:
            return False
        known = self._legacy_tasks_offered
        if known is None or known[0] is not description:  # read once per description of the server, not per call
            known = self._legacy_tasks_offered = (description,
                                                  legacy_task_capability(description.capabilities) is not None)
        return known[1]

    def _note_task(self, params: Mapping[str, Any], ctx: Context, link: HostLink, reply: Reply,
                   index: int | None, *, tasks: bool) -> None:
        """Remember the task a ``tools/call`` created as ``link``'s, tied to the call's decision record (its
        outcome is recorded against that record when the task ends).

        Raises:
            RemoteProtocolError: a 2025-11-25 server answered with a task the call did not ask for, or a task
                warden cannot carry (a 2026 one the request did not declare was refused by the result type).
        """
        if not reply.ok or reply.result is None:
            return
        legacy_asked = ctx.era is Era.LEGACY and "task" in params
        if not (tasks and (ctx.era is Era.MODERN or legacy_asked)):
            if ctx.era is Era.LEGACY and b'"task"' in reply.result and "task" in reply.result_dict():
                raise RemoteProtocolError("the server answered with a task this call did not ask for",
                                          jsonrpc_code=INTERNAL_ERROR)
            return
        created = created_task(reply.result_dict(), ctx.era)
        if created is None:
            return  # the server answered at once: creating a task is its choice
        name = params.get("name")
        self._tasks.add(created[0], TaskEntry(link.id, ctx.era, name if isinstance(name, str) else "", index))

    async def _task_request(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                            sink: Sink) -> bytes:
        """``tasks/get``, ``tasks/result``, ``tasks/update``, ``tasks/cancel``: only for a task this host created
        through warden (refused, never forwarded, otherwise); the answer passes the content rules of the tool the
        task runs, and a task seen ending gets its outcome record, tied to the call's decision."""
        refusal = self._tasks_refused(request, ctx, link)
        if refusal is not None:
            return refusal
        task_id, entry = self._tasks.owned(params.get("taskId"), link.id)
        reply = await self._call_upstream(request.method, self._answered(strip_host_meta(params), ctx), ctx, sink,
                                          tasks=True)
        if not reply.ok:
            assert reply.error is not None
            if request.method == "tasks/result":  # the underlying call's own error, returned as it was
                self.upstream.release_progress(task_id)
                self._task_ended(task_id, "failed", None, reply.message or "the task failed")
            return encode_error_object(reply.error, request.id)
        assert reply.result is not None
        raw = reply.result
        if ctx.era is Era.MODERN:
            kind, stated = self._result_type(raw)
            if kind != "complete":
                raise RemoteProtocolError(f"the server answered {request.method} with resultType {kind!r}",
                                          jsonrpc_code=INTERNAL_ERROR)
            raw = raw if stated else _state_complete(raw)
        if request.method == "tasks/result":
            self.upstream.release_progress(task_id)
            raw = _Screen(self.guard, entry.tool)(raw)
            await self._tainted_by("tools/call", {"name": entry.tool}, link, entry.decision_index, ctx.caller)
            self._task_ended(task_id, "completed", raw, None)
            return encode_result(request.id, raw)
        if request.method == "tasks/update" or (request.method == "tasks/cancel" and ctx.era is Era.MODERN):
            return encode_result(request.id, raw)  # an acknowledgement; the status is seen through tasks/get
        task = reply.result_dict()
        status = task.get("status")
        if task.get("taskId") != task_id:
            raise RemoteProtocolError(f"the server answered {request.method} about another task",
                                      jsonrpc_code=INTERNAL_ERROR)
        if status in TERMINAL:
            self.upstream.release_progress(task_id)
        if ctx.era is Era.MODERN:  # questions only on a task waiting for them; a result through the content rules
            if status == "input_required":
                task["inputRequests"] = await self._task_questions(entry, task.get("inputRequests"), ctx)
            else:
                task.pop("inputRequests", None)
            if status == "completed" and isinstance(task.get("result"), dict):
                task["result"] = decode_object(_Screen(self.guard, entry.tool)(encode_json(task["result"])))
                await self._tainted_by("tools/call", {"name": entry.tool}, link, entry.decision_index, ctx.caller)
            raw = encode_json({"resultType": "complete", **task})  # stated to a 2026 host (LC16)
        if status != "completed" or ctx.era is Era.MODERN:  # a 2025-11-25 result comes with tasks/result
            error = task.get("error")
            self._task_ended(task_id, status, raw, error.get("message") if isinstance(error, dict) else
                             task.get("statusMessage") if isinstance(task.get("statusMessage"), str) else None)
        return encode_result(request.id, raw)

    def _tasks_refused(self, request: Request, ctx: Context, link: HostLink) -> bytes | None:
        """The answer to a task request warden does not carry for this host: -32021 to a 2026 host that did not
        declare the extension on this request (the server offers it), else method not found."""
        if self._tasks_carried(ctx, link):
            return None
        description = self.upstream.description
        if ctx.era is Era.MODERN and ctx.upstream is Era.MODERN and description is not None and \
                declares_extension(description.capabilities):
            return encode_error(request.id, MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing required client capability",
                                {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})
        return encode_error(request.id, METHOD_NOT_FOUND, f"warden does not carry {request.method} to this server")

    async def _task_list(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                         sink: Sink) -> bytes:
        """2025-11-25 ``tasks/list``: the server lists every task of warden's one session with it; the host sees
        only its own (a task retrievable by ``tasks/get`` for it stays listable, other hosts' never are)."""
        refusal = self._tasks_refused(request, ctx, link)
        if refusal is not None:
            return refusal
        reply = await self._call_upstream(request.method, strip_host_meta(params), ctx, sink, tasks=True)
        if not reply.ok:
            assert reply.error is not None
            return encode_error_object(reply.error, request.id)
        body = reply.result_dict()
        listed = body.get("tasks")
        if not isinstance(listed, list):
            raise RemoteProtocolError("the server's tasks/list has no tasks array", jsonrpc_code=INTERNAL_ERROR)
        body["tasks"] = [t for t in listed if isinstance(t, dict) and self._tasks.owns(t.get("taskId"), link.id)]
        return encode_result(request.id, encode_json(body))

    def _task_ended(self, task_id: str, status: object, raw: bytes | None, error: str | None) -> None:
        """The outcome record of a task seen ending (once), tied to the decision of the call that created it."""
        entry = self._tasks.ended(task_id, status)
        if entry is None:
            return
        if status == "cancelled":
            outcome, error = audit.Outcome.CANCELLED, error or "the task was cancelled"
        elif status == "failed":
            outcome, error = audit.Outcome.ERROR, error or "the task failed"
        else:
            is_error = raw is not None and b'"isError"' in raw and _reports_error(raw, entry.era)
            outcome = audit.Outcome.ERROR if is_error else audit.Outcome.OK
        self.recorder.outcome(entry.decision_index, method="tools/call", result=raw if status == "completed" else None,
                              error=error if status != "completed" else None, outcome=outcome,
                              target=f"task {task_id}")

    async def _task_notification(self, method: str, params: bytes | None) -> None:
        """A task's status notification reaches only the host that owns the task (none if no connected host
        does); one showing the task ended records its outcome. It carries the status alone: the questions a
        task asks and the result it inlines (both optional in a notification) reach the host only through
        ``tasks/get`` / ``tasks/result``, where they pass the policy and the content rules."""
        try:
            body = decode_object(params) if params else {}
        except (msgspec.DecodeError, TypeError):
            body = {}
        task_id = body.get("taskId")
        entry = self._tasks.get(task_id) if isinstance(task_id, str) else None
        if entry is None or not isinstance(task_id, str):
            log.info("%s: %s for a task warden did not carry; dropped", self._name, method)
            return
        status = body.get("status")
        if status in TERMINAL:
            self.upstream.release_progress(task_id)
            if status != "completed":  # a completed task's result is recorded when it is fetched
                message = body.get("statusMessage")
                self._task_ended(task_id, status, None, message if isinstance(message, str) else None)
        owner = next((link for link in self._links if link.id == entry.owner), None)
        if owner is None or owner.unsolicited is None or method not in SERVER_NOTIFICATIONS[owner.era]:
            log.info("%s: %s for a task whose host is not connected; dropped", self._name, method)
            return
        if "inputRequests" in body or "result" in body:  # questions and results only through tasks/get
            params = encode_json({k: v for k, v in body.items() if k not in ("inputRequests", "result")})
        with contextlib.suppress(trio.ClosedResourceError):
            await owner.unsolicited.send(encode_notification(method, params))

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
            consent = self.guard.pending_consent(self.guard.kind_of(request.method), principal=link.principal)
            if consent is not None:
                answer = await link.ask(sink, "elicitation/create", consent.params)
                if answer.ok:
                    await self.recorder.approved(await self.guard.apply_consent(consent, answer.result_dict()))
        visible = self.guard.visible(request.method, items, link.principal)
        kind = self.guard.kind_of(request.method)
        self._visible.setdefault(link.principal, {})[kind] = self.guard.visible_keys(kind, link.principal)
        notice = self._waiting_notice()
        if notice is not None and link.legacy is not None and link.unsolicited is not None:
            # On the host's own channel (stdio; an HTTP session's GET stream), not in this answer's stream: the
            # answer keeps its form whatever waits.
            with contextlib.suppress(trio.ClosedResourceError):
                await link.unsolicited.send(encode_notification("notifications/message", encode_json(
                    {"level": "warning", "logger": "warden", "data": notice})))
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
        """Every page of an upstream list (MS14, MS15) under the pager's bounds (issue 11: a repeated cursor, too
        many pages, entries or bytes end the list with an error): the items, the smallest ``ttlMs`` and whether any
        page was private (PX21); or the upstream's error reply.

        Raises:
            ListRefused: the list broke a paging rule (the message names the server and the rule).
        """
        pager = Pager(self._name, method, modern=ctx.upstream is Era.MODERN, limits=self.upstream.options.list_limits)
        while True:
            reply = await self._call_upstream(method, pager.params(params), ctx, sink)
            if not reply.ok:
                return reply
            assert reply.result is not None
            if pager.add(reply.result_dict(), len(reply.result), now=trio.current_time()):
                return pager.items, pager.ttl, pager.private

    async def _refresh(self, method: str) -> None:
        """Re-read an upstream list on warden's own account (a call before any list, or ``list_changed``)."""
        description = await self._connected()
        ctx = Context(description.era, description.version, {}, None, upstream=description.era)
        fetched = await self._fetch_all(method, {}, ctx, NO_SINK)
        if isinstance(fetched, Reply):
            raise RemoteProtocolError(f"the server refused {method}: {fetched.message}",
                                      jsonrpc_code=fetched.code or INTERNAL_ERROR)
        await self.recorder.pins(await self.guard.observe_list(method, fetched[0]))

    # -- policy on requests -------------------------------------------------------------------------------------

    @staticmethod
    def _can_ask_in_band(link: HostLink, ctx: Context) -> bool:
        """A human can be asked on the wire for this request: a legacy host that declared form elicitation. (A
        2026 host that can show a form is asked through an ``input_required`` round instead: :meth:`_needs_human`.)"""
        return ctx.era is Era.LEGACY and link.legacy is not None and link.legacy.host_capabilities.elicitation_form

    async def _tainted_by(self, method: str, params: Mapping[str, Any], link: HostLink, index: int | None,
                          caller: Caller) -> None:
        """A flow source's answer is about to reach the host: the session is marked first (durably), so no sink
        can run in it before a human clears it. A mark that cannot be written fails the call (fail closed)."""
        name = params.get("name")
        if method == "tools/call" and isinstance(name, str):
            await self.guard.mark_source(name, link.session_key, index, caller)

    async def _authorize(self, request: Request, params: Mapping[str, Any], asker: Asker | None,
                         caller: Caller, session: str | None = None) -> int | None:
        """Decide a ``tools/call`` / ``prompts/get`` / ``resources/read`` from ``caller``; ask a
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
        via: audit.Consent | None = None
        findings = self.guard.screen_arguments(name, arguments, raw=request.params)[1] if method == "tools/call" \
            else ()
        kind: EntryKind = "tool" if method == "tools/call" else "prompt" if method == "prompts/get" else "resource"
        for _ in range(3):
            decision = self._decide(method, params, channel=channel, confirmed=confirmed, session=session,
                                    approval_channel=asker is None and self._approvals is not None,
                                    principal=caller.principal)
            if decision.effect is Effect.ALLOW:
                return await self._allowed(request, kind, name, decision, arguments, findings, caller,
                                           confirmed=confirmed is not None, via=via)
            if decision.effect is Effect.DENY:
                break
            if decision.effect is Effect.ASK:
                consent = self.guard.pending_consent(kind, name if kind != "resource" else None,
                                                     principal=caller.principal)
                if consent is None or asker is None:
                    break
                answer = await asker("elicitation/create", consent.params)
                approved = await self.guard.apply_consent(consent, answer.result_dict()) if answer.ok else []
                await self.recorder.approved(approved)
                if not approved:
                    break
            elif asker is None:  # CONFIRM, nobody to ask in-band: the approval webhook, if there is one
                if self._approvals is None or method != "tools/call":
                    break
                digest = arguments_digest(arguments)
                verdict = await self._approvals.ask(ApprovalRequest(self._name, name, digest, decision.reason,
                                                                    str(decision.rule), session))
                if not verdict.approved:
                    await self.recorder.decided(method=method, target=name, decision=decision, approval=None,
                                                request=None, arguments=arguments, findings=findings, caller=caller)
                    raise PolicyError(f"the call to {name!r} was not approved: {verdict.reason}",
                                      hint="nothing was sent to the server")
                confirmed, via = digest, audit.Consent.WEBHOOK
            else:  # CONFIRM: bound to the digest of exactly these arguments
                confirmation = self.guard.call_confirmation(name, arguments, decision.reason)
                answer = await asker("elicitation/create", confirmation.params)
                confirmed = self.guard.confirmed(confirmation, answer.result_dict()) if answer.ok else None
                if confirmed is None:
                    await self.recorder.decided(method=method, target=name, decision=decision, approval=None,
                                                request=None, arguments=arguments, findings=findings, caller=caller)
                    raise PolicyError(f"the user did not confirm the call to {name!r}",
                                      hint="nothing was sent to the server")
        log.warning("%s: %s refused: %s", self._name, method, decision.reason)
        await self.recorder.decided(method=method, target=name, decision=decision, approval=None, request=None,
                                    arguments=arguments, findings=findings, caller=caller)
        raise self.guard.refuse(decision)

    async def _allowed(self, request: Request, kind: EntryKind, name: str, decision: Decision,
                       arguments: Mapping[str, Any] | None, findings: Sequence[ContentFinding], caller: Caller, *,
                       confirmed: bool = False, via: audit.Consent | None = None) -> int | None:
        """Record an allowed request's decision durably (write-ahead); returns the record's index.

        Raises:
            AuditError: the log could not take it: the request is refused.
        """
        return await self.recorder.decided(
            method=request.method, target=name, decision=decision, approval=self.guard.approval(kind, name),
            request=request.raw, arguments=arguments, findings=findings, confirmed=confirmed, caller=caller,
            consent=via)

    def _lists_current(self, method: str) -> bool:
        """Whether :meth:`_know_lists` has nothing to wait for: the list a decision on ``method`` rests on is known
        and no change the server announced is being re-read."""
        list_method = {"tools/call": "tools/list", "prompts/get": "prompts/list"}.get(method)
        if list_method is None or not self.guard.knows(list_method):
            return False
        return not self._stale or not any(m in (list_method, "resources/list", "resources/templates/list")
                                          for m in self._stale)

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

    def _decide(self, method: str, params: Mapping[str, Any], *, channel: bool, principal: str | None,
                confirmed: str | None = None, session: str | None = None, approval_channel: bool = False) -> Decision:
        name = params.get("uri" if method == "resources/read" else "name")
        if not isinstance(name, str):
            raise RemoteProtocolError(f"{method} needs a string {'uri' if method == 'resources/read' else 'name'}",
                                      jsonrpc_code=INVALID_PARAMS)
        if method == "tools/call":
            arguments = params.get("arguments")
            return self.guard.decide_call(name, arguments if isinstance(arguments, dict) else None, channel=channel,
                                          confirmed_digest=confirmed, session=session,
                                          approval_channel=approval_channel, principal=principal)
        if method == "prompts/get":
            return self.guard.decide_prompt(name, channel=channel, principal=principal)
        return self.guard.decide_read(name, channel=channel, principal=principal)

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
        if method in ("notifications/tasks/status", "notifications/tasks"):
            await self._task_notification(method, params)
            return
        if method == "notifications/subscriptions/acknowledged":
            self._check_acknowledgement(params)
            return
        if method == "notifications/elicitation/complete":
            await self._elicitation_complete(params)
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

    async def _elicitation_complete(self, params: bytes | None) -> None:
        """PX12: a URL-mode elicitation's completion goes only to the host that was asked it (none if unknown)."""
        try:
            elicitation_id = decode_object(params).get("elicitationId") if params else None
        except (msgspec.DecodeError, TypeError):
            elicitation_id = None
        link = self._elicited.pop(elicitation_id, None) if isinstance(elicitation_id, str) else None
        if link is None or link not in self._links or link.unsolicited is None or link.legacy is None:
            log.info("%s: elicitation completion for no host warden asked; dropped", self._name)
            return
        with contextlib.suppress(trio.ClosedResourceError):
            await link.unsolicited.send(encode_notification("notifications/elicitation/complete", params))

    async def _tell_hosts(self, method: str, params: bytes | None, *,
                          principals: set[str | None] | None = None) -> None:
        """``method`` to every connected host (each legacy session, each listen that asked for it), or only to
        those of ``principals``."""
        message = encode_notification(method, params)
        for link in list(self._links):
            if link.unsolicited is None or link.legacy is None or method not in SERVER_NOTIFICATIONS[link.era]:
                continue
            if principals is not None and link.principal not in principals:
                continue
            with contextlib.suppress(trio.ClosedResourceError):
                await link.unsolicited.send(message)
        await self._to_listeners(method, params, principals)

    # -- subscriptions/listen (2026 hosts, and warden's own listen on a 2026 server) ---------------------------

    async def _listen(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                      sink: Sink) -> bytes:
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
        asked = wanted.get("resourceSubscriptions")
        uris = [u for u in asked if isinstance(u, str)] if isinstance(asked, list) else []
        resources = capabilities.get("resources")
        if uris and description.era is Era.LEGACY and isinstance(resources, dict) and resources.get("subscribe"):
            subscribed = [uri for uri in uris if (await self.upstream.request("resources/subscribe", {"uri": uri})).ok]
            if subscribed:
                honored["resourceSubscriptions"] = subscribed
        listener = _Listener(sink, decode_json(request.id), honored, link.principal)
        meta = {META_SUBSCRIPTION_ID: listener.id}
        await sink.send(encode_notification("notifications/subscriptions/acknowledged",
                                            encode_json({"notifications": honored, "_meta": meta})))
        self._listeners.add(listener)
        try:
            await trio.sleep_forever()
        finally:
            self._listeners.discard(listener)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _to_listeners(self, method: str, params: bytes | None,
                            principals: set[str | None] | None = None) -> None:
        key = _LISTEN_NOTIFICATIONS.get(method)
        if not self._listeners or (key is None and method != "notifications/resources/updated"):
            return
        body = decode_object(params) if params else {}
        uri = body.get("uri")
        for listener in list(self._listeners):
            if key is not None and not listener.honored.get(key):
                continue
            if principals is not None and listener.principal not in principals:
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
                                       entry.ctx.caller, asker=entry.exchange.ask)
            if entry.link.legacy is not None:
                return await self._ask(entry.link, entry.sink, method, params, entry.link.legacy.capabilities,
                                       entry.link.legacy.caller)
        elif not links:
            legacy = [link for link in self._links if link.legacy is not None and link.unsolicited is not None]
            if len(legacy) == 1 and legacy[0].legacy is not None and legacy[0].unsolicited is not None:
                return await self._ask(legacy[0], legacy[0].unsolicited, method, params,
                                       legacy[0].legacy.capabilities, legacy[0].legacy.caller)
        return Reply.failure(METHOD_NOT_FOUND, "no single legacy client can be asked this question through warden")

    async def _admit(self, method: str, params: Mapping[str, Any], capabilities: Mapping[str, Any],
                     caller: Caller) -> tuple[int | None, dict[str, Any]] | _Refused:
        """The one gate every server question passes, whichever way it reaches the host (a wire request, an
        exchange, a 2026 ``input_required`` or a task's ``inputRequests``): the policy's decision (PX01-PX04, the
        EL14 rate), its record, and the question as the host may see it. Returns the record's index and the
        question, or the refusal the server is answered with and the rule that refused."""
        decision, recorded = self.guard.decide_question(method, params, capabilities)
        if not decision.allowed:
            if recorded:  # not each refusal of a flood (EL14): the guard counts them into the next record
                log.warning("%s: %s refused: %s", self._name, method, decision.reason)
                await self.recorder.decided(method=method, target=method, decision=decision, approval=None,
                                            request=None, caller=caller)
            # EL08 asks for -32602 for an undeclared elicitation mode; tools without sampling.tools is likewise a
            # bad request (SA07); a question the host cannot take at all is "method not found" to it.
            bad_params = method == "elicitation/create" or "tools" in params or "toolChoice" in params
            return _Refused(Reply.failure(INVALID_PARAMS if bad_params else METHOD_NOT_FOUND,
                                          f"refused: {decision.reason}"), str(decision.rule))
        try:
            index = await self.recorder.decided(method=method, target=method, decision=decision, approval=None,
                                                request=encode_json(dict(params)), caller=caller)
        except AuditError as exc:
            return _Refused(Reply.failure(INTERNAL_ERROR, f"warden cannot record this request, so it refuses it: "
                                                          f"{exc}"), "the audit log")
        body = dict(params)
        if method == "sampling/createMessage" and "includeContext" in body:
            body["includeContext"] = decision.include_context or "none"  # PX04, PX06
        if method == "elicitation/create" and self.guard.namespaced and isinstance(body.get("message"), str):
            body["message"] = f"[{self._name}] {body['message']}"  # behind warden serve: which server asks
        return index, body

    async def _passed_input_required(self, reply: Reply, ctx: Context) -> bytes:
        """A 2026 server's ``input_required`` result as a 2026 host gets it: the server's own (its
        ``requestState`` untouched, MS36), with only questions that passed :meth:`_passed_questions` and nothing
        but an ``InputRequiredResult``'s fields (content in it would pass no content rule)."""
        result = {k: v for k, v in reply.result_dict().items() if k in _INPUT_REQUIRED_FIELDS}
        result["inputRequests"] = await self._passed_questions(result.get("inputRequests", {}), ctx)
        return encode_json(result)

    async def _task_questions(self, entry: TaskEntry, requests: object, ctx: Context) -> dict[str, Any]:
        """A waiting task's ``inputRequests`` as its owner sees them in ``tasks/get``: a question not seen before
        passes :meth:`_passed_questions`; one already passed is shown as it was then (polling does not ask again,
        nor draw on the EL14 rate). Only the current wait's questions are kept."""
        if not isinstance(requests, dict):
            return await self._passed_questions(requests, ctx)
        shown: dict[str, Any] = {}
        asked: dict[bytes, dict[str, Any]] = {}
        for key, question in requests.items():
            seen = encode_json([key, question, ctx.capabilities, ctx.caller.client,  # PX01: what this host declared
                                ctx.caller.principal])
            if seen not in entry.asked:
                entry.asked[seen] = (await self._passed_questions({key: question}, ctx))[key]
            shown[key] = asked[seen] = entry.asked[seen]
        entry.asked = asked
        return shown

    def _answered(self, params: dict[str, Any], ctx: Context) -> dict[str, Any]:
        """A 2026 host's ``inputResponses`` on their way to a 2026 server (a retry, or ``tasks/update``): a roots
        answer keeps only the roots the policy allows (RT04-RT07), an elicitation answer carries ``content`` only
        when accepted (EL05). warden kept nothing of which question each key answered (the server's
        ``requestState`` is the server's), so each answer is judged by its shape."""
        responses = params.get("inputResponses")
        if ctx.era is not Era.MODERN or ctx.upstream is not Era.MODERN or not isinstance(responses, dict):
            return params
        kept: dict[str, Any] = {}
        for key, answer in responses.items():
            if isinstance(answer, dict) and "roots" in answer:
                answer = self.guard.filter_roots_answer(answer)
            if isinstance(answer, dict) and "action" in answer:  # an elicitation's (a sampling answer has none)
                answer = _content_when_accepted(answer, url_mode=False) or answer
            kept[key] = answer
        return {**params, "inputResponses": kept}

    async def _passed_questions(self, requests: object, ctx: Context) -> dict[str, Any]:
        """A 2026 server's ``inputRequests`` on their way to a 2026 host (an ``input_required`` result, or a task
        waiting for input): each passes :meth:`_admit` as a wire question would (invariant 6), and is recorded;
        one refused refuses the request, and the host sees none of them. The refusal names the rule, not the
        reason: a reason may quote the server's own words (a schema's property name), which must not reach the
        model's context as warden's; the reason is in the log and the record.

        Raises:
            RemoteProtocolError: a question warden cannot carry, or one the policy refuses.
        """
        if not isinstance(requests, dict):
            raise RemoteProtocolError("inputRequests must be an object", jsonrpc_code=INTERNAL_ERROR)
        passed: dict[str, Any] = {}
        for key, question in requests.items():
            method = question.get("method") if isinstance(question, dict) else None
            asked = question.get("params") or {} if isinstance(question, dict) else None
            if method not in INPUT_REQUEST_METHODS or not isinstance(asked, dict):
                raise RemoteProtocolError("the server asks a question warden cannot carry",
                                          jsonrpc_code=INTERNAL_ERROR)
            admitted = await self._admit(str(method), asked, ctx.capabilities, ctx.caller)
            if isinstance(admitted, _Refused):
                raise RemoteProtocolError(f"warden refused the server's {method} under {admitted.rule} "
                                          "(`warden audit show` has why)",
                                          jsonrpc_code=admitted.reply.code or INTERNAL_ERROR)
            passed[key] = _for_modern_host({"method": method, "params": admitted[1]})
        return passed

    async def _ask(self, link: HostLink, sink: Sink | None, method: str, params: Mapping[str, Any],
                   capabilities: Mapping[str, Any], caller: Caller, *, asker: Asker | None = None) -> Reply:
        """Ask a host (``caller``) a server's question if it declared the capability (PX01–PX04) and policy
        allows it: on the wire (``sink``), or through an exchange (``asker``) for a 2026 host."""
        admitted = await self._admit(method, params, capabilities, caller)
        if isinstance(admitted, _Refused):
            return admitted.reply
        index, body = admitted
        url_mode = method == "elicitation/create" and body.get("mode") == "url"
        if asker is not None:
            answer = await asker(method, body)
        else:
            assert sink is not None
            elicitation_id = body.get("elicitationId")
            if url_mode and isinstance(elicitation_id, str):
                self._elicited[elicitation_id] = link
                while len(self._elicited) > REMEMBERED_ELICITATIONS:
                    self._elicited.popitem(last=False)
            answer = await link.ask(sink, method, body)
        if method == "elicitation/create" and answer.ok:
            answer = _accepted_content_only(answer, url_mode=url_mode)
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
