"""One downstream peer as the gateway sees it: what it settled at ``initialize``, what one request declared, and
the questions warden asked it that still await an answer.

A transport owns a :class:`HostLink` per peer (the stdio host; an HTTP session, or the HTTP face's modern
stateless side) and hands the gateway a :class:`Sink` per request: where messages tied to that request go.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol, final

import trio

from warden.errors import RemoteProtocolError
from warden.policy import HostCapabilities, principal_session
from warden.protocol.eras import Era, negotiate_legacy
from warden.protocol.messages import INVALID_REQUEST, REQUEST_TIMEOUT, Notification, Request
from warden.protocol.session import Answered, Dropped, Reply, Session, string_ids

log = logging.getLogger(__name__)


class Sink(Protocol):
    """Somewhere to write messages to a host: the stdio channel, one request's SSE stream, a GET stream."""

    async def send(self, message: bytes) -> None:
        """Write one encoded message. Raises ``trio.ClosedResourceError`` once the host side is gone."""
        ...


class NullSink:
    """Where messages of warden's own requests go: nowhere (no host is waiting on them)."""

    async def send(self, message: bytes) -> None:
        return None


NO_SINK: Final = NullSink()


@final
class Rewritten:
    """A sink that passes each message on as ``rewrite`` makes it, or not at all where it says None."""

    def __init__(self, sink: Sink, rewrite: Callable[[bytes], bytes | None]) -> None:
        self._sink = sink
        self._rewrite = rewrite

    async def send(self, message: bytes) -> None:
        shown = self._rewrite(message)
        if shown is not None:
            await self._sink.send(shown)


After = Callable[[], None]
"""What is left to do once a response is written: its outcome record
(:meth:`~warden.gateway.recorder.Recorder.outcome_after`). Never waits, never raises."""


class Handled(NamedTuple):
    """A request's encoded response (:meth:`Served.handle`), and what the face runs once it has written it (or
    dropped it: the host cancelled the request, or left): the host's answer never waits for the outcome record."""

    message: bytes
    after: After | None = None


class Answer(Protocol):
    """Where a request taken by the engine-driven path (:meth:`Served.start`) gets its response: the face turns it
    into the host's answer (none for a request the host cancelled, PX19) on the host's channel."""

    async def send(self, response: bytes, *, hold: bool = False, after: After | None = None) -> None:
        """Deliver the response; may wait while the host is not reading (that wait is the back-pressure).
        ``hold``: the caller is a reader that calls :func:`~warden.transport.channel.flush_held` once done with
        what it read, so the response may wait for it (:meth:`~warden.transport.channel.MessageChannel.send`).
        ``after``: run once the response is written (or dropped: the host cancelled it, or left), as
        :class:`Handled` says."""
        ...

    def send_soon(self, response: bytes, *, after: After | None = None) -> None:
        """Deliver the response from code that must not wait (a server connection being torn down)."""
        ...


class Started(Protocol):
    """A request the engine-driven path took: in flight upstream, or already answered."""

    async def cancel(self) -> None:
        """The host cancelled it or went away: the server is told to stop, the outcome is recorded as cancelled,
        and the host gets no answer."""
        ...


class Served(Protocol):
    """What a face (stdio, HTTP) serves hosts in front of: one server's :class:`~warden.gateway.core.Gateway`, or
    the :class:`~warden.gateway.hub.Hub` of ``warden serve``."""

    def attach(self, link: HostLink) -> None: ...

    def detach(self, link: HostLink) -> None: ...

    def expect_legacy_host(self) -> None:
        """The face's one host speaks the legacy era (it sent ``initialize``)."""
        ...

    def known_tool(self, name: str) -> dict[str, Any] | None:
        """The definition of the tool hosts know as ``name`` from the last ``tools/list`` answered, or None."""
        ...

    async def handle(self, request: Request, link: HostLink, sink: Sink) -> Handled: ...

    async def start(self, request: Request, link: HostLink, sink: Sink, answer: Answer) -> Started | None:
        """Take ``request`` on the engine-driven path (no task of its own: it is decided in the host's reader and
        answered from the server's), or return None: the face then runs :meth:`handle` in a task. The forward may
        be held: the caller calls :func:`~warden.transport.channel.flush_held` once done with what it read."""
        ...

    async def host_notification(self, note: Notification, link: HostLink) -> None: ...


