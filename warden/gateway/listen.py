"""What hosts are told unasked, and ``subscriptions/listen`` both ways.

A server's notifications reach every connected host that can take them: a legacy session on its own channel, a
2026 host only through a ``subscriptions/listen`` it holds open (tagged with that listen's id, MS29). A 2026 server
likewise announces changes only on a listen, so warden keeps one open on it (MS27) — without it a changed list
would be neither quarantined nor told. :class:`Listeners` exists to hold those open listens and to be the one
place a notification is fanned out to hosts, whoever caused it (the server, or an approval made anywhere).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any, Final, final

import trio

from warden.errors import UpstreamError, WardenError
from warden.gateway.link import Caller, Context, HostLink, Sink, Unasked
from warden.protocol.eras import META_SUBSCRIPTION_ID, SERVER_NOTIFICATIONS, Era
from warden.protocol.messages import (
    Request,
    decode_json,
    decode_object,
    encode_json,
    encode_notification,
    encode_result,
)
from warden.upstream.connection import ServerDescription, Upstream

log = logging.getLogger(__name__)

_LISTEN_KEYS: Final[Mapping[str, str]] = {"toolsListChanged": "tools", "promptsListChanged": "prompts",
                                           "resourcesListChanged": "resources"}
_LISTEN_NOTIFICATIONS: Final[Mapping[str, str]] = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}
MAX_LISTEN_URIS: Final = 256
"""The most resources one listen subscribes to (the first named): each is a decision recorded in the audit log
and a request to the server, so a host naming a million would have warden write and send a million."""


Subscribe = Callable[[Request, str, Context, HostLink, Hashable], Awaitable[bool]]
"""Subscribe a legacy server to one URI of a host's listen (the holder), if that host may read it; whether it was."""
Release = Callable[[Hashable], None]
"""A listen (the holder) that ended no longer holds its URIs: the server is unsubscribed from each no one else
holds."""


@final
@dataclass(slots=True, eq=False)
class _Listener:
    """A host's open ``subscriptions/listen``: where to send, its id (the subscription id), what it asked for."""

    sink: Sink
    id: Any
    honored: dict[str, Any]
    session: str
    """Its host's flow-taint session (what the server tells it may taint it)."""
    principal: str | None = None
    """Whom the face authenticated for it: what an approval changed is told to the principals it changed for."""
    lost: trio.Event = field(default_factory=trio.Event)
    """Set when a restarted server could not be subscribed again to one of its URIs: the listen ends."""


