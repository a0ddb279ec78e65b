"""``warden serve`` refuses a config it cannot serve safely before anything starts: a server named twice, a name
holding the namespace separator (or ending in part of it), a separator outside the name rules, no servers, an
unknown ``--server``. Each exits 2 with the file (and line where there is one), and no server was launched:
nothing started half-way. ``warden status`` still shows what runs when the config is broken."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import PYTHON, RAWSERVER, WARDEN


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WARDEN, "serve", *args], input="", capture_output=True, text=True, timeout=60)


def table(name: str) -> str:
    return f"\n[servers.{name}]\ncommand = {json.dumps(PYTHON)}\nargs = {json.dumps(RAWSERVER[1:])}\n"


@pytest.mark.parametrize(("tables", "args", "says"), [
    (table("a") + table("a"), (), "Cannot declare ('servers', 'a') twice"),
    (table("a__b"), (), "server name 'a__b' holds the namespace separator '__'"),
    (table("a_"), (), "server name 'a_' holds the namespace separator '__' or ends in part of it"),
    (table("a"), ("--separator", "::"), "namespace separator '::' must be 1-8 of"),
    (table("a"), ("--separator", ""), "namespace separator '' must be 1-8 of"),
    ("", (), "has no [servers.NAME] table"),
    (table("a"), ("--server", "b"), "--server 'b' is not configured"),
])
def test_a_config_serve_cannot_serve_is_refused_before_anything_starts(
        trusting: Path, state_dir: Path, tables: str, args: tuple[str, ...], says: str) -> None:
    with trusting.open("a") as config:
        config.write(tables)
    result = serve(*args)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert result.stdout == ""
    shown = subprocess.run([WARDEN, "audit", "show", "--event", "server.", "--json"], capture_output=True,
                           text=True, timeout=30)
    assert shown.stdout == ""  # no server was launched (or refused: none was planned that far)
    assert not (state_dir / "serve").exists() or not list((state_dir / "serve").iterdir())


def test_status_shows_the_config_error_and_exits_2(trusting: Path) -> None:
    with trusting.open("a") as config:
        config.write("\n= broken\n")
    result = subprocess.run([WARDEN, "status"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "invalid TOML" in result.stderr
    assert str(trusting) in result.stderr


def test_status_skips_hostile_status_files_without_waiting_or_crashing(trusting: Path, state_dir: Path,
                                                                      tmp_path: Path) -> None:
    """Found in review: a FIFO hung `warden status`, a symlink to /dev/zero passed the size check, nested JSON and
    wrong types crashed it. Each is skipped now, and a file naming a live process that is not a serve too."""
    directory = state_dir / "serve"
    directory.mkdir(parents=True, mode=0o700)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        os.mkfifo(directory / f"{sleeper.pid}.json")
        (directory / "1.json").symlink_to("/dev/zero")
        (directory / f"{os.getpid()}.json").write_text("[" * 100_000)
        (directory / "abc.json").write_text("{}")
        result = subprocess.run([WARDEN, "status", "--json"], capture_output=True, text=True, timeout=30)
    finally:
        sleeper.kill()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["serving"] == []
