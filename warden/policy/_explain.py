"""``warden policy explain``: the effective rules of one server, each with the layer and line that set it."""

from __future__ import annotations

import shlex

from warden.policy._decide import Decision, Effect, ToolCallFacts, decide
from warden.policy._effective import LayerRules, ServerPolicy, Setting
from warden.policy._fs import launch_facts
from warden.policy.pins._types import PinState

__all__ = ["explain"]


def _setting(name: str, s: Setting[object]) -> str:
    return f"  {name:<28} {s.value!r:<24} <- {s.source}"


def _rules(kind: str, layers: tuple[LayerRules, ...]) -> list[str]:
    out = [f"  {kind}:"]
    for lr in layers:
        allow = "(no ceiling)" if lr.allow is None else ", ".join(repr(g.pattern) for g in lr.allow)
        out.append(f"    {lr.layer} allow: {allow}" + (f" <- {lr.allow_source}" if lr.allow_source else ""))
        out.extend(f"    {lr.layer} deny: {g.pattern!r} <- {g.source}" for g in lr.deny)
        out.extend(f"    {lr.layer} confirm: {g.pattern!r} <- {g.source}" for g in lr.confirm)
    return out


def explain(sp: ServerPolicy, tool: str | None = None) -> tuple[list[str], Decision | None]:
    """Lines describing ``sp``; with ``tool``, also the decision for a call to it (assuming its pin is approved
    and no confirmation was given), naming the deciding rule."""
    lines = [f"server {sp.name!r}", f"  policy digest {sp.digest}"]
    for layer, f in sp.policy_files.items():
        lines.append(f"  {layer} file: {f}")
    launch = decide(launch_facts(sp))
    lines.append(f"  launch: {shlex.join(sp.argv) if sp.argv else '(no command)'}")
    lines.append(f"    -> {launch.effect.value}: {launch.reason} <- {launch.rule}")
    if sp.declared_argv:
        lines.append(f"    configured at {sp.declared_argv.source}")
    lines.append(_setting("env names", sp.env_names))  # type: ignore[arg-type]
    lines.append(f"  {'sandbox':<28} {sp.sandbox.value.kind!r:<24} <- {sp.sandbox.source}")
    lines.append(f"  {'':<28} read_dirs={list(sp.sandbox.value.read_dirs)} write_dirs="
                 f"{list(sp.sandbox.value.write_dirs)}")
    lines.append(_setting("network", sp.network))  # type: ignore[arg-type]
    for name, s in (("on_new", sp.on_new), ("on_changed", sp.on_changed), ("audit_arguments", sp.audit_arguments),
                    ("capabilities.sampling", sp.sampling), ("capabilities.sampling_context", sp.sampling_context),
                    ("capabilities.elicitation", sp.elicitation), ("capabilities.roots", sp.roots)):
        lines.append(_setting(name, s))  # type: ignore[arg-type]
    for kind, layers in (("tools", sp.tools), ("prompts", sp.prompts), ("resources", sp.resources)):
        lines.extend(_rules(kind, layers))
    if sp.arguments:
        lines.append("  arguments:")
        for a in sp.arguments:
            lines.append(f"    {a.rule.model_dump(exclude_none=True, exclude_defaults=True)} <- {a.source}")
    for note in sp.notes:
        lines.append(f"  note: {note}")
    decision: Decision | None = None
    if tool is not None:
        decision = decide(ToolCallFacts(sp, tool, PinState.APPROVED, PinState.APPROVED, {}, consent_channel=True))
        verdict = {Effect.CONFIRM: "allowed after a human confirms each call"}.get(decision.effect,
                                                                                   decision.effect.value)
        lines.append(f"tool {tool!r} (pin approved, arguments not considered): {verdict}")
        lines.append(f"  reason: {decision.reason}")
        lines.append(f"  decided by: {decision.rule}")
    return lines, decision
