"""Policy, pins and consent at the gateway's decision points.

The gateway asks the :class:`Guard` before anything reaches the server or the host: which entries of a list the
host may see, whether a ``tools/call`` / ``prompts/get`` / ``resources/read`` may be forwarded, whether a server's
question may reach the host, which roots the server may be told. The guard gathers the facts (pin states from the
store, the host's declared capabilities, resolved paths) and calls the pure :func:`warden.policy.decide`; it never
talks to the network itself. When a decision needs a human (ASK, CONFIRM), it builds the ``elicitation/create``
question and reads the answer; the gateway carries it to the host.

A list from upstream — the first, one after ``list_changed``, any refresh — is observed in full: new entries stay
pending (or are approved on first use where the policy says ``tofu`` and the scanner found nothing), changed ones
are quarantined at once. Calls are decided against the digests of the definitions warden last listed, which are
the only definitions a host can have seen through warden.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import trio

from warden.consent import (
    CallConfirmation,
    PinConsent,
    build_call_confirmation,
    build_pin_consent,
    read_call_confirmation,
    read_pin_consent,
    refusal,
)
from warden.errors import PolicyError
from warden.policy import (
    Decision,
    Detection,
    Effect,
    ElicitationFacts,
    EntryKind,
    HostCapabilities,
    ListEntryFacts,
    PinEntry,
    PinState,
    PinStore,
    PromptGetFacts,
    ResourceReadFacts,
    RootsRequestFacts,
    SamplingFacts,
    ServerPolicy,
    Source,
    ToolCallFacts,
    decide,
    filter_roots,
    identity_digest,
    resolve_argument_paths,
)
from warden.policy.pins import digest

log = logging.getLogger(__name__)

LIST_KINDS: Final[Mapping[str, tuple[EntryKind, str]]] = {
    "tools/list": ("tool", "name"), "prompts/list": ("prompt", "name"), "resources/list": ("resource", "uri"),
    "resources/templates/list": ("resource_template", "uriTemplate"),
}


def _template_regex(template: str) -> re.Pattern[str]:
    """RFC 6570 templates as a matcher: ``{var}`` matches one path segment, operators (``{+var}``, ``{/var}``,
    ``{?q}``, ...) match anything. Only for deciding which listed template a URI falls under."""
    parts = re.split(r"(\{[^}]*\})", template)
    out = []
    for part in parts:
        if part.startswith("{") and part.endswith("}"):
            out.append("[^/?#]*" if part[1:2].isalnum() or part[1:2] == "_" else ".*")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out))


@final
class Guard:
    """Enforces one server's effective policy and pins. One per upstream, shared by all its hosts (a gateway
    fronts exactly one server, so a sampling request's ``thisServer`` context is that server's alone)."""

    def __init__(self, *, policy: ServerPolicy, store: PinStore, manifest: Mapping[str, Any]) -> None:
        self.policy = policy
        self.store = store
        self.manifest = dict(manifest)
        self.identity = identity_digest(self.manifest)
        self._digests: dict[EntryKind, dict[str, str]] = {}
        self._declined: set[tuple[tuple[EntryKind, str, str], ...]] = set()
        self._instructions_digest: str | None = None

    @property
    def server(self) -> str:
        return self.policy.name

    # -- identity and instructions ------------------------------------------------------------------------------

    async def observe_identity(self) -> list[Detection]:
        """Record the launch manifest (the server's identity); returns what to report."""
        _, detections = await trio.to_thread.run_sync(
            lambda: self.store.observe_server(self.server, self.manifest, on_new=self.policy.on_new.value))
        self._report(detections)
        return detections

    def server_state(self) -> PinState:
        return self.store.state(self.server, "server", "", self.identity, refresh=False)

    async def observe_instructions(self, instructions: str | None) -> list[Detection]:
        """Record the server's instructions (pinned like any definition; absent instructions pin as null)."""
        _, detections = await trio.to_thread.run_sync(
            lambda: self.store.observe_instructions(self.server, instructions, on_new=self.policy.on_new.value))
        self._report(detections)
        self._instructions_digest = digest(instructions)
        return detections

    def instructions_state(self) -> PinState:
        if self._instructions_digest is None:
            return PinState.UNKNOWN
        return self.store.state(self.server, "instructions", "", self._instructions_digest, refresh=False)

    def approved_instructions(self, instructions: str | None) -> str | None:
        """The server's instructions if approved, else None: unapproved instructions never reach the model."""
        self.store.refresh()
        if instructions is not None and self.instructions_state() is PinState.APPROVED \
                and self.server_state() is PinState.APPROVED:
            return instructions
        return None

    def quarantine(self) -> Decision | None:
        """Instructions speak for the whole server: while new or changed ones wait for approval, nothing the
        server offers is shown or forwarded (a changed instruction is a rug pull of every tool at once)."""
        state = self.instructions_state()
        if state is PinState.APPROVED or self.server_state() is not PinState.APPROVED:
            return None
        what = {PinState.CHANGED: "changed since they were approved", PinState.REVOKED: "were revoked"}.get(
            state, "are new and not approved")
        return Decision(Effect.DENY, f"server {self.server!r}: its instructions {what}; nothing it offers is "
                                     "usable until they are approved", Source("builtin", None, None, "pins"),
                        hint=f"review them: warden pins diff {self.server} --kind instructions; then approve: "
                             f"warden pins approve {self.server} --kind instructions")

    # -- lists --------------------------------------------------------------------------------------------------

    def knows(self, method: str) -> bool:
        return LIST_KINDS[method][0] in self._digests

    def kind_of(self, method: str) -> EntryKind:
        return LIST_KINDS[method][0]

    async def observe_list(self, method: str, items: Sequence[Any]) -> list[Detection]:
        """Record a complete upstream list; what changed is quarantined at once. Returns what to report."""
        kind, _ = LIST_KINDS[method]
        observation = await trio.to_thread.run_sync(
            lambda: self.store.observe_list(self.server, kind, list(items), on_new=self.policy.on_new.value))
        self._digests[kind] = dict(observation.digests)
        self._report(observation.detections)
        return list(observation.detections)

    def visible(self, method: str, items: Sequence[Any]) -> list[Any]:
        """The entries of an observed list the host may see: approved, unchanged and allowed by policy."""
        kind, key_field = LIST_KINDS[method]
        digests = self._digests.get(kind, {})
        self.store.refresh()  # one stat for the whole list; approvals from another terminal count at once
        server_pin = self.server_state()
        if self.quarantine() is not None:
            return []
        out = []
        for item in items:
            key = item.get(key_field) if isinstance(item, Mapping) else None
            if not isinstance(key, str) or key not in digests:
                continue
            pin = self.store.state(self.server, kind, key, digests[key], refresh=False)
            if decide(ListEntryFacts(self.policy, kind, key, pin, server_pin)).allowed:
                out.append(item)
        return out

    def pending_consent(self, kind: EntryKind, key: str | None = None) -> PinConsent | None:
        """A question that would let a human approve what is new or changed of ``kind`` (only ``key`` if given),
        with the server's identity and instructions if those wait too; None when nothing may be asked in-band."""
        wanted: list[PinEntry] = []
        for entry in self.store.entries(self.server):
            if entry.state not in (PinState.PENDING, PinState.CHANGED):
                continue
            if entry.kind == "server" and entry.digest != self.identity:
                continue
            if entry.kind in ("server", "instructions") or \
                    (entry.kind == kind and key in (None, entry.key)
                     and self._digests.get(kind, {}).get(entry.key) == entry.digest):
                setting = self.policy.on_changed if entry.state is PinState.CHANGED else self.policy.on_new
                if setting.value == "deny":
                    continue
                wanted.append(entry)
        if not wanted:
            return None
        consent = build_pin_consent(self.server, wanted)
        if consent.items in self._declined:
            return None  # a human said no to exactly this; do not nag in this session
        return consent

    async def apply_consent(self, consent: PinConsent, answer: Any) -> list[PinEntry]:
        """Approve exactly what the human saw, if they accepted. Returns what was approved (nothing if declined)."""
        items = read_pin_consent(consent, answer)
        if items is None:
            self._declined.add(consent.items)
            log.warning("%s: the user declined approval in-band", self.server)
            return []
        approved = await trio.to_thread.run_sync(
            lambda: self.store.approve_exact(self.server, list(items), by="elicitation"))
        log.warning("%s: approved in-band: %s", self.server, ", ".join(e.label for e in approved))
        return approved

    # -- requests -----------------------------------------------------------------------------------------------

    def approval(self, kind: EntryKind, key: str) -> PinEntry | None:
        """The approved pin entry an allowed request rests on (for the audit record), if any."""
        entry = self.store.get(self.server, kind, key, refresh=False)
        return entry if entry is not None and entry.state is PinState.APPROVED else None

    def _pin(self, kind: EntryKind, key: str) -> PinState:
        digest = self._digests.get(kind, {}).get(key)
        return PinState.UNKNOWN if digest is None else self.store.state(self.server, kind, key, digest,
                                                                        refresh=False)

    def decide_call(self, tool: str, arguments: Mapping[str, Any] | None, *, channel: bool,
                    confirmed_digest: str | None = None) -> Decision:
        """``channel``: a human can be asked in-band on this request (the host declared form elicitation and
        warden can put a question to it). Reads the store once (another terminal's approvals count at once)."""
        self.store.refresh()
        held = self.quarantine()
        if held is not None and not channel:
            return held
        return decide(ToolCallFacts(
            self.policy, tool, self._pin("tool", tool), self.server_state(), arguments, consent_channel=channel,
            confirmed_arguments_digest=confirmed_digest,
            resolved_paths=resolve_argument_paths(self.policy, tool, arguments)))

    def decide_prompt(self, name: str, *, channel: bool) -> Decision:
        self.store.refresh()
        held = self.quarantine()
        if held is not None and not channel:
            return held
        return decide(PromptGetFacts(self.policy, name, self._pin("prompt", name), self.server_state(), channel))

    def decide_read(self, uri: str, *, channel: bool) -> Decision:
        """A read is allowed through the listed resource with that URI, else the first listed template it fits."""
        self.store.refresh()
        held = self.quarantine()
        if held is not None and not channel:
            return held
        pin = self._pin("resource", uri)
        if pin is PinState.UNKNOWN:
            for template in self._digests.get("resource_template", {}):
                if _template_regex(template).fullmatch(uri):
                    pin = self._pin("resource_template", template)
                    break
        return decide(ResourceReadFacts(self.policy, uri, pin, self.server_state(), channel))

    def call_confirmation(self, tool: str, arguments: Mapping[str, Any] | None) -> CallConfirmation:
        return build_call_confirmation(self.server, tool, arguments,
                                       tool_digest=self._digests.get("tool", {}).get(tool, "unknown"))

    @staticmethod
    def confirmed(confirmation: CallConfirmation, answer: Any) -> str | None:
        return read_call_confirmation(confirmation, answer)

    @staticmethod
    def refuse(decision: Decision) -> PolicyError:
        return refusal(decision)

    # -- the server's questions ---------------------------------------------------------------------------------

    def decide_question(self, method: str, params: Mapping[str, Any], capabilities: Mapping[str, Any]) -> Decision:
        host = HostCapabilities.from_client_capabilities(capabilities)
        if method == "sampling/createMessage":
            return decide(SamplingFacts(self.policy, host, has_tools="tools" in params or "toolChoice" in params,
                                        include_context=params.get("includeContext"),
                                        single_upstream=True))
        if method == "elicitation/create":
            schema = params.get("requestedSchema")
            return decide(ElicitationFacts(self.policy, host, mode=str(params.get("mode", "form")),
                                           url=params.get("url"),
                                           requested_schema=schema if isinstance(schema, Mapping) else None))
        return decide(RootsRequestFacts(self.policy, host))

    def filter_roots_answer(self, result: dict[str, Any]) -> dict[str, Any]:
        """RT04–RT07: only ``file://`` roots inside what policy allows, symlinks resolved, reach the server."""
        roots = result.get("roots")
        kept, refused = filter_roots(self.policy, roots if isinstance(roots, list) else [])
        for root, decision in refused:
            log.warning("%s: root %r withheld: %s", self.server, root, decision.reason)
        out = dict(result)
        out["roots"] = kept
        return out

    # -- reporting ----------------------------------------------------------------------------------------------

    def _report(self, detections: Sequence[Detection]) -> None:
        for detection in detections:
            log.warning("%s", str(detection).removeprefix("warden: "))
