"""Finding an upstream's era over stdio, and checking the answers of both handshakes. Pure: no I/O, no clock.

The probe follows the 2026-07-28 stdio backward-compatibility rule (ER03–ER08): send ``server/discover`` with the
preferred modern version first; a ``DiscoverResult`` or a recognised modern error (-32020, -32021, -32022) means
modern; *anything* else — any other error code, an unrecognised result, a timeout, the process closing — means
legacy, and the caller sends ``initialize`` (on a fresh process if the old one died or hung). The fallback is never
keyed to one error code.

The caller drives :class:`StdioProbe` with what happened and does what the returned step says::

    step = probe.start()                      # SendDiscover(version, capabilities)
    step = probe.on_result(result_dict)       # Modern | Legacy | Incompatible | SendDiscover (retry)
    step = probe.on_error(code, data)         # same
    step = probe.on_timeout() / on_closed()   # Legacy(fresh_process=True)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from warden.errors import IncompatibleServer, LocalProtocolError
from warden.protocol.eras import LEGACY_VERSIONS, META_SERVER_INFO, MODERN_VERSIONS
from warden.protocol.messages import (
    HEADER_MISMATCH,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
)

MODERN_ERRORS: Final = frozenset({HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION})
MAX_PROBE_ATTEMPTS: Final = 3


class Implementation(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    version: str


#: What of a server's ``serverInfo`` warden passes on to hosts: names and words, never a URL. ``icons`` and
#: ``websiteUrl`` are fetched or opened by a host, outside any sandbox, and their text is chosen by a server that
#: may have read the user's files first: a way out for a server warden gives no network (nothing of
#: ``serverInfo`` is pinned or reviewed, unlike a tool's icons).
SHOWN_SERVER_INFO: Final = ("name", "title", "version", "description")


def shown_server_info(info: Mapping[str, Any] | None, *, fallback_name: str) -> dict[str, Any]:
    """The ``serverInfo`` hosts are told: the strings of :data:`SHOWN_SERVER_INFO` of the server's own (a name and
    a version always: ``fallback_name`` and ``"unknown"`` when it gave none)."""
    shown = {key: value for key in SHOWN_SERVER_INFO
             if isinstance(value := (info or {}).get(key), str)}
    shown.setdefault("name", fallback_name)
    shown.setdefault("version", "unknown")
    return shown


class DiscoverResult(BaseModel):
    """The fields warden reads from ``server/discover`` (ER04). Unknown fields are kept, not dropped."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    supported_versions: list[str] = Field(alias="supportedVersions", min_length=1)
    capabilities: dict[str, Any]
    instructions: str | None = None
    result_type: str = Field(default="complete", alias="resultType")
    meta: dict[str, Any] = Field(default_factory=dict, alias="_meta")

    def server_info(self) -> dict[str, Any] | None:
        info = self.meta.get(META_SERVER_INFO)
        return info if isinstance(info, dict) else None


