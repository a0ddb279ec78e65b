"""``warden secrets set|list|rm``: the named values a config hands servers as ``${secret:NAME}``.

A value is never taken from the command line (every process on the machine can read an argv in ``/proc``): ``set``
reads it from the terminal without echo, or from stdin when stdin is not a terminal (one value; a final newline is
dropped), or from a variable of warden's own environment (``--from-env VAR``). ``list`` shows the names, never a
value.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from warden.cli._common import CommandContext
from warden.errors import ConfigError
from warden.escape import for_terminal
from warden.policy import secret_reference
from warden.secrets import MAX_SECRET_BYTES, SecretStore, check_secret_name


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("secrets", help="set, list and remove the secrets servers get as ${secret:NAME}",
                            description="Keep values servers need (tokens, keys) out of config files: a config "
                                        "env value '${secret:NAME}' is resolved at launch from this store.")
    verbs = parser.add_subparsers(dest="secrets_command", metavar="VERB", required=True)
    set_ = verbs.add_parser("set", help="set a secret (value from the terminal, stdin or --from-env; never argv)")
    set_.add_argument("name", metavar="NAME")
    set_.add_argument("--from-env", metavar="VAR", help="take the value from this variable of warden's environment")
    set_.set_defaults(func=set_command)
    list_ = verbs.add_parser("list", help="list secret names (never values)")
    list_.set_defaults(func=list_command)
    rm = verbs.add_parser("rm", help="remove a secret (its value stays redacted from everything warden writes)")
    rm.add_argument("name", metavar="NAME")
    rm.set_defaults(func=rm_command)


def _read_value(ctx: CommandContext, args: argparse.Namespace) -> str:
    if args.from_env is not None:
        if args.from_env not in ctx.env:
            raise ConfigError(f"--from-env {args.from_env}: that variable is not set in warden's environment",
                              hint=f"export {args.from_env} first, or pipe the value: warden secrets set {args.name}")
        return ctx.env[args.from_env]
    if sys.stdin.isatty():
        return getpass.getpass(f"value of {args.name} (not echoed): ")
    data = sys.stdin.buffer.read(MAX_SECRET_BYTES + 2)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"secret {args.name}: the value on stdin is not UTF-8",
                          hint="pipe the value as text") from exc
    return text[:-1] if text.endswith("\n") else text


def set_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    name = check_secret_name(args.name)
    store = SecretStore(ctx.private_state_dir())
    value = _read_value(ctx, args)
    store.set(name, value)
    print(f"secret {name} set; refer to it in a config env table as {secret_reference(name)}")
    return 0


def list_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    store = SecretStore(ctx.private_state_dir())
    names = store.names()
    if not names:
        print(f"no secrets in {store.path}")
        return 0
    for name in names:
        print(for_terminal(name))
    return 0


def rm_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    store = SecretStore(ctx.private_state_dir())
    if not store.remove(args.name):
        raise ConfigError(f"there is no secret {for_terminal(args.name)!r}",
                          hint="`warden secrets list` shows the names")
    print(f"secret {for_terminal(args.name)} removed (its value stays redacted from everything warden writes)")
    return 0
