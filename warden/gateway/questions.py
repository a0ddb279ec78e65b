"""May this host be asked this question? The per-hop capability check for server->client requests (PX01–PX04).

A server's question (sampling, elicitation, roots) reaches a host only if *that host* declared *that exact*
capability — on the very request being answered (modern) or for its session (legacy) — down to the mode:
``elicitation.url``, ``sampling.tools`` and ``sampling.context`` each need their own declaration. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, final

from warden.protocol.messages import INVALID_PARAMS, METHOD_NOT_FOUND


@final
@dataclass(frozen=True, slots=True)
class Refusal:
    code: int
    reason: str


def elicitation_modes(capabilities: Mapping[str, Any]) -> frozenset[str]:
    """Modes a client declared: ``elicitation: {}`` means form only (EL01)."""
    declared = capabilities.get("elicitation")
    if not isinstance(declared, dict):
        return frozenset()
    modes = {mode for mode in ("form", "url") if isinstance(declared.get(mode), dict)}
    return frozenset(modes or {"form"})


def check_question(method: str, params: Mapping[str, Any], capabilities: Mapping[str, Any]) -> Refusal | None:
    """None if the host may be asked; otherwise the error to answer the server with."""
    if method == "roots/list":
        if not isinstance(capabilities.get("roots"), dict):
            return Refusal(METHOD_NOT_FOUND, "the client did not declare roots")
        return None
    if method == "sampling/createMessage":
        sampling = capabilities.get("sampling")
        if not isinstance(sampling, dict):
            return Refusal(METHOD_NOT_FOUND, "the client did not declare sampling")
        if ("tools" in params or "toolChoice" in params) and not isinstance(sampling.get("tools"), dict):
            return Refusal(INVALID_PARAMS, "tools in a sampling request need the client's sampling.tools (SA07)")
        return None
    if method == "elicitation/create":
        mode = params.get("mode", "form")
        if mode not in ("form", "url"):
            return Refusal(INVALID_PARAMS, f"unknown elicitation mode {mode!r}")
        if mode not in elicitation_modes(capabilities):
            return Refusal(INVALID_PARAMS, f"the client did not declare elicitation.{mode} (EL08)")
        return None
    return Refusal(METHOD_NOT_FOUND, f"{method!r} is not a question warden forwards")


def scope_sampling(params: dict[str, Any]) -> dict[str, Any]:
    """PX04/PX06: through warden, ``includeContext`` other than "none" cannot be limited to the asking server, so it
    is forwarded as "none" (which needs no ``sampling.context`` from the host)."""
    include = params.get("includeContext")
    if include is not None and include != "none":
        params = dict(params)
        params["includeContext"] = "none"
    return params
