"""``warden policy check FILE...`` and ``warden policy explain --server S [--tool T]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from warden.cli._common import CommandContext
from warden.errors import ConfigError
from warden.policy import load_effective_policy, load_policy_file
from warden.policy._explain import explain


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("policy", help="check policy files and explain the effective policy",
                            description="Validate policy files, or show the effective rules of a server and "
                                        "which layer and line decided each.")
    verbs = parser.add_subparsers(dest="policy_command", metavar="VERB", required=True)
    check = verbs.add_parser("check", help="validate config and policy files (file:line for every problem)")
    role = check.add_mutually_exclusive_group()
    role.add_argument("--org", dest="role", action="store_const", const="org",
                      help="check as an org policy (default: a file with an [org] table is one)")
    role.add_argument("--user", dest="role", action="store_const", const="user", help="check as a user config")
    check.add_argument("files", nargs="+", metavar="FILE", type=Path)
    check.set_defaults(func=check_command)
    ex = verbs.add_parser("explain", help="print the effective rules of a server and what decided each")
    ex.add_argument("--server", required=True, help="server name (from the config, or an ad-hoc name)")
    ex.add_argument("--tool", help="also decide a call to this tool and name the deciding rule")
    ex.add_argument("--org-policy", type=Path, metavar="FILE",
                    help="org policy to use (default: $WARDEN_ORG_POLICY, else /etc/warden/policy.toml)")
    ex.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS for an ad-hoc server")
    ex.set_defaults(func=explain_command)


def check_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    problems: list[ConfigError] = []
    for path in args.files:
        try:
            loaded = load_policy_file(path, args.role)
        except ConfigError as exc:
            problems.append(exc)
            continue
        kind = "org policy" if loaded.role == "org" else "user config"
        print(f"{path}: ok ({kind}, {len(loaded.model.servers)} server(s))")
    if problems:
        if len(problems) == 1:
            raise problems[0]
        raise ConfigError("\n".join(p.message for p in problems), hint="fix the lines shown")
    return 0


def explain_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    policy = load_effective_policy(ctx.config_path, args.org_policy, ctx.env, config_required=ctx.config_required)
    sp = policy.server(args.server, argv or None)
    lines, _ = explain(sp, args.tool)
    print("\n".join(lines))
    return 0
