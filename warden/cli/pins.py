"""``warden pins list|show|diff|approve|revoke|review``: look at pins and approve or revoke them.

Everything a server wrote (names, descriptions, schemas, URIs) reaches the terminal through one display point,
:func:`_emit`, which writes line by line and passes each line through :func:`warden.escape.for_terminal`: an escape
sequence cannot repaint the terminal, a bidi override cannot reorder a row, a hidden character is shown as
``<U+200B>``, and a line feed inside a tool name shows as ``\\n`` on its own row instead of forging the next one.
The lines themselves are composed with each server string escaped where it is put in (so table columns line up).
Approvals bind to the digests that were shown: if a definition moves between showing and approving, nothing is
approved.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence

from warden import audit, logs
from warden.cli._common import CommandContext, run_trio
from warden.consent import describe_entry, describe_server, entry_label, redaction_note, review
from warden.errors import PolicyError
from warden.escape import for_terminal
from warden.gateway.principals import check_principal
from warden.paths import store_dir
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
    ap.add_argument("--principal", action="append", default=[], metavar="WHO",
                    help="approve for this principal of the HTTP face only (token:NAME, token, oauth:SUB, "
                         "anonymous); repeatable (default: for everyone)")
    ap.set_defaults(func=approve_command)
    rv = add("revoke", "revoke an approval (no NAME: the whole server)")
    rv.add_argument("--yes", action="store_true", help="do not ask")
    rv.set_defaults(func=revoke_command)
    add("review", "walk pending and changed pins interactively", name_arg=False,
        server_required=False).set_defaults(func=review_command)


def _emit(lines: str | Sequence[str]) -> None:
    """The one display point of these commands: each line, redacted and escaped again as a whole (a server name
    typed on the command line is echoed here, and may be a pasted token), on a row of its own."""
    for line in [lines] if isinstance(lines, str) else lines:
        print(logs.shown(line))


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


def _nothing_waits(server: str) -> str:
    """What ``approve`` and ``diff`` say when nothing of ``server`` waits. An edit to its config (command, args,
    env, sandbox, network) becomes a changed identity only when warden next starts the server with it, so a user
    who edits, then approves, is told that start comes first."""
    return (f"nothing pending or changed for server {for_terminal(server)!r} (an edit to its config shows here "
            "once the server has started with it: start it from your host, then approve)")


def list_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    entries = _store(ctx).entries(args.server)
    if not entries:
        _emit("no pins" + (f" for server {for_terminal(args.server)!r}" if args.server else ""))
        return 0
    _emit([f"{'SERVER':<20} {'KIND':<18} {'STATE':<9} {'DIGEST':<13} {'FINDINGS':<8} NAME",
           *(f"{for_terminal(e.server):<20} {e.kind:<18} {e.state.value:<9} {short(e.digest):<13} "
             f"{len(e.findings):<8} {for_terminal(e.key) if e.key else '-'}{_shown_for_whom(e)}" for e in entries)])
    return 0


def _for_whom(entry: PinEntry) -> str | None:
    """``for token:alice, ... only`` when the approval holds for some principals only (raw: escape to show)."""
    if entry.state is not PinState.APPROVED or entry.approved_for is None:
        return None
    return f"for {', '.join(entry.approved_for)} only"


def _shown_for_whom(entry: PinEntry) -> str:
    whom = _for_whom(entry)
    return f" ({for_terminal(whom)})" if whom else ""


def show_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    for e in _select(_store(ctx), args, default_pending=False):
        _emit(describe_entry(e, width=_width()))
    return 0


def diff_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    chosen = _select(_store(ctx), args, default_pending=True)
    if not chosen:
        _emit(_nothing_waits(args.server))
    for e in chosen:
        _emit(f"== server '{for_terminal(e.server)}': {entry_label(e)} [{e.state.value}]")
        if e.approved_digest and e.approved_digest != e.digest:
            _emit([f"   approved {e.approved_digest}", f"   current  {e.digest}", *redaction_note(e)])
            _emit(side_by_side(e.approved_definition, e.definition, width=_width()).split("\n"))
        elif e.approved_digest is None:
            _emit("   (never approved: the whole current definition follows)")
            _emit(describe_entry(e, width=_width()))
        else:
            _emit("   no change since approval")
        _emit([f"   finding: {for_terminal(str(f))}" for f in e.findings])
    return 0


def _ask(question: str, *, at_end: str = "") -> str:
    """The question half of the display point (``input`` writes the prompt itself). The end of input (Ctrl-D)
    answers ``at_end``: no, or quit; never an error."""
    try:
        return input(for_terminal(question))
    except EOFError:
        print(file=sys.stderr)
        return at_end


def _need_terminal(verb: str) -> None:
    """Refuse, in one line and before anything is shown, when nobody is at a terminal to answer."""
    if not sys.stdin.isatty():
        raise PolicyError(f"`warden pins {verb}` needs a human at a terminal to answer; scripts pass --yes "
                          "(entries with findings also need --accept-findings)")


def _confirm(question: str, *, word: str | None = None) -> bool:
    answer = _ask(question).strip()
    return answer == word if word else answer.lower() in ("y", "yes")


def approve_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    if not args.yes:
        _need_terminal("approve")
    principals = [check_principal(p) for p in args.principal]
    store = _store(ctx)
    chosen = _select(store, args, default_pending=True)
    if args.name is None and args.kind is None:  # and approvals that do not yet hold for whom this one is for
        chosen += [e for e in store.entries(args.server, refresh=False) if e.state is PinState.APPROVED
                   and e.approved_for is not None and not (principals and set(principals) <= set(e.approved_for))]
    if not chosen:
        _emit(_nothing_waits(args.server))
        return 0
    flagged = [e for e in chosen if e.findings]
    if args.yes:
        if flagged and not args.accept_findings:
            raise PolicyError(f"{len(flagged)} entr{'y has' if len(flagged) == 1 else 'ies have'} scanner findings "
                              f"and --yes alone does not approve findings: review them (warden pins review "
                              f"{for_terminal(args.server)}), or add --accept-findings")
    else:
        _emit(describe_server(args.server, chosen, width=_width(), package_store=str(store_dir(store.path.parent))))
        if flagged:
            if not _confirm(f"{len(flagged)} of these have findings. Type 'approve' to approve all {len(chosen)}: ",
                            word="approve"):
                _emit("nothing approved")
                return 1
        elif not _confirm(f"approve these {len(chosen)} entr{'y' if len(chosen) == 1 else 'ies'}? [y/N] "):
            _emit("nothing approved")
            return 1
    done = store.approve_exact(args.server, [(e.kind, e.key, e.digest) for e in chosen], by="terminal",
                               principals=principals or None)
    _emit([f"approved: server '{for_terminal(e.server)}' {entry_label(e)} {e.digest}{_shown_for_whom(e)}"
           for e in done])
    return _audit_pins(ctx, audit.Event.PIN_APPROVED, done)


def revoke_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    if not args.yes:
        _need_terminal("revoke")
    store = _store(ctx)
    if args.name is None and args.kind is None:
        what = f"the whole server {for_terminal(args.server)!r} (every call refused until approved again)"
        kind: EntryKind = "server"
    else:
        chosen = _select(store, args, default_pending=False)
        what = ", ".join(entry_label(e) for e in chosen)
        kind = chosen[0].kind
    if not args.yes and not _confirm(f"revoke {what}? [y/N] "):
        _emit("nothing revoked")
        return 1
    done = store.revoke(args.server, kind, args.name if args.name is not None else ("" if kind == "server"
                                                                                    else None))
    _emit([f"revoked: server '{for_terminal(e.server)}' {entry_label(e)}" for e in done])
    return _audit_pins(ctx, audit.Event.PIN_REVOKED, done)


class _Tty:
    def show(self, lines: Sequence[str]) -> None:
        _emit(lines)

    def ask(self, question: str) -> str:
        return _ask(question, at_end="q")


def review_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    if not sys.stdin.isatty():
        raise PolicyError("`warden pins review` needs a human at a terminal to answer; scripts use "
                          "`warden pins approve SERVER --yes`")
    store = _store(ctx)
    summary = review(store, args.server, _Tty(), width=_width(), package_store=str(store_dir(store.path.parent)))
    _emit(f"approved {len(summary.approved)}, revoked {len(summary.revoked)}, skipped {len(summary.skipped)}")
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
                    consent=audit.Consent.TERMINAL if event is audit.Event.PIN_APPROVED else None,
                    reason=audit.bounded_text(whom, 2048) if (whom := _for_whom(e)) else None))

    run_trio(append)
    return 0
