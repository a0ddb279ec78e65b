"""``warden doctor``: one table of what the sandbox needs on this machine; non-zero exit when the default
sandbox cannot run (issue 3, Build 5)."""

from __future__ import annotations

import argparse
import json
import sys

from warden.cli._common import CommandContext, run_trio
from warden.errors import SandboxUnavailable
from warden.sandbox.doctor import Check, run_checks

_MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "info": "--"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("doctor", help="check that this machine can sandbox servers",
                            description="Check bwrap, user namespaces, seccomp, Landlock, container engines and "
                                        "the state directory, then start a real default sandbox. Exits non-zero "
                                        "when the default sandbox cannot run.")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.set_defaults(func=doctor_command)


def render(rows: list[Check]) -> str:
    width = max(len(row.name) for row in rows)
    return "\n".join(f"{row.name:<{width}}  {_MARK[row.status]:<4}  {row.detail}" for row in rows)


def doctor_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    state_dir = ctx.private_state_dir()
    rows = run_trio(run_checks, state_dir, ctx.env)
    if args.json:
        print(json.dumps([{"check": r.name, "status": r.status, "detail": r.detail, "blocking": r.blocking}
                          for r in rows], indent=2))
    else:
        print(render(rows))
    failed = [row for row in rows if row.status == "fail"]
    if failed:
        print(f"\nwarden doctor: {len(failed)} check(s) failed; servers will not start sandboxed here.",
              file=sys.stderr)
        return SandboxUnavailable.exit_code
    return 0
