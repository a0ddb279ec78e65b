"""``warden pins list|show|diff|approve|revoke|review``: look at pins and approve or revoke them.

Everything a server wrote (names, descriptions, schemas) is printed through the visible renderer, so an escape
sequence in a description cannot repaint the terminal and a hidden character is named, not hidden. Approvals bind
to the digests that were shown: if a definition moves between showing and approving, nothing is approved.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence

from warden import audit
from warden.cli._common import CommandContext, run_trio
from warden.consent import describe_entry, review
from warden.errors import PolicyError
from warden.policy import render_visible
from warden.policy.pins import ENTRY_KINDS, EntryKind, PinEntry, PinState, PinStore, short, side_by_side


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("pins", help="list, show, diff, approve and revoke pinned definitions",
                            description="Pins bind every tool, prompt, resource, template, the instructions and the "
                                        "launch manifest of each server to a digest a human approved.")
    verbs = parser.add_subparsers(dest="pins_command", metavar="VERB", required=True)

    def add(name: str, help_: str, *, name_arg: bool = True, server_required: bool = True) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help_)
        p.add_argument("server", nargs=None if server_required else "?", help="server name")
        if name_arg:
            p.add_argument("name", nargs="?", help="tool name (or prompt name, resource URI, template)")
            p.add_argument("--kind", choices=ENTRY_KINDS, help="which kind NAME is (default: whichever matches)")
        return p

    add("list", "list pins and their states", name_arg=False, server_required=False).set_defaults(func=list_command)
    add("show", "show definitions, digests and findings").set_defaults(func=show_command)
    add("diff", "show approved and current definitions side by side").set_defaults(func=diff_command)
    ap = add("approve", "approve what is pending or changed (after showing it)")
    ap.add_argument("--yes", action="store_true", help="do not ask (for scripts)")
    ap.add_argument("--accept-findings", action="store_true",
                    help="with --yes: also approve entries that have scanner findings")
    ap.set_defaults(func=approve_command)
    rv = add("revoke", "revoke an approval (no NAME: the whole server)")
    rv.add_argument("--yes", action="store_true", help="do not ask")
    rv.set_defaults(func=revoke_command)
    add("review", "walk pending and changed pins interactively", name_arg=False,
        server_required=False).set_defaults(func=review_command)


def _width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


def _store(ctx: CommandContext) -> PinStore:
    return PinStore(ctx.private_state_dir())


def _select(store: PinStore, args: argparse.Namespace, *, default_pending: bool) -> list[PinEntry]:
    entries = store.entries(args.server)
    if not entries:
        raise PolicyError(f"no pins for server {args.server!r}", hint="run `warden pins list`")
    if args.name is None and args.kind is None:
        if default_pending:
            return [e for e in entries if e.state in (PinState.PENDING, PinState.CHANGED)]
        return entries
    chosen = [e for e in entries if (args.name is None or e.key == args.name)
              and (args.kind is None or e.kind == args.kind)]
    if args.name is not None and args.kind is None and len({e.kind for e in chosen}) > 1:
        raise PolicyError(f"{args.name!r} names several kinds of entry", hint="add --kind")
    if not chosen:
        raise PolicyError(f"server {args.server!r} has no {args.kind or 'entry'} {args.name!r}",
                          hint=f"run `warden pins list {args.server}`")
    return chosen


def list_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    entries = _store(ctx).entries(args.server)
    if not entries:
        print("no pins" + (f" for server {args.server!r}" if args.server else ""))
        return 0
    print(f"{'SERVER':<20} {'KIND':<18} {'STATE':<9} {'DIGEST':<13} {'FINDINGS':<8} NAME")
    for e in entries:
        print(f"{render_visible(e.server):<20} {e.kind:<18} {e.state.value:<9} {short(e.digest):<13} "
              f"{len(e.findings):<8} {render_visible(e.key) if e.key else '-'}")
    return 0


def show_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    for e in _select(_store(ctx), args, default_pending=False):
        print(describe_entry(e, width=_width()))
    return 0


def diff_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    chosen = _select(_store(ctx), args, default_pending=True)
    if not chosen:
        print(f"nothing pending or changed for server {args.server!r}")
    for e in chosen:
        print(f"== server {e.server!r}: {e.label} [{e.state.value}]")
        if e.approved_digest and e.approved_digest != e.digest:
            print(f"   approved {e.approved_digest}\n   current  {e.digest}")
            print(side_by_side(e.approved_definition, e.definition, width=_width()))
        elif e.approved_digest is None:
            print("   (never approved: the whole current definition follows)")
            print(describe_entry(e, width=_width()))
        else:
            print("   no change since approval")
        for f in e.findings:
            print(f"   finding: {f}")
    return 0


def _confirm(question: str, *, word: str | None = None) -> bool:
    if not sys.stdin.isatty():
        raise PolicyError("approving needs a human at a terminal", hint="run it in a terminal, or pass --yes")
    answer = input(question)
    return answer.strip() == word if word else answer.strip().lower() in ("y", "yes")


def approve_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    store = _store(ctx)
    chosen = _select(store, args, default_pending=True)
    if not chosen:
        print(f"nothing pending or changed for server {args.server!r}")
        return 0
    for e in chosen:
        print(describe_entry(e, width=_width()))
    flagged = [e for e in chosen if e.findings]
    if args.yes:
        if flagged and not args.accept_findings:
            raise PolicyError(f"{len(flagged)} entr{'y has' if len(flagged) == 1 else 'ies have'} scanner findings; "
                              "--yes alone does not approve findings",
                              hint="review them (warden pins review), or add --accept-findings")
    elif flagged:
        if not _confirm(f"{len(flagged)} of these have findings. Type 'approve' to approve all {len(chosen)}: ",
                        word="approve"):
            print("nothing approved")
            return 1
    elif not _confirm(f"approve these {len(chosen)} entr{'y' if len(chosen) == 1 else 'ies'}? [y/N] "):
        print("nothing approved")
        return 1
    expected = {(e.kind, e.key): e.digest for e in chosen}
    if args.name is None and args.kind is None:
        done = store.approve(args.server, expected=expected)
    else:
        done = [x for e in chosen for x in store.approve(args.server, e.kind, e.key,
                                                          expected={(e.kind, e.key): e.digest})]
    for e in done:
        print(f"approved: server {e.server!r} {e.label} {e.digest}")
    return _audit_pins(ctx, audit.Event.PIN_APPROVED, done)


def revoke_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    store = _store(ctx)
    if args.name is None and args.kind is None:
        what = f"the whole server {args.server!r} (every call refused until approved again)"
        kind: EntryKind = "server"
    else:
        chosen = _select(store, args, default_pending=False)
        what = ", ".join(e.label for e in chosen)
        kind = chosen[0].kind
    if not args.yes and not _confirm(f"revoke {what}? [y/N] "):
        print("nothing revoked")
        return 1
    done = store.revoke(args.server, kind, args.name if args.name is not None else ("" if kind == "server"
                                                                                    else None))
    for e in done:
        print(f"revoked: server {e.server!r} {e.label}")
    return _audit_pins(ctx, audit.Event.PIN_REVOKED, done)


class _Tty:
    def show(self, text: str) -> None:
        print(text)

    def ask(self, question: str) -> str:
        return input(question)


def review_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    if not sys.stdin.isatty():
        raise PolicyError("`warden pins review` needs a human at a terminal",
                          hint="run it in a terminal; scripts use `warden pins approve SERVER --yes`")
    summary = review(_store(ctx), args.server, _Tty(), width=_width())
    print(f"approved {len(summary.approved)}, revoked {len(summary.revoked)}, skipped {len(summary.skipped)}")
    _audit_pins(ctx, audit.Event.PIN_APPROVED, summary.approved)
    return _audit_pins(ctx, audit.Event.PIN_REVOKED, summary.revoked)


def _audit_pins(ctx: CommandContext, event: audit.Event, entries: Sequence[PinEntry]) -> int:
    """Record approvals and revocations made at this terminal in the audit log (consent: terminal)."""
    if not entries:
        return 0

    async def append() -> None:
        async with audit.open_audit_log(ctx.private_state_dir()) as log:
            for e in entries:
                await log.append(audit.Record(
                    event=event, server_name=e.server, method=e.kind, target=e.key[:2000], target_digest=e.digest,
                    consent=audit.Consent.TERMINAL if event is audit.Event.PIN_APPROVED else None))

    run_trio(append)
    return 0
