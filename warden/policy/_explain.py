"""``warden policy explain``: the effective rules of one server, each with the layer and line that set it."""

from __future__ import annotations

import shlex

from warden.policy._decide import Decision, Effect, ToolCallFacts, decide
from warden.policy._effective import LayerRules, ServerPolicy, Setting, Source
from warden.policy._flow import TaintMark, classify
from warden.policy._fs import launch_facts
from warden.policy.pins._types import PinState

__all__ = ["egress_lines", "explain"]


def _setting(name: str, s: Setting[object]) -> str:
    return f"  {name:<28} {s.value!r:<24} <- {s.source}"


def egress_lines(sp: ServerPolicy) -> list[str]:
    """The server's effective egress in words: each allowed destination and where the policy says it, what its
    names may resolve to, and any entry the org's ceiling refuses (``policy explain``, ``doctor``)."""
    rules = sp.network.value
    if not rules.enabled:
        return [f"  {'network':<28} {'none (no network at all)':<24} <- {sp.network.source}"]
    out = [f"  {'network':<28} only through warden's egress proxy, to: <- {sp.network.source}"]
    out += [f"    {entry.text:<26} <- {rules.where(entry.text)}" for entry in rules.allow]
    ranges = ", ".join(str(n) for n in rules.allow_addresses)
    out.append(f"    names may resolve to: public addresses{', ' + ranges if ranges else ''} (anything else refused)")
    out += [f"    REFUSED: {v.message} <- {v.source}" for v in sp.network_violations]
    return out


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
    for var, spec in sp.env_values.items():
        if spec != "${env:" + var + "}":
            lines.append(f"    {var} = {spec!r}" + ("  (resolved at launch, never shown)" if "${secret:" in spec
                                                    else ""))
    lines.append(f"  {'sandbox':<28} {sp.sandbox.value.kind!r:<24} <- {sp.sandbox.source}")
    lines.append(f"  {'':<28} read_dirs={list(sp.sandbox.value.read_dirs)} write_dirs="
                 f"{list(sp.sandbox.value.write_dirs)}")
    lines.extend(egress_lines(sp))
    for name, s in (("on_new", sp.on_new), ("on_changed", sp.on_changed), ("audit_arguments", sp.audit_arguments),
                    ("capabilities.sampling", sp.sampling), ("capabilities.sampling_context", sp.sampling_context),
                    ("capabilities.elicitation", sp.elicitation),
                    ("capabilities.elicitation_rate", Setting(str(sp.elicitation_rate.value),
                                                              sp.elicitation_rate.source)),
                    ("capabilities.roots", sp.roots), ("shared", sp.shared)):
        lines.append(_setting(name, s))  # type: ignore[arg-type]
    for kind, layers in (("tools", sp.tools), ("prompts", sp.prompts), ("resources", sp.resources)):
        lines.extend(_rules(kind, layers))
    lines.append(_setting("flow.on_violation", sp.flow.on_violation))  # type: ignore[arg-type]
    lines.append(_setting("flow.annotations", sp.flow.annotations))  # type: ignore[arg-type]
    for label, globs in (("sources", sp.flow.sources), ("sinks", sp.flow.sinks), ("exempt", sp.flow.exempt)):
        lines.extend(f"  flow {label}: {g.pattern!r} <- {g.source}" for g in globs)
    lines.append(_setting("content.results", sp.content.results))  # type: ignore[arg-type]
    lines.append(_setting("content.arguments", sp.content.arguments))  # type: ignore[arg-type]
    lines.append(_setting("content.max_scan_bytes", sp.content.max_scan_bytes))  # type: ignore[arg-type]
    lines.extend(f"  content rule {r.name!r}: {r.pattern!r} on {r.on}, {r.action or 'the side default'}, tools "
                 f"{list(r.tools)} <- {src}" for r, src in sp.content.rules)
    if sp.approvals is not None:
        lines.append(f"  {'approvals':<28} {sp.approvals.value.webhook!r} <- {sp.approvals.source}")
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
        role = classify(sp.flow, sp.name, tool, None, reaches_network=False,
                        builtin=lambda key: Source("builtin", None, None, key))
        what = " and ".join(n for n, r in (("a source", role.source), ("a sink", role.sink)) if r is not None)
        lines.append(f"  flow role (by the lists; the tool's annotations may add one): {what or 'neither'}")
        for label, rule in (("source", role.source), ("sink", role.sink)):
            if rule is not None:
                lines.append(f"    {label} by: {rule}")
        if role.sink is not None:
            tainted = decide(ToolCallFacts(sp, tool, PinState.APPROVED, PinState.APPROVED, {}, consent_channel=True,
                                           flow_role=role, taint=(TaintMark("SOURCE", "TOOL", None),),
                                           session="SESSION"))
            verdict = {Effect.CONFIRM: "allowed after a human confirms the call"}.get(tainted.effect,
                                                                                      tainted.effect.value)
            lines.append(f"  in a session a source has tainted: {verdict} <- {tainted.rule}")
    return lines, decision
