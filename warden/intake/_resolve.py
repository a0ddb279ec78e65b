"""From a launch command to the program of its pinned store entry (what the sandbox's runtime detection asks).

Kept apart from :mod:`._intake` because the sandbox imports it: it reads the store and never fetches (a launch
never touches the network).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from warden.errors import IntakeError, LaunchError
from warden.intake._spec import RUNNERS, parse_runner
from warden.intake._store import InstalledPackage, Store

__all__ = ["RUNNERS", "ResolvedLaunch", "resolve_launch"]


@dataclass(frozen=True, slots=True)
class ResolvedLaunch:
    """A runner command mapped onto the store: the argv to run instead, and the entry it runs from."""

    argv: tuple[str, ...]
    record: InstalledPackage
    entry: Path


def resolve_launch(argv: Sequence[str], *, state_dir: Path, node: str) -> ResolvedLaunch | None:
    """``npx``/``uvx``/``pipx run`` ``argv`` as the program of its pinned store entry; None for other commands.

    Raises:
        LaunchError: the command names a package that was never taken in, or whose entry is damaged, or that
            provides no such program (nothing is fetched here: launches never touch the network).
    """
    try:
        request = parse_runner(argv)
        if request is None:
            return None
        store = Store(state_dir)
        record = store.lookup(request)
        if record is None:
            raise LaunchError(f"{argv[0].rsplit('/', 1)[-1]} package {request.requirement!r} has not been taken into "
                              "warden's package store yet (the sandbox has no network to fetch it)",
                              hint=f"let warden fetch it (no package code runs): warden intake -- {' '.join(argv)}")
        entry = store.check_entry(record)
    except IntakeError as exc:
        raise LaunchError(exc.message, hint=exc.hint) from exc
    programs = record.programs
    relative = programs.get(request.program) or (next(iter(programs.values())) if len(programs) == 1 else None)
    if relative is None:
        raise LaunchError(f"{record.name} {record.version} provides no program {request.program!r} "
                          f"(it provides: {', '.join(sorted(programs)) or 'none'})",
                          hint="name one of its programs in the command")
    program = os.path.normpath(entry / relative)
    real_entry = os.path.realpath(entry)
    if not os.path.realpath(program).startswith(real_entry + "/"):
        raise LaunchError(f"{record.name} {record.version}: its program {relative!r} leads out of its store entry",
                          hint=f"fetch it again: warden update {record.name}")
    prefix = (node, program) if record.ecosystem == "npm" else (program,)
    return ResolvedLaunch((*prefix, *request.args), record, entry)
