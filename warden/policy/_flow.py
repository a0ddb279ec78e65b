"""Dataflow policy: which tools bring untrusted content into a host session (*sources*) and which can carry data
out of it (*sinks*), layered like every other rule, and the facts :func:`warden.policy.decide` needs to refuse a
sink once a source has spoken in the same session (the "lethal trifecta": private data, untrusted content, a way
out).

Vocabulary (``[defaults.flow]`` / ``[servers.NAME.flow]``, in the user config and the org policy alike)::

    sources = ["fetch", "github__get_issue"]   # globs over a tool name, or over "server__tool"
    sinks = ["send_*"]
    exempt = ["get_time"]                       # neither, whatever the annotations say ("server__tool"
                                                # globs match the qualified name only)
    on_violation = "deny"                       # or "confirm": a human confirms each such call
    annotations = true                          # derive roles from the server's own hints (below)

Roles derived from annotations (only while ``annotations`` is on; they are hints of a hostile party, pinned with
the definition, so a server that lies has to lie in what a human approved): a tool whose annotations say
``readOnlyHint: true`` and ``openWorldHint: true`` is a source; a tool that is not ``readOnlyHint``, whose
``openWorldHint`` is not ``false``, of a server that can reach the network (an HTTP server, or a sandbox with
network), is a sink. A sandboxed stdio server has no network, so its tools are never derived sinks: name them.

Layering (no layer can undo what another made stricter): sources and sinks add up over both layers; an
``exempt`` glob removes roles listed in its own layer, and derived roles (a user's exempt not when the org set
``annotations = true`` itself); ``on_violation`` takes the least
permissive value (deny < confirm); ``annotations`` stays on if any layer turns it on.

The taint itself (which sources spoke in which session) is kept by :mod:`warden.policy._taint`; this module is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

from warden.policy._glob import glob_match

if TYPE_CHECKING:  # _effective builds a FlowPolicy, so it imports this module, not the other way round
    from warden.policy._effective import GlobRule, Setting, Source

__all__ = ["FLOW_SEPARATOR", "NEUTRAL", "FlowPolicy", "FlowRole", "TaintMark", "classify", "qualified_name"]

FLOW_SEPARATOR: Final = "__"
"""``server__tool``: how a flow glob names a tool of a given server (the gateway's namespacing spelling)."""


def qualified_name(server: str, tool: str) -> str:
    return f"{server}{FLOW_SEPARATOR}{tool}"


@final
@dataclass(frozen=True, slots=True)
class FlowPolicy:
    """One server's effective flow rules; each glob keeps the source (layer, file, line) it came from."""

    sources: tuple[GlobRule, ...]
    sinks: tuple[GlobRule, ...]
    exempt: tuple[GlobRule, ...]
    on_violation: Setting[str]
    annotations: Setting[bool]

    def to_json(self) -> dict[str, Any]:
        return {"sources": [g.pattern for g in self.sources], "sinks": [g.pattern for g in self.sinks],
                "exempt": [g.pattern for g in self.exempt], "on_violation": self.on_violation.value,
                "annotations": self.annotations.value}


@final
@dataclass(frozen=True, slots=True)
class FlowRole:
    """What a tool is to the flow policy: why it is a source and/or a sink (the deciding rule), None where not."""

    source: Source | None = None
    sink: Source | None = None


NEUTRAL: Final = FlowRole()


@final
@dataclass(frozen=True, slots=True)
class TaintMark:
    """A source whose content reached the host session: the server, the source ``tool`` (or, for other content of
    a server with a source tool, the method that carried it: ``resources/read``, ``prompts/get``, ...) and the
    audit index of the ``call.decided`` record it belongs to (``None`` when auditing is off, or when nothing was
    recorded for it) -- the evidence a refusal names."""

    server: str
    tool: str
    index: int | None

    def describe(self) -> str:
        where = f" (audit record #{self.index})" if self.index is not None else ""
        return f"{self.server}/{self.tool}{where}"


def _matches(pattern: str, names: tuple[str, str]) -> bool:
    return glob_match(pattern, names[0]) or glob_match(pattern, names[1])


def _exempts(pattern: str, names: tuple[str, str]) -> bool:
    """An ``exempt`` glob that names a server (``"time__*"``) matches the qualified name only: the bare tool name is
    the server's to choose, and a hostile server's tool called ``time__post`` must not pass for server ``time``'s
    tools. A source or sink glob keeps matching either (wider is stricter there)."""
    return glob_match(pattern, names[1]) if FLOW_SEPARATOR in pattern else _matches(pattern, names)


def classify(flow: FlowPolicy, server: str, tool: str, annotations: Mapping[str, Any] | None, *,
             reaches_network: bool, builtin: Callable[[str], Source]) -> FlowRole:
    """The role of ``server``'s ``tool`` (see the module docstring). ``annotations``: the tool's listed
    ``annotations`` (None: it gave none); ``builtin(key)`` names the built-in annotation rules. Pure."""
    names = (tool, qualified_name(server, tool))
    exempt_layers = {g.source.layer for g in flow.exempt if _exempts(g.pattern, names)}
    source: Source | None = None
    sink: Source | None = None
    # An exempt undoes derived roles, except a user's when the org itself required deriving them.
    undo_derived = "org" in exempt_layers or (bool(exempt_layers) and flow.annotations.source.layer != "org")
    if flow.annotations.value and not undo_derived:
        hints = annotations if isinstance(annotations, Mapping) else {}
        read_only = hints.get("readOnlyHint") is True
        open_world = hints.get("openWorldHint")
        if read_only and open_world is True:
            source = builtin("flow: readOnlyHint + openWorldHint tools are sources")
        if not read_only and open_world is not False and reaches_network:
            sink = builtin("flow: tools that write and can reach the network are sinks")
    listed_source = next((g for g in flow.sources if g.source.layer not in exempt_layers
                          and _matches(g.pattern, names)), None)
    listed_sink = next((g for g in flow.sinks if g.source.layer not in exempt_layers
                        and _matches(g.pattern, names)), None)
    return FlowRole(source=listed_source.source if listed_source is not None else source,
                    sink=listed_sink.source if listed_sink is not None else sink)
