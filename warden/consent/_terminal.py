"""Terminal review: walk pending and changed pins with their diff and findings, and ask a human.

Only a terminal or an in-band elicitation answer can approve; this module is the terminal half. Entries with
findings need the word ``approve`` typed out, not a single key, so a finding is never waved through by habit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, final

from warden.policy.pins._diff import hidden_legend, render_definition, side_by_side
from warden.policy.pins._store import PinEntry, PinStore
from warden.policy.pins._types import PinState

__all__ = ["Prompter", "ReviewSummary", "describe_entry", "review"]


class Prompter(Protocol):
    def show(self, text: str) -> None: ...
    def ask(self, question: str) -> str: ...


def describe_entry(e: PinEntry, *, width: int = 120) -> str:
    """Everything a reviewer needs for one entry: header, diff (or full definition), hidden chars, findings."""
    out = [f"== server {e.server!r}: {e.label} [{e.state.value}]", f"   digest {e.digest}"]
    if e.approved_digest and e.approved_digest != e.digest:
        out.append(f"   approved digest {e.approved_digest}")
        out.append(side_by_side(e.approved_definition, e.definition, width=width))
    else:
        out.extend(render_definition(e.definition))
    legend = hidden_legend(e.definition)
    if legend:
        out.append("   hidden characters in the current definition:")
        out.extend(f"     {line}" for line in legend)
    if e.findings:
        out.append(f"   {len(e.findings)} finding(s):")
        out.extend(f"     {f}" for f in e.findings)
    return "\n".join(out)


@final
@dataclass
class ReviewSummary:
    approved: list[PinEntry] = field(default_factory=list)
    revoked: list[PinEntry] = field(default_factory=list)
    skipped: list[PinEntry] = field(default_factory=list)


def _ordered(entries: Sequence[PinEntry]) -> list[PinEntry]:
    return [e for e in entries if e.state in (PinState.PENDING, PinState.CHANGED)]


def review(store: PinStore, server: str | None, prompter: Prompter, *, width: int = 120) -> ReviewSummary:
    """Ask about every pending or changed entry (of ``server``); approvals bind to the digest that was shown."""
    summary = ReviewSummary()
    todo = _ordered(store.entries(server))
    if not todo:
        prompter.show("nothing to review: no pending or changed pins")
        return summary
    for e in todo:
        prompter.show(describe_entry(e, width=width))
        if e.findings:
            answer = prompter.ask("has findings: type 'approve' to approve, 'revoke', 'skip' or 'quit': ")
            approve = answer.strip() == "approve"
        else:
            answer = prompter.ask("[a]pprove, [r]evoke, [s]kip, [q]uit: ")
            approve = answer.strip().lower() in ("a", "approve")
        choice = answer.strip().lower()
        if choice in ("q", "quit"):
            break
        if approve:
            summary.approved.extend(store.approve(e.server, e.kind, e.key, expected={(e.kind, e.key): e.digest}))
        elif choice in ("r", "revoke"):
            summary.revoked.extend(store.revoke(e.server, e.kind, e.key))
        else:
            summary.skipped.append(e)
    return summary