#: Longest host name kept for the audit log's ``client`` field (the record's limit for names).
_CLIENT_MAX = 256


def host_name(client_info: Any) -> str | None:
    """The host as it named itself (``clientInfo`` name and version), for the audit log's ``client`` field.

    Self-reported and untrusted: kept short, and anything that is not text a record can hold (a lone surrogate)
    is replaced, so a hostile ``clientInfo`` can neither bloat records nor make them unencodable.
    """
    if not isinstance(client_info, Mapping) or not isinstance(client_info.get("name"), str):
        return None
    version = client_info.get("version")
    text = f"{client_info['name']} {version}" if isinstance(version, str) and version else client_info["name"]
    return text.encode("utf-8", "replace").decode("utf-8")[:_CLIENT_MAX] or None


@final
@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, as its records name it: ``client``, the host as it named itself (self-reported,
    untrusted), and ``principal``, who the HTTP face authenticated (:mod:`warden.gateway.principals`; None on
    stdio, whose one host is the local user's own process)."""

    client: str | None = None
    principal: str | None = None


@final
@dataclass(slots=True)
class LegacyHost:
    """What a legacy host settled in ``initialize``: it holds for the whole session, so what requests derive from
    it (their :class:`Context`, the capabilities policy reads) is built once, not per request."""

    version: str
    capabilities: dict[str, Any]
    caller: Caller
    log_level: str | None = None
    initialized: bool = False
    host_capabilities: HostCapabilities = field(init=False)
    _contexts: dict[Era, Context] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.host_capabilities = HostCapabilities.from_client_capabilities(self.capabilities)

    def context(self, progress_token: Any = None, upstream: Era = Era.MODERN) -> Context:
        """The context of one request of this host travelling on the server session of era ``upstream``: built
        once per lane (again only when ``logging/setLevel`` changed the level), copied only for a request that
        carries a progress token."""
        cached = self._contexts.get(upstream)
        if cached is None or cached.log_level != self.log_level:
            cached = self._contexts[upstream] = Context(Era.LEGACY, self.version, self.capabilities, self.log_level,
                                                        upstream=upstream, caller=self.caller)
        return cached if progress_token is None else dataclasses.replace(cached, progress_token=progress_token)


@final
@dataclass(frozen=True, slots=True)
class Context:
    """What one host request declared: its era, version, capabilities, requested log level, progress token."""

    era: Era
    version: str
    capabilities: Mapping[str, Any]
    log_level: str | None
    progress_token: Any = None
    upstream: Era = Era.MODERN
    """The era of the server session this request travels on (a legacy host may get a dual-era server's legacy
    session; then nothing needs translating)."""
    caller: Caller = Caller()
    """Who sent it (:class:`Caller`), recorded with each decision."""


Unasked = Callable[[str, str, "Caller", "int | None"], Awaitable[bool]]
"""How a part of the gateway hands server content tied to no host request (a log line, a resource update, a
question asked while nothing is in flight) to the gateway's taint check before it reaches a host: ``(method, the
host's session key, caller, the audit record it has or None)``; False: it must not be delivered
(:meth:`~warden.gateway.core.Gateway._unasked`)."""


class UpstreamCall(Protocol):
    """How a part of the gateway sends one request upstream for a host request of ``ctx``: through the gateway's
    one call path (:meth:`~warden.gateway.core.Gateway._call_upstream`), which declares what the host may be
    asked and routes the server's progress to ``sink``. ``tasks``: the request carries the tasks extension."""

    async def __call__(self, method: str, params: Mapping[str, Any], ctx: Context, sink: Sink, *,
                       tasks: bool = False) -> Reply: ...


@final
@dataclass(slots=True)
class _Question:
    event: trio.Event = field(default_factory=trio.Event)
    reply: Reply | None = None


@final
class HostLink:
    """One downstream peer: a stdio host, or one HTTP session. Holds its handshake state and its session engine
    (:class:`~warden.protocol.session.Session`): the host's requests in flight, and the questions warden asked it
    that still await an answer.

    ``unsolicited`` is where messages not tied to a request go (server notifications, spontaneous questions):
    the stdio channel, or an HTTP GET stream while one is open. A link ``within`` another (``warden serve``'s
    link to one server for a host's link) uses the other's, as it is at the time: a GET stream opened later
    reaches it too.
    """

    def __init__(self, name: str, *, principal: str | None = None, question_timeout: float = 600.0,
                 within: HostLink | None = None, outgoing: Callable[[bytes], bytes | None] | None = None) -> None:
        self.name = name
        self._within = within
        self._outgoing = outgoing
        """For a link ``within`` another: what each message becomes on the other's channel, if anything
        (``warden serve`` shows a server's task ids under its name)."""
        self._unsolicited: Sink | None = None
        self.principal = principal
        """Who the HTTP face authenticated for every request on this link (a link never serves two)."""
        self.id = secrets.token_hex(12)  # what warden's request states are bound to (SEC08)
        self.session_key = f"link-{self.id}" if principal is None else principal_session(principal)
        """The host session flow taint is kept for: over HTTP the principal's (every session and request of one
        principal shares it, and it outlives a warden restart), on stdio the host process's (set by the face)."""
        self.legacy: LegacyHost | None = None
        self.session: Session[_Question] = Session(ids=string_ids, request_timeout=question_timeout,
                                                   max_request_time=question_timeout, progress_prefix=None)

    @property
    def unsolicited(self) -> Sink | None:
        if self._within is None:
            return self._unsolicited
        sink = self._within.unsolicited
        return sink if sink is None or self._outgoing is None else Rewritten(sink, self._outgoing)

    @unsolicited.setter
    def unsolicited(self, sink: Sink | None) -> None:
        self._unsolicited = sink

    @property
    def era(self) -> Era:
        return Era.LEGACY if self.legacy is not None else Era.MODERN

    def can_ask_in_band(self, ctx: Context) -> bool:
        """A human can be asked on the wire for this request (``ctx``): a legacy host that declared form
        elicitation. (A 2026 host that can show a form is asked through an ``input_required`` round instead.)"""
        return ctx.era is Era.LEGACY and self.legacy is not None and self.legacy.host_capabilities.elicitation_form

    async def ask(self, sink: Sink, method: str, params: Mapping[str, Any]) -> Reply:
        """Put a question to the host on ``sink`` under a warden id (PX17) and wait for its answer."""
        question = _Question()
        message, pending = self.session.send_request(method, dict(params), now=trio.current_time(),
                                                     waiter=question, progress=False)
        try:
            await sink.send(message)
            with trio.move_on_at(pending.deadline):
                await question.event.wait()
        except trio.ClosedResourceError:
            pass
        finally:
            cancel = self.session.give_up(pending, "no answer in time") if question.reply is None else None
        if question.reply is None:
            if cancel is not None:
                with contextlib.suppress(trio.ClosedResourceError):
                    await sink.send(cancel)
            return Reply.failure(REQUEST_TIMEOUT, f"the client did not answer {method} in time")
        return question.reply

    def answer(self, id_raw: bytes, reply: Reply) -> None:
        """The host answered a question. A response to an id warden did not ask is dropped (invariant 9)."""
        self.settled(self.session.settle(id_raw, reply))

    def settled(self, event: Answered[_Question] | Dropped) -> None:
        """Wake the question an answer settled, or log one nobody asked for (invariant 9)."""
        if isinstance(event, Dropped):
            log.warning("%s: dropped a response to unknown id %s", self.name, event.id[:64].decode("utf-8", "replace"))
            return
        event.pending.waiter.reply = event.reply
        event.pending.waiter.event.set()

    def accept_initialize(self, params: Mapping[str, Any]) -> None:
        """Take the legacy handshake's state at once, so requests pipelined behind ``initialize`` see it.

        Raises:
            RemoteProtocolError: a second ``initialize`` on the same link.
        """
        if self.legacy is not None:
            raise RemoteProtocolError("initialize was already received", jsonrpc_code=INVALID_REQUEST)
        capabilities = params.get("capabilities")
        self.legacy = LegacyHost(negotiate_legacy(params.get("protocolVersion")),
                                 capabilities if isinstance(capabilities, dict) else {},
                                 Caller(host_name(params.get("clientInfo")), self.principal))
