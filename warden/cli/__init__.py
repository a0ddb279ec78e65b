"""The ``warden`` command: one module per verb group, each with ``register(subparsers)``.

This is the one place that catches :class:`warden.errors.WardenError`: it prints the message and the hint to
stderr and exits with the error's ``exit_code``. Everything below raises.

Every line it writes to stderr leaves through :func:`~warden.cli._common.print_error` (redacted, escaped), since any
of them can quote a server: a usage error quotes arguments a user pasted (status 2, as argparse exits), and an
exception that is not a ``WardenError`` — a bug — becomes one line naming it, with a hint to report it, and status
70 (``EX_SOFTWARE``); its traceback, redacted and escaped the same way, is shown with ``-vv``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, final

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
from warden.cli import serve as serve
from warden.cli import status as status
from warden.cli import tokens as tokens
from warden.cli._common import CommandContext, _leaves, print_error, print_traceback
from warden.errors import WardenError
from warden.paths import resolve_state_dir
from warden.secrets import load_redactor

__all__ = ["build_parser", "main"]

# Each verb group module exposes register(subparsers) and sets ``func`` on its parsers.
_VERB_GROUPS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    run.register,
    serve.register,
    status.register,
    policy.register,
    pins.register,
    flow.register,
    audit.register,
    doctor.register,
    intake.register,
    import_.register,
    secrets.register,
    scan.register,
    tokens.register,
)


_BUG_MESSAGE_CHARS = 300


@final
class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors printed through :func:`print_error`: they quote what was typed (an unknown
    argument, a bad choice), often pasted from a server. Subparsers are made of the same class (argparse's
    ``parser_class`` default), so every verb's errors leave the same way."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)  # warden's own text: option names and metavars
        print_error(f"error: {message}")
        self.exit(2)


@final
class _GlobalOptions(argparse.ArgumentParser):
    """The options before the command, read before the full parse (see :func:`_global_options`)."""

    def error(self, message: str) -> NoReturn:
        raise argparse.ArgumentError(None, message)  # the full parse reports it


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", metavar="DIR",
                        help="where pins, keys and the audit log live (default: $WARDEN_STATE_DIR, "
                             "else $XDG_STATE_HOME/warden)")
    parser.add_argument("--config", metavar="FILE",
                        help="user config (default: $WARDEN_CONFIG, else $XDG_CONFIG_HOME/warden/warden.toml)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more log output on stderr (-vv: debug, and the traceback of an internal error)")


def _global_options(argv: Sequence[str]) -> argparse.Namespace:
    """``--state-dir`` and ``-v`` as the full parse will read them (the same options, abbreviations included, then
    everything from the command on left alone), so that a usage error further on is already redacted with the
    right registry; the defaults when they are malformed (the full parse then says how)."""
    parser = _GlobalOptions(prog="warden", add_help=False)
    parser.add_argument("--version", action="store_true")  # only so that abbreviations resolve the same way
    _add_global_options(parser)
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    try:
        return parser.parse_known_args(argv)[0]
    except argparse.ArgumentError:
        return argparse.Namespace(state_dir=None, config=None, verbose=0)


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = _Parser(  # typed as the base: verb modules register on plain parsers
        prog="warden",
        description="Run MCP servers untrusted: sandboxed, pinned, policy-checked and audited.",
    )
    parser.add_argument("--version", action="version", version=f"warden {__version__}")
    _add_global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _VERB_GROUPS:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    early = _global_options(argv)
    level = logging.WARNING if early.verbose == 0 else logging.INFO if early.verbose == 1 else logging.DEBUG
    # `warden run` sets up its own logging; every other line, usage errors included, is redacted with this registry
    logs.configure_command(level, lambda: load_redactor(resolve_state_dir(early.state_dir, os.environ)))
    args = build_parser().parse_args(argv)
    try:
        ctx = CommandContext.from_args(args, os.environ)
        code: int = args.func(ctx, args)
    except WardenError as exc:  # messages may quote a server (a name, an error): shown as the log shows them
        print_error(f"error: {exc.headline}")
        for detail in exc.details:
            print_error(f"  {detail}")
        if exc.hint:
            print_error(f"hint: {exc.hint}")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # whoever read the output went away (`warden pins list | head`): not a bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor is the flush at exit
        return 128 + signal.SIGPIPE
    except Exception as exc:  # a bug: its text may quote a server, so one escaped line rather than a traceback
        _report_bug(exc, args.verbose >= 2)
        return os.EX_SOFTWARE
    return code


def _report_bug(exc: Exception, with_traceback: bool) -> None:
    leaves = _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    first = leaves[0] if leaves else exc  # a nursery's group says little; its first leaf says what broke
    group = f" (first of {len(leaves)} in an exception group)" if first is not exc else ""
    print_error(f"internal error: {type(first).__qualname__}{group}: {first}", limit=_BUG_MESSAGE_CHARS)
    if with_traceback:
        print_traceback(exc)
        print_error("hint: this is a bug in warden; please report it with the output above")
    else:
        print_error("hint: this is a bug in warden; please report it with the output of the same command run as "
                    "`warden -vv …` (it adds the traceback)")

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