@final
class Listeners:
    """The hosts that hear what changed: ``links`` (the gateway's connected hosts) and the listens open now."""

    def __init__(self, *, name: str, links: Set[HostLink], upstream: Callable[[], Upstream],
                 connected: Callable[[], Awaitable[ServerDescription]], unasked: Unasked,
                 subscribe: Subscribe, release: Release) -> None:
        self._name = name
        self._unasked = unasked
        self._links = links
        self._upstream = upstream
        self._connected = connected
        self._subscribe = subscribe
        self._release = release
        self._listeners: set[_Listener] = set()
        self._wanted_upstream: dict[str, bool] = {}

    def principals(self) -> set[str | None]:
        """Whom the connected hosts and open listens were authenticated as (None: stdio's one local host)."""
        return {*(link.principal for link in self._links), *(listener.principal for listener in self._listeners)}

    def watching(self, uri: str) -> set[str | None]:
        """Whom the open listens subscribed to ``uri`` (each decided like a read of it) were authenticated as."""
        return {listener.principal for listener in self._listeners
                if uri in (listener.honored.get("resourceSubscriptions") or ())}

    async def tell(self, method: str, params: bytes | None, *, principals: Set[str | None] | None = None,
                   from_server: bool = False) -> None:
        """``method`` to every connected host (each legacy session, each listen that asked for it), or only to
        those of ``principals``. ``from_server``: the server's own words (a log line, a resource update), which
        pass the gateway's taint check for each host they reach (``unasked``)."""
        message = encode_notification(method, params)
        for link in list(self._links):
            if link.unsolicited is None or link.legacy is None or method not in SERVER_NOTIFICATIONS[link.era]:
                continue
            if principals is not None and link.principal not in principals:
                continue
            if method in _LISTEN_NOTIFICATIONS and not link.legacy.initialized:
                continue  # it lists once initialized; told now, it would hear of lists it never saw, before its answer
            if from_server and not await self._unasked(method, link.session_key, link.legacy.caller, None):
                continue
            with contextlib.suppress(trio.ClosedResourceError):
                await link.unsolicited.send(message)
        await self._to_listeners(method, params, principals, from_server=from_server)

    async def listen(self, request: Request, ctx: Context, params: dict[str, Any], link: HostLink,
                     sink: Sink) -> bytes:
        """Serve a host's ``subscriptions/listen`` whatever the server's era: acknowledge what warden can deliver
        (MS28), then forward matching change notifications tagged with the listen's id (MS29) until the host
        ends it (``notifications/cancelled`` or closing the stream; the request then gets no response). A legacy
        server is subscribed to the resources it names that its host may read, and unsubscribed from those no one
        else holds when it ends (:class:`~warden.gateway.subscriptions.Subscriptions`).

        A restarted server that could not be subscribed again to one of them (:meth:`lost`) ends the listen with
        the completion result (``resultType: complete``, its subscription id in ``_meta``): the spec's way for the
        side serving a listen to end it (Graceful Closure); an error would say the request failed, which it did
        not. Left open, the listen would never hear of that resource again, unaware; ended, its host listens
        again, and that listen's acknowledgement says what is subscribed now (MS28)."""
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
        uris = list(dict.fromkeys(u for u in asked if isinstance(u, str)))[:MAX_LISTEN_URIS] \
            if isinstance(asked, list) else []
        resources = capabilities.get("resources")
        listener = _Listener(sink, decode_json(request.id), honored, link.session_key, link.principal)
        subscribed: list[str] = []
        try:
            if uris and description.era is Era.LEGACY and isinstance(resources, dict) and resources.get("subscribe"):
                for uri in uris:
                    if await self._subscribe(request, uri, ctx, link, listener):
                        subscribed.append(uri)
                if subscribed:
                    honored["resourceSubscriptions"] = subscribed
            meta = {META_SUBSCRIPTION_ID: listener.id}
            await sink.send(encode_notification("notifications/subscriptions/acknowledged",
                                                encode_json({"notifications": honored, "_meta": meta})))
            self._listeners.add(listener)
            await listener.lost.wait()
        finally:  # ended however it ends (cancelled, closed, its host gone): its subscriptions are let go
            self._listeners.discard(listener)
            self._release(listener)
        return encode_result(request.id, encode_json({"resultType": "complete", "_meta": meta}))

    def lost(self, uri: str, holders: Set[Hashable]) -> None:
        """A restarted server was not subscribed again to ``uri``: each open listen among ``holders`` ends
        (:meth:`listen`; one still being subscribed ends once acknowledged)."""
        for holder in holders:
            if isinstance(holder, _Listener):
                holder.lost.set()

    async def _to_listeners(self, method: str, params: bytes | None, principals: Set[str | None] | None = None, *,
                            from_server: bool = False) -> None:
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
            if from_server and not await self._unasked(method, listener.session, Caller(None, listener.principal),
                                                       None):
                continue
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
                await self._upstream().request("subscriptions/listen", {"notifications": wanted}, stream=True,
                                               with_progress_token=False)
            except UpstreamError as exc:
                log.info("%s: the listen stream ended (%s); listening again", self._name, exc.message)
            await trio.sleep(1.0)

    async def acknowledged(self, method: str, params: bytes | None) -> None:
        """MS28: what the server acknowledged is what warden is subscribed to; anything else is not."""
        acknowledged = decode_object(params).get("notifications") if params else None
        acknowledged = acknowledged if isinstance(acknowledged, dict) else {}
        missing = [k for k in self._wanted_upstream if acknowledged.get(k) is not True]
        if missing:
            log.warning("%s: the server did not acknowledge %s; those changes will not be heard",
                        self._name, ", ".join(missing))
