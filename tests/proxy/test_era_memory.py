"""Era answers remembered across runs (ER02): the first meeting of a configuration probes (ER03), a later run
acts on what it showed, and an answer that no longer holds is probed again on a fresh process (ER17)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support import RAWSERVER, RawHost, through_warden


def methods(log: Path) -> list[object]:
    return [json.loads(line).get("method") for line in log.read_bytes().splitlines() if line.strip()]


async def _run(argv: list[str]) -> None:
    """One `warden run` in front of ``argv`` for a legacy host: initialize, one call, goodbye."""
    host = await RawHost.start(through_warden(argv, "--probe-timeout", "2"))
    await host.initialize()
    answer = await host.call(1, "echo", {"text": "hello"})
    assert answer["result"]["content"] == [{"type": "text", "text": "hello"}]  # type: ignore[index]
    assert await host.close() == 0


def remembered() -> dict[str, str]:
    path = Path(os.environ["WARDEN_STATE_DIR"]) / "eras.json"
    return json.loads(path.read_text()) if path.exists() else {}


async def test_ER02_ER03_a_legacy_answer_is_remembered_and_the_next_run_meets_the_server_with_initialize(
        tmp_path: Path) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    await _run([*RAWSERVER, "--era-file", str(_era(tmp_path, "legacy")), "--log", str(first)])
    assert methods(first)[0] == "server/discover"  # ER03: the first meeting probes
    assert list(remembered().values()) == ["legacy"]
    os.replace(first, second)  # the same command (the same configuration), its log read afresh
    await _run([*RAWSERVER, "--era-file", str(tmp_path / "era"), "--log", str(first)])
    assert methods(first)[:2] == ["initialize", "notifications/initialized"]  # ER02: no probe round trip
    assert (Path(os.environ["WARDEN_STATE_DIR"]) / "eras.json").stat().st_mode & 0o077 == 0


async def test_a_legacy_host_of_a_server_found_dual_era_is_served_by_one_process(tmp_path: Path) -> None:
    pids, log = tmp_path / "pids", tmp_path / "log.jsonl"
    argv = [*RAWSERVER, "--era", "dual", "--pidfile", str(pids), "--log", str(log)]
    await _run(argv)
    assert len(pids.read_text().split()) == 2  # met with the probe: a 2026 process, and a legacy sibling
    assert list(remembered().values()) == ["dual"]
    pids.unlink()
    log.unlink()
    await _run(argv)
    assert len(pids.read_text().split()) == 1  # this host's era, from the start
    assert methods(log)[0] == "initialize"


async def test_ER17_a_remembered_answer_that_no_longer_holds_is_probed_again(tmp_path: Path) -> None:
    pids, log = tmp_path / "pids", tmp_path / "log.jsonl"
    era = _era(tmp_path, "legacy")
    argv = [*RAWSERVER, "--era-file", str(era), "--pidfile", str(pids), "--log", str(log)]
    await _run(argv)
    assert list(remembered().values()) == ["legacy"]
    era.write_text("modern")  # the same configuration now answers as a 2026-only server
    pids.unlink()
    log.unlink()
    await _run(argv)
    assert methods(log)[0] == "initialize"  # what was remembered was tried first
    assert "server/discover" in methods(log)  # and, refused, the server was probed on a fresh process
    assert len(pids.read_text().split()) >= 2
    assert remembered() == {}  # the stale answer is gone


def _era(directory: Path, value: str) -> Path:
    path = directory / "era"
    path.write_text(value)
    return path
