"""``warden doctor``: one table of what the sandbox needs on this machine; non-zero exit when the default
sandbox cannot run (issue 3, Build 5)."""

from __future__ import annotations

import argparse
import json
import sys

from warden import logs
from warden.cli._common import CommandContext, run_trio
from warden.errors import ConfigError, SandboxUnavailable
from warden.escape import json_for_terminal
from warden.policy import load_effective_policy
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
    """The table, each row through :func:`warden.logs.shown`: a detail may quote the config (a malformed server
    name, as the config error gives it) and what a probe reported, so a line break or an escape in one cannot
    forge a row or drive the terminal."""
    width = max(len(row.name) for row in rows)
    return "\n".join(logs.shown(f"{row.name:<{width}}  {_MARK[row.status]:<4}  {row.detail}") for row in rows)


def egress_rows(ctx: CommandContext) -> list[Check]:
    """Each configured server's effective egress, in one line: none, or where it may connect (the org's ceiling
    applied; an entry the ceiling refuses makes the row fail, since that server will not start)."""
    try:
        policy = load_effective_policy(ctx.config_path, None, ctx.env, config_required=ctx.config_required)
    except ConfigError as exc:
        return [Check("egress (config)", "warn", f"config not read: {exc.message}")]
    names = sorted(policy.user.model.servers) if policy.user is not None else []
    rows = []
    for name in names:
        sp = policy.server(name)
        rules = sp.network.value
        if sp.network_violations:
            rows.append(Check(f"egress {name}", "fail", f"{sp.network_violations[0].message} "
                                                        f"({sp.network_violations[0].source}): it will not start"))
        elif not rules.enabled:
            rows.append(Check(f"egress {name}", "info", "none (no network at all)"))
        else:
            extra = "".join(f", names may resolve to {n}" for n in rules.allow_addresses)
            rows.append(Check(f"egress {name}", "info", "through warden's proxy to " +
                              ", ".join(e.text for e in rules.allow) + extra))
    return rows


def doctor_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    state_dir = ctx.private_state_dir()
    rows = run_trio(run_checks, state_dir, ctx.env) + egress_rows(ctx)
    if args.json:
        print(json_for_terminal(json.dumps([{"check": r.name, "status": r.status, "detail": r.detail,
                                             "blocking": r.blocking} for r in rows], indent=2).encode()).decode())
    else:
        print(render(rows))
    failed = [row for row in rows if row.status == "fail"]
    if failed:
        print(f"\nwarden doctor: {len(failed)} check(s) failed; servers will not start sandboxed here.",
              file=sys.stderr)
        return SandboxUnavailable.exit_code
    return 0
