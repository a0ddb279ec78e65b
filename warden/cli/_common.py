"""What every command gets: the resolved state dir and config path, and the environment it was started with."""

from __future__ import annotations

import argparse
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, final

import trio

from warden import logs
from warden.errors import WardenError
from warden.paths import ensure_private_dir, resolve_config_path, resolve_state_dir

T = TypeVar("T")


def print_error(text: str, *, limit: int | None = None) -> None:
    """The one way a command writes an error line to stderr: ``warden: <text>``, redacted and escaped for the
    terminal (:func:`warden.logs.shown`), since errors quote servers, witnesses and host configs (and usage errors
    quote arguments pasted from them). ``limit`` cuts the line after redaction and escaping."""
    logs.say(f"warden: {logs.shown(text, limit=limit)}")


def print_traceback(exc: BaseException) -> None:
    """``exc``'s traceback on stderr, for ``-vv``: redacted as one text (a secret may span lines), escaped keeping
    only the line breaks the traceback module wrote, and every line prefixed ``warden: traceback:``, so a line break
    inside a message cannot start a line that passes for another warden line."""
    text = "".join(traceback.format_exception(exc)).rstrip("\n")
    for line in logs.shown(text, keep_newlines=True).split("\n"):
        logs.say(f"warden: traceback: {line}")


@final
@dataclass(frozen=True, slots=True)
class CommandContext:
    state_dir: Path
    config_path: Path
    config_required: bool
    """``--config`` named the file, so it must exist."""
    env: Mapping[str, str]

    @classmethod
    def from_args(cls, args: argparse.Namespace, env: Mapping[str, str]) -> CommandContext:
        return cls(
            state_dir=resolve_state_dir(args.state_dir, env),
            config_path=resolve_config_path(args.config, env),
            config_required=args.config is not None,
            env=dict(env),
        )

    def private_state_dir(self) -> Path:
        """The state dir, created 0700 if missing; raises ``StateError`` if it is not private."""
        return ensure_private_dir(self.state_dir)


def run_trio(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run`` for commands: an exception group whose every leaf is a :class:`WardenError` is reduced to the
    first of them, so the CLI prints the message and hint rather than a traceback of nurseries."""
    try:
        return trio.run(fn, *args)
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        if leaves and all(isinstance(leaf, WardenError) for leaf in leaves):
            raise leaves[0] from group
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
