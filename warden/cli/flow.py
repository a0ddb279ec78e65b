"""``warden flow list`` and ``warden flow clear SESSION|--all``: the host sessions a flow source has tainted.

Once a source (a tool that brings untrusted content in) has been called in a host session, or its server has sent
the session anything else (a resource, a prompt, a log line, a question), every sink (a tool that can send data
out) is refused there, or confirmed by a human. Only a human ends that: this verb, run in a
terminal, after reading what tainted the session.
"""

from __future__ import annotations

import argparse

from warden.cli._common import CommandContext
from warden.errors import ConfigError
from warden.escape import for_terminal
from warden.policy import clear_session, host_session_ended, tainted_sessions


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("flow", help="list and clear the host sessions untrusted content has tainted",
                            description="A host session that received content from a flow source cannot use a "
                                        "flow sink until a human clears it here.")
    verbs = parser.add_subparsers(dest="flow_command", metavar="VERB", required=True)
    listing = verbs.add_parser("list", help="tainted sessions and the source calls that tainted them")
    listing.set_defaults(func=list_command)
    clear = verbs.add_parser("clear", help="clear a session's taint (sinks are allowed again there)")
    which = clear.add_mutually_exclusive_group(required=True)
    which.add_argument("session", nargs="?", help="the session key (from `warden flow list` or the refusal)")
    which.add_argument("--all", action="store_true", help="clear every session")
    which.add_argument("--ended", action="store_true", help="clear the sessions whose host process has ended")
    clear.set_defaults(func=clear_command)


def list_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    sessions = tainted_sessions(ctx.private_state_dir())
    if not sessions:
        print("no tainted sessions")
    for s in sessions:
        client = f" ({for_terminal(s.client)})" if s.client else ""
        principal = f" principal {for_terminal(s.principal)}" if s.principal else ""
        ended = " [host ended]" if host_session_ended(s.session) else ""
        print(f"{s.session}{principal}{client}{ended}")
        for m in s.marks:
            print(f"  tainted by {for_terminal(m.describe())}")
    return 0


def clear_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    state = ctx.private_state_dir()
    if args.all or args.ended:
        keys = [s.session for s in tainted_sessions(state) if args.all or host_session_ended(s.session)]
    else:
        keys = [args.session]
    cleared = [k for k in keys if clear_session(state, k)]
    if args.session is not None and not cleared:
        raise ConfigError(f"session {args.session!r} is not tainted", hint="see `warden flow list`")
    for key in cleared:
        print(f"cleared {key}")
    return 0
