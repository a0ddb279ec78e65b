"""``warden tokens add|list|revoke``: named bearer tokens for the HTTP face, one principal each.

A team puts one ``warden run --http`` (or ``warden serve --http``) in front of several people: each gets a token
of their own, so their flow taint, request states, sessions and audit records are theirs (``token:NAME``), and
one token is revoked without touching the others. warden keeps only each token's SHA-256 digest
(:mod:`warden.gateway.principals`): ``add`` shows the token once, on stdout or into a new private file
(``--file``), and nothing can show it again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from warden.cli._common import CommandContext
from warden.durable import write_new_file
from warden.errors import ConfigError
from warden.gateway.principals import TokenRegistry, check_name, token_principal


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("tokens", help="add, list and revoke named bearer tokens for the HTTP face",
                            description="Named bearer tokens for `warden run --http` and `warden serve --http`: "
                                        "each is its own principal (token:NAME) in taint, sessions and audit "
                                        "records; warden keeps only their digests.")
    verbs = parser.add_subparsers(dest="tokens_command", metavar="VERB", required=True)
    add = verbs.add_parser("add", help="make a token named NAME and show it once")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--file", metavar="PATH", type=Path,
                     help="write the token into this new file (mode 0600) instead of stdout")
    add.set_defaults(func=add_command)
    list_ = verbs.add_parser("list", help="list token names and when they were made (never a token)")
    list_.set_defaults(func=list_command)
    revoke = verbs.add_parser("revoke", help="revoke a token: refused on its next request")
    revoke.add_argument("name", metavar="NAME")
    revoke.set_defaults(func=revoke_command)


def add_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    name = check_name(args.name)
    if args.file is not None and (args.file.exists() or args.file.is_symlink()):
        raise ConfigError(f"{args.file} exists", hint="name a new file; warden does not overwrite one")
    token = TokenRegistry(ctx.private_state_dir()).add(name)
    if args.file is not None:
        try:
            write_new_file(args.file, token.encode("ascii") + b"\n")
        except OSError as exc:
            TokenRegistry(ctx.private_state_dir()).revoke(name)  # nobody holds it: no live token nobody has
            raise ConfigError(f"cannot write {args.file}: {exc.strerror}; the token was not kept",
                              hint="name a writable path for a new file") from exc
        print(f"token {name} is in {args.file}; its requests are {token_principal(name)}", file=sys.stderr)
        return 0
    print(token, flush=True)
    print(f"token {name}: shown once, warden keeps only its digest; its requests are {token_principal(name)}",
          file=sys.stderr)
    return 0


def list_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    tokens = TokenRegistry(ctx.private_state_dir()).tokens()
    if not tokens:
        print("no named tokens (`warden tokens add NAME` makes one)")
    for token in tokens:
        print(f"{token.principal}  made {token.created}")
    return 0


def revoke_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    name = check_name(args.name)
    if not TokenRegistry(ctx.private_state_dir()).revoke(name):
        raise ConfigError(f"there is no token named {name!r}", hint="`warden tokens list` shows the names")
    print(f"token {name} revoked: a running warden refuses it on its next request")
    return 0
