"""``warden policy check FILE...`` and ``warden policy explain --server S [--tool T] [-- CMD ARGS]``.

``check`` applies to every server of a user config each check ``warden run`` applies before it starts one
(:func:`launch_problems`): the launch decision against the org policy, the sandbox directory rules (the very
function the sandbox plan calls), and that every ``${secret:NAME}`` the config refers to is set. A config that
``check`` passes does not fail those checks at launch.

``explain`` quotes what a host config put in warden's config (``warden import`` copies a server's arguments as
they were, control characters written as TOML escapes) and what the server's last launch recorded, so each of its
lines reaches the terminal through :func:`warden.logs.shown`, as every error line does.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from pathlib import Path

from warden import logs
from warden.cli._common import CommandContext
from warden.errors import ConfigError, IntakeError, LaunchError, SandboxUnavailable
from warden.intake import parse_runner
from warden.policy import (
    EffectivePolicy,
    PinStore,
    ServerPolicy,
    decide,
    explain,
    launch_facts,
    load_effective_policy,
    load_policy_file,
    references,
)
from warden.sandbox import check_sandbox_settings
from warden.secrets import SecretStore


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("policy", help="check policy files and explain the effective policy",
                            description="Validate policy files, or show the effective rules of a server and "
                                        "which layer and line decided each.")
    verbs = parser.add_subparsers(dest="policy_command", metavar="VERB", required=True)
    check = verbs.add_parser("check", help="validate config and policy files (file:line for every problem), and "
                                           "apply to each server every check `warden run` applies")
    role = check.add_mutually_exclusive_group()
    role.add_argument("--org", dest="role", action="store_const", const="org",
                      help="check as an org policy (default: a file with an [org] table is one)")
    role.add_argument("--user", dest="role", action="store_const", const="user", help="check as a user config")
    check.add_argument("--org-policy", type=Path, metavar="FILE",
                       help="org policy that bounds the user configs checked (default: $WARDEN_ORG_POLICY, else "
                            "/etc/warden/policy.toml)")
    check.add_argument("--file-only", action="store_true",
                       help="check the files alone, not against this machine (skip the launch checks: directories "
                            "that must exist, secrets that must be set, the org policy); for templates")
    check.add_argument("files", nargs="+", metavar="FILE", type=Path)
    check.set_defaults(func=check_command)
    ex = verbs.add_parser("explain", help="print the effective rules of a server and what decided each")
    ex.add_argument("--server", "--name", dest="server", required=True,
                    help="server name (as in the config, or as given to `warden run --name`)")
    ex.add_argument("--tool", help="also decide a call to this tool and name the deciding rule")
    ex.add_argument("--org-policy", type=Path, metavar="FILE",
                    help="org policy to use (default: $WARDEN_ORG_POLICY, else /etc/warden/policy.toml)")
    ex.add_argument("command", nargs=argparse.REMAINDER,
                    help="-- CMD ARGS, as given to `warden run` (default: the config's command, else the one the "
                         "server was last launched with)")
    ex.set_defaults(func=explain_command)


def launch_problems(server: ServerPolicy, *, state_dir: Path, secret_names: Collection[str]) -> list[str]:
    """What ``warden run`` would refuse about ``server`` before starting it, one line each (empty: nothing). A
    server with no command (rules for ``warden run --name NAME -- CMD``) skips the command rules only."""
    problems: list[str] = []
    if server.argv:
        decision = decide(launch_facts(server))
        if not decision.allowed:
            problems.append(f"launch refused: {decision.reason} [{decision.rule}]"
                            + (f" (fix: {decision.hint})" if decision.hint else ""))
    if server.argv and server.sandbox.value.kind != "none":
        try:  # an npx/uvx/pipx command warden cannot map to one package it fetches itself fails at every start
            parse_runner(server.argv)
        except IntakeError as exc:
            problems.append(f"{exc.message} (fix: {exc.hint})" if exc.hint else exc.message)
    try:
        check_sandbox_settings(server.sandbox.value, state_dir=state_dir)
    except (LaunchError, SandboxUnavailable) as exc:
        problems.append(exc.message + (f" (fix: {exc.hint})" if exc.hint else ""))
    for var, spec in server.env_values.items():
        for kind, name in references(spec):
            if kind == "secret" and name not in secret_names:
                problems.append(f"env {var} refers to ${{secret:{name}}}, which is not set (fix: warden secrets "
                                f"set {name})")
    return problems


def check_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    problems: list[ConfigError] = []
    org = None
    secret_names = set(SecretStore(ctx.state_dir).names())
    for path in args.files:
        try:
            loaded = load_policy_file(path, args.role)
        except ConfigError as exc:
            problems.append(exc)
            continue
        if loaded.role == "user" and not args.file_only:
            if org is None:
                org = load_effective_policy(None, args.org_policy, ctx.env).org
            policy = EffectivePolicy(org, loaded)
            found = [f"{path}:{loaded.line(('servers', name))}: servers.{name}: {p}"
                     for name in loaded.model.servers
                     for p in launch_problems(policy.server(name), state_dir=ctx.state_dir,
                                              secret_names=secret_names)]
            if found:
                problems.append(ConfigError(f"{len(found)} problem(s) in {path}:", details=found))
                continue
        kind = "org policy" if loaded.role == "org" else "user config"
        print(f"{path}: ok ({kind}, {len(loaded.model.servers)} server(s))")
    if problems:
        if len(problems) == 1:
            raise problems[0] if problems[0].hint else ConfigError(problems[0].headline, hint="fix the lines shown",
                                                                   details=problems[0].details)
        raise ConfigError(f"problems in {len(problems)} files:", hint="fix the lines shown",
                          details=[line for p in problems for line in (p.headline, *p.details)])
    return 0


def explain_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    policy = load_effective_policy(ctx.config_path, args.org_policy, ctx.env, config_required=ctx.config_required)
    sp = policy.server(args.server, argv or None)
    origin = None
    if not sp.argv:
        launched = _last_launch(ctx.state_dir, args.server)
        if launched:
            sp = policy.server(args.server, launched)
            origin = f"  (command from the identity pinned at its last launch, in {ctx.state_dir})"
    lines, _ = explain(sp, args.tool)
    if origin is not None:
        lines.insert(lines.index(next(line for line in lines if line.startswith("  launch:"))) + 1, origin)
    elif not sp.argv:
        lines.append(f"  note: no command configured for {args.server!r} and it was never launched here; to decide "
                     f"its launch, give the command as `warden run` gets it: warden policy explain --server "
                     f"{args.server} -- CMD ARGS")
    for line in lines:
        print(logs.shown(line))
    return 0


def _last_launch(state_dir: Path, server: str) -> list[str] | None:
    """The command line recorded in ``server``'s pinned identity (its last launch), if the state dir has one."""
    if not (state_dir / "pins.json").is_file():
        return None
    entry = PinStore(state_dir).get(server, "server", "")
    if entry is None or not isinstance(entry.definition, dict):
        return None
    command, rest = entry.definition.get("command"), entry.definition.get("args")
    if not isinstance(command, str) or not command or not isinstance(rest, list):
        return None
    return [command, *(str(a) for a in rest)]