class InitializeResult(BaseModel):
    """The fields warden reads from a legacy ``initialize`` answer."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    protocol_version: str = Field(alias="protocolVersion")
    capabilities: dict[str, Any]
    server_info: Implementation = Field(alias="serverInfo")
    instructions: str | None = None


# --- steps the probe asks for -------------------------------------------------------------------------------------

@final
@dataclass(frozen=True, slots=True)
class SendDiscover:
    version: str
    capabilities: Mapping[str, Any] = field(default_factory=dict)


@final
@dataclass(frozen=True, slots=True)
class Modern:
    version: str
    discover: DiscoverResult


@final
@dataclass(frozen=True, slots=True)
class Legacy:
    """Fall back to ``initialize``. ``fresh_process``: the old process died or hung; start a new one first."""

    fresh_process: bool
    reason: str


@final
@dataclass(frozen=True, slots=True)
class Incompatible:
    reason: str


ProbeStep = SendDiscover | Modern | Legacy | Incompatible


QUOTED_MAX: Final = 200
"""Characters of a server's value quoted in a probe's reason, which reaches a host's error and warden's log: a
server listing a megabyte of versions gets a short reason (escaping is the output channel's)."""


def _quoted(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= QUOTED_MAX else shown[:QUOTED_MAX] + "…"


class _State(enum.Enum):
    IDLE = "idle"
    AWAITING = "awaiting"
    DONE = "done"


def _pick(offered: Sequence[object], ours: Sequence[str]) -> str | None:
    """The newest of ``ours`` that the server also offers."""
    for version in reversed(ours):
        if version in offered:
            return version
    return None


@final
class StdioProbe:
    """One run of the stdio era probe. Single use; any call out of order raises ``LocalProtocolError``."""

    def __init__(self, modern_versions: Sequence[str] = MODERN_VERSIONS) -> None:
        self._modern = tuple(modern_versions)
        self._state = _State.IDLE
        self._attempts = 0
        self._sent: SendDiscover | None = None

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    def start(self) -> SendDiscover:
        self._expect(_State.IDLE)
        return self._send(SendDiscover(self._modern[-1]))

    def on_result(self, result: Mapping[str, Any]) -> ProbeStep:
        self._expect(_State.AWAITING)
        try:
            discover = DiscoverResult.model_validate(result)
        except ValidationError:
            return self._finish(Legacy(False, "server/discover answered with something that is not a DiscoverResult"))
        if discover.result_type != "complete":
            return self._finish(Legacy(False, f"server/discover answered resultType {_quoted(discover.result_type)}"))
        return self._choose(discover.supported_versions, discover)

    def on_error(self, code: int, data: object) -> ProbeStep:
        self._expect(_State.AWAITING)
        if code not in MODERN_ERRORS:
            return self._finish(Legacy(False, f"server/discover answered error {code}: a legacy server"))
        assert self._sent is not None
        if code == UNSUPPORTED_PROTOCOL_VERSION:
            supported = data.get("supported") if isinstance(data, dict) else None
            if not isinstance(supported, list):
                return self._finish(Incompatible("-32022 without a data.supported list"))
            return self._choose(supported, None)
        if code == MISSING_REQUIRED_CLIENT_CAPABILITY:
            required = data.get("requiredCapabilities") if isinstance(data, dict) else None
            if not isinstance(required, dict) or self._attempts >= MAX_PROBE_ATTEMPTS:
                return self._finish(Incompatible("server/discover keeps requiring capabilities warden cannot give"))
            return self._send(SendDiscover(self._sent.version, required))
        if self._attempts >= MAX_PROBE_ATTEMPTS:
            return self._finish(Incompatible("server/discover keeps failing with -32020 (header mismatch)"))
        return self._send(self._sent)

    def on_timeout(self) -> Legacy:
        self._expect(_State.AWAITING)
        step = Legacy(True, "no answer to server/discover in time")
        self._finish(step)
        return step

    def on_closed(self) -> Legacy:
        self._expect(_State.AWAITING)
        step = Legacy(True, "the server closed its output when asked server/discover")
        self._finish(step)
        return step

    def _choose(self, offered: Sequence[object], discover: DiscoverResult | None) -> ProbeStep:
        assert self._sent is not None
        modern = _pick(offered, self._modern)
        if modern is not None:
            if discover is not None and modern == self._sent.version:
                return self._finish(Modern(modern, discover))
            if self._attempts >= MAX_PROBE_ATTEMPTS:
                return self._finish(Incompatible("the server keeps refusing the modern versions it lists"))
            return self._send(SendDiscover(modern, self._sent.capabilities))
        if _pick(offered, LEGACY_VERSIONS) is not None:
            return self._finish(Legacy(False, "the server lists only legacy versions warden speaks"))
        return self._finish(Incompatible(f"the server supports only {_quoted(list(offered))}"))

    def _send(self, step: SendDiscover) -> SendDiscover:
        self._attempts += 1
        self._sent = step
        self._state = _State.AWAITING
        return step

    def _finish(self, step: ProbeStep) -> ProbeStep:
        self._state = _State.DONE
        return step

    def _expect(self, state: _State) -> None:
        if self._state is not state:
            raise LocalProtocolError(f"probe is {self._state.value}, not {state.value}")


def check_initialize_result(result: Mapping[str, Any]) -> InitializeResult:
    """Validate a legacy ``initialize`` answer (LC04, LC05).

    Raises:
        IncompatibleServer: the answer is malformed, or names a version warden cannot speak. The caller
            disconnects (stops the process) rather than run a protocol it never agreed to.
    """
    try:
        init = InitializeResult.model_validate(result)
    except ValidationError as exc:
        raise IncompatibleServer(f"the server's initialize answer is malformed: {exc.errors()[0]['msg']}") from exc
    if init.protocol_version not in LEGACY_VERSIONS:
        raise IncompatibleServer(
            f"the server answered initialize with protocol version {init.protocol_version!r}, which warden cannot "
            f"speak over initialize (it speaks {', '.join(LEGACY_VERSIONS)})",
            hint="upgrade warden, or use a server release that speaks one of these versions")
    return init
