"""The ``warden`` command: one module per verb group, each with ``register(subparsers)``.

This is the one place that catches :class:`warden.errors.WardenError`: it prints the message and the hint to
stderr and exits with the error's ``exit_code``. Everything below raises.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from warden import __version__, logs
from warden.cli import audit as audit
from warden.cli import doctor as doctor
from warden.cli import flow as flow
from warden.cli import import_ as import_
from warden.cli import intake as intake
from warden.cli import pins as pins
from warden.cli import policy as policy
from warden.cli import run as run
from warden.cli import scan as scan
from warden.cli import secrets as secrets
from warden.cli._common import CommandContext, print_error
from warden.errors import WardenError
from warden.secrets import load_redactor

__all__ = ["build_parser", "main"]

# Each verb group module exposes register(subparsers) and sets ``func`` on its parsers.
_VERB_GROUPS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    run.register,
    policy.register,
    pins.register,
    flow.register,
    audit.register,
    doctor.register,
    intake.register,
    import_.register,
    secrets.register,
    scan.register,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="warden",
        description="Run MCP servers untrusted: sandboxed, pinned, policy-checked and audited.",
    )
    parser.add_argument("--version", action="version", version=f"warden {__version__}")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="where pins, keys and the audit log live (default: $WARDEN_STATE_DIR, "
                             "else $XDG_STATE_HOME/warden)")
    parser.add_argument("--config", metavar="FILE",
                        help="user config (default: $WARDEN_CONFIG, else $XDG_CONFIG_HOME/warden/warden.toml)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _VERB_GROUPS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING if args.verbose == 0 else logging.INFO if args.verbose == 1 else logging.DEBUG
    ctx = CommandContext.from_args(args, os.environ)
    logs.configure_command(level, lambda: load_redactor(ctx.state_dir))  # `warden run` sets up its own
    try:
        code: int = args.func(ctx, args)
    except WardenError as exc:  # messages may quote a server (a name, an error): shown as the log shows them
        print_error(f"error: {exc.message}")
        if exc.hint:
            print_error(f"hint: {exc.hint}")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
