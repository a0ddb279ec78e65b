"""``warden status [--json]``: every configured server, and how each running ``warden serve`` finds it.

It reads the status files running ``warden serve`` processes keep (:mod:`warden.cli.serve`); a file whose process
is gone is ignored. A configured server no running ``serve`` serves is shown as ``not served`` (it may still run
under its own ``warden run``, which keeps no status file). Everything a server wrote (its last error, above all)
reaches the terminal through :func:`warden.logs.shown`, one line per row.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path
from typing import Any

from warden import logs
from warden.cli._common import CommandContext, print_error
from warden.cli.serve import STATUS_DIR, configured_servers
from warden.errors import ConfigError
from warden.escape import for_terminal, json_for_terminal
from warden.paths import private_problem

_MAX_STATUS_FILE = 1 << 20


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("status", help="show the configured servers and how running `warden serve`s find them",
                            description="Every configured server: state, era, sandbox and what it can see, pins "
                                        "waiting, last error, restarts, calls and refusals since start.")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(func=status_command)


def running(state_dir: Path) -> list[dict[str, Any]]:
    """The status of every ``warden serve`` that is still running (its pid is a ``serve``), oldest first. A file that
    is not a private regular one of at most 1 MiB of JSON of the expected shape is skipped (never followed
    through a symlink, never waited on)."""
    found: list[dict[str, Any]] = []
    directory = state_dir / STATUS_DIR
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            pid = int(path.stem)
            if b"serve" not in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                continue  # gone, and the pid taken by another process
            status = json.loads(_read_small(path))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(status, dict) and status.get("pid") == pid and isinstance(status.get("servers"), list):
            started = status.get("started")
            status["started"] = started if isinstance(started, int | float) else 0
            status["servers"] = [s for s in status["servers"] if isinstance(s, dict)]
            found.append(status)
    return sorted(found, key=lambda s: float(s["started"]))


def _read_small(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or private_problem(st, mode=0o600) is not None:
            raise ValueError("not a private regular file of ours")
        data = f.read(_MAX_STATUS_FILE + 1)
    if len(data) > _MAX_STATUS_FILE:
        raise ValueError("too large")
    return data


def status_command(ctx: CommandContext, args: argparse.Namespace) -> int:
    """Exit 0; 2 when the config cannot be read (what is running is still shown, and the error after it)."""
    serving = running(ctx.private_state_dir())
    broken: ConfigError | None = None
    try:
        configured = configured_servers(ctx)
    except ConfigError as exc:  # a broken config must not hide what is running
        configured, broken = [], exc
    code = 0 if broken is None else 2
    served = {str(s.get("name")) for status in serving for s in status["servers"] if isinstance(s, dict)}
    idle = [name for name in configured if name not in served]
    if broken is not None:
        print_error(f"{broken.message} (configured servers not shown)")
    if args.json:
        shown = json.dumps({"serving": serving, "not_served": idle}, indent=2, sort_keys=True)
        print(logs.shown(json_for_terminal(shown.encode()).decode(), keep_newlines=True))
        return code
    if not serving and not configured:
        if broken is None:
            print(logs.shown(f"no servers configured in {ctx.config_path}, and no `warden serve` running with "
                             f"state dir {ctx.state_dir} (--state-dir or WARDEN_STATE_DIR pick another)"))
        return code
    several = len(serving) > 1  # each row then says which serve it is of: a server may run in more than one
    rows: list[tuple[str, ...]] = [("SERVER", *(("SERVE PID",) if several else ()), "STATE", "ERA", "SANDBOX",
                                    "PINS", "RESTARTS", "CALLS", "REFUSED", "SEES")]
    errors: list[str] = []
    for status in serving:
        pid = (str(status.get("pid")),) if several else ()
        for s in (s for s in status["servers"] if isinstance(s, dict)):
            name = for_terminal(str(s.get("name")))
            era = str(s.get("era") or "-") + ("+legacy" if s.get("legacy_lane") is True else "")
            rows.append((name, *pid, str(s.get("state")), era, _kind(s.get("sandbox")),
                         str(s.get("pins_waiting", 0)), str(s.get("restarts", 0)), str(s.get("calls", 0)),
                         str(s.get("refused", 0)), _sees(s.get("sandbox"))))
            if s.get("last_error"):
                errors.append(f"{name} (warden serve, pid {status.get('pid')}): {for_terminal(str(s['last_error']))}")
    rows.extend((for_terminal(name), *(("-",) if several else ()), "not served", "-", "-", "-", "-", "-", "-", "-")
                for name in idle)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print(logs.shown("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
                         + "  " + row[-1]))
    for status in serving:
        if isinstance(status.get("endpoint"), str):
            print(logs.shown(f"warden serve, pid {status.get('pid')}: serving HTTP at {status['endpoint']}"))
    for line in errors:
        print(logs.shown(f"last error of {line}", limit=400))
    return code


def _kind(sandbox: object) -> str:
    return str(sandbox.get("kind", "-")) if isinstance(sandbox, dict) else "-"


def _sees(sandbox: object) -> str:
    """Read and write dirs and network, in one cell."""
    if not isinstance(sandbox, dict):
        return "-"
    if sandbox.get("kind") == "remote":
        return for_terminal(str(sandbox.get("url")))
    def texts(value: object) -> list[str]:
        return [for_terminal(str(v)) for v in value] if isinstance(value, list) else []

    parts = [f"read {d}" for d in texts(sandbox.get("read_dirs"))]
    parts += [f"write {d}" for d in texts(sandbox.get("write_dirs"))]
    network = sandbox.get("network")
    allow = texts(network.get("allow")) if isinstance(network, dict) else []
    parts.append(f"net {', '.join(allow)}" if allow else "no network")
    return "; ".join(parts)
