"""The pure halves of in-band consent: build ``elicitation/create`` params, read the answer into an approval.

warden asks the human *through the host* only when the host declared form elicitation; the host shows the
message to its user. The request names warden and the server, shows what is being approved (each definition with
hidden characters named, its digest and the scanner's findings) and asks one boolean. The answer approves exactly
the digests that were shown, never anything taken from the answer itself, so neither the server nor a model can
approve something else. A per-call confirmation is bound the same way to the SHA-256 of the exact arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

from warden.consent._terminal import describe_launch
from warden.errors import PolicyError
from warden.policy import Decision, EntryKind, PinEntry, render_visible
from warden.policy.pins import arguments_digest, render_definition

__all__ = ["CallConfirmation", "PinConsent", "build_call_confirmation", "build_pin_consent",
           "read_call_confirmation", "read_pin_consent", "refusal"]

_APPROVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve exactly what is shown above",
                               "description": "Any later change to these definitions will need approval again.",
                               "default": False}},
    "required": ["approve"],
}


@final
@dataclass(frozen=True, slots=True)
class PinConsent:
    """A question warden asks: the ``elicitation/create`` params and the exact digests an "approve" covers."""

    server: str
    items: tuple[tuple[EntryKind, str, str], ...]
    params: Mapping[str, Any]


@final
@dataclass(frozen=True, slots=True)
class CallConfirmation:
    server: str
    tool: str
    arguments_digest: str
    params: Mapping[str, Any]


def build_pin_consent(server: str, entries: Sequence[PinEntry], *, package_store: str | None = None) -> PinConsent:
    """Ask the host's user to approve ``entries`` (pending or changed) of ``server``: a launch in words, as the
    terminal review says it (its JSON is thirty-odd mounts a person cannot judge in a host's dialog), every other
    entry as its definition. ``package_store``: see :func:`~warden.consent.describe_launch`."""
    if not entries:
        raise ValueError("nothing to ask about")
    lines = [f"warden (the security gateway that runs MCP server {server!r} for you) needs your approval.",
             f"Server {server!r} offers {len(entries)} definition(s) that are new or changed. Nothing below is "
             "usable until you approve it:", ""]
    for e in entries:
        status = "CHANGED since approved" if e.approved_digest else "NEW"
        lines.append(f"== {e.label} ({status}), digest {e.digest}")
        lines.extend(describe_launch(e.definition, package_store=package_store) if e.kind == "server"
                     else render_definition(e.definition))
        for f in e.findings:
            lines.append(f"   finding: {f}")
        lines.append("")
    lines.append("Approving covers exactly these digests. Decline if anything looks wrong, and review it in a "
                 f"terminal with: warden pins review {server}")
    params = {"mode": "form", "message": "\n".join(lines), "requestedSchema": _APPROVE_SCHEMA}
    return PinConsent(server, tuple((e.kind, e.key, e.digest) for e in entries), params)


def _accepted(result: Any, field: str) -> bool:
    if not isinstance(result, Mapping) or result.get("action") != "accept":
        return False
    content = result.get("content")
    return isinstance(content, Mapping) and content.get(field) is True


def read_pin_consent(request: PinConsent, result: Any) -> tuple[tuple[EntryKind, str, str], ...] | None:
    """The approved ``(kind, key, digest)`` items (exactly ``request.items``) or None (declined, cancelled,
    malformed). Pass the items to :meth:`PinStore.approve_exact` with ``by="elicitation"``."""
    return request.items if _accepted(result, "approve") else None


def build_call_confirmation(server: str, tool: str, arguments: Mapping[str, Any] | None, *,
                            tool_digest: str, reason: str | None = None) -> CallConfirmation:
    """Ask the host's user to confirm one call of ``tool`` with exactly ``arguments``; ``reason``: why the policy
    wants a human (a flow violation names the source call that tainted the session)."""
    ad = arguments_digest(arguments)
    shown = "\n".join(render_definition(dict(arguments or {})))
    message = (f"warden (the security gateway for MCP server {server!r}) asks you to confirm a tool call.\n"
               f"Tool: {render_visible(tool)} (definition {tool_digest})\nArguments:\n{shown}\n"
               f"Arguments digest: {ad}\n" + (f"Why: {render_visible(reason)}\n" if reason else "")
               + "Confirm runs this call once, with exactly these arguments.")
    schema = {"type": "object",
              "properties": {"confirm": {"type": "boolean", "title": "Run this call once", "default": False}},
              "required": ["confirm"]}
    return CallConfirmation(server, tool, ad, {"mode": "form", "message": message, "requestedSchema": schema})


def read_call_confirmation(request: CallConfirmation, result: Any) -> str | None:
    """The confirmed arguments digest (put it in ``ToolCallFacts.confirmed_arguments_digest``) or None."""
    return request.arguments_digest if _accepted(result, "confirm") else None


def refusal(decision: Decision) -> PolicyError:
    """The error for a request that needs a human when no interactive channel exists (or that is denied): the
    reason, the deciding rule, and the command that fixes it."""
    msg = f"{decision.reason} [{decision.rule}]"
    return PolicyError(msg, hint=decision.hint or "ask in a terminal: warden pins review")


