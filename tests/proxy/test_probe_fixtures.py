"""warden reaches the right era with every kind of server (issue 2: probe fixtures), within a bounded probe time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import RAWSERVER, RawHost, through_warden

CASES = {
    "legacy answering -32601": (["--era", "legacy", "--discover-error", "-32601"], "legacy"),
    "legacy answering -32602": (["--era", "legacy", "--discover-error", "-32602"], "legacy"),
    "legacy answering -32600": (["--era", "legacy", "--discover-error", "-32600"], "legacy"),
    "legacy that never answers discover": (["--era", "legacy", "--discover-silent"], "legacy"),
    "legacy that exits on a pre-initialize request": (["--era", "legacy", "--exit-on-preinit"], "legacy"),
    "modern only": (["--era", "modern"], "modern"),
    "dual era": (["--era", "dual"], "modern"),
}


def received(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize("case", list(CASES))
async def test_ER03_ER06_ER07_ER08_probe_reaches_the_right_era(case: str, tmp_path: Path) -> None:
    flags, era = CASES[case]
    log = tmp_path / "received.jsonl"
    host = await RawHost.start(through_warden([*RAWSERVER, *flags, "--log", str(log)], "--probe-timeout", "2"))
    init = await host.initialize()
    assert init["result"]["serverInfo"] == {"name": "rawserver", "version": "1.0"}  # type: ignore[index]
    answer = await host.call(1, "echo", {"text": "hello"})
    assert answer["result"]["content"] == [{"type": "text", "text": "hello"}]  # type: ignore[index]
    assert await host.close() == 0
    messages = received(log)
    methods = [m.get("method") for m in messages]
    assert methods[0] == "server/discover"  # ER03: the probe comes first
    first_discover = messages[0]["params"]["_meta"]  # type: ignore[index]
    assert first_discover["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert first_discover["io.modelcontextprotocol/clientCapabilities"] == {}
    call = next(m for m in messages if m.get("method") == "tools/call")
    if era == "legacy" or case == "dual era":
        # A legacy server; or a dual-era one, which gives this legacy host a legacy session of its own.
        assert "initialize" in methods  # LC01
        assert methods.index("initialize") < methods.index("notifications/initialized") < methods.index("tools/call")
        assert "io.modelcontextprotocol/protocolVersion" not in call["params"].get("_meta", {})  # type: ignore[union-attr]
    else:
        # A modern-only server refuses the one legacy session warden offers for this legacy host; warden then
        # translates, speaking 2026-07-28 to the server on every request.
        assert methods.count("initialize") == 1
        assert "notifications/initialized" not in methods
        meta = call["params"]["_meta"]  # type: ignore[index]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"  # LC12
        assert "io.modelcontextprotocol/clientCapabilities" in meta  # LC13
        assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "warden"  # LC15


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "raw-modern-host", "version": "1"}}


@pytest.mark.parametrize("case", ["modern only", "dual era"])
async def test_LC19_nothing_legacy_reaches_a_modern_server_for_a_2026_host(case: str, tmp_path: Path) -> None:
    flags, _ = CASES[case]
    log = tmp_path / "received.jsonl"
    host = await RawHost.start(through_warden([*RAWSERVER, *flags, "--log", str(log)]))
    await host.request(1, "tools/call", {"_meta": MODERN_META, "name": "echo", "arguments": {"text": "hi"}})
    assert (await host.response(1))["result"]["content"] == [{"type": "text", "text": "hi"}]  # type: ignore[index]
    await host.close()
    methods = [m.get("method") for m in received(log)]
    assert "initialize" not in methods
    assert "notifications/initialized" not in methods
    assert "ping" not in methods


async def test_ER08_a_server_that_exits_on_the_probe_is_restarted_for_initialize(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    host = await RawHost.start(through_warden([*RAWSERVER, "--exit-on-preinit", "--pidfile", str(pids)]))
    await host.initialize()
    assert (await host.call(1, "echo", {"text": "x"}))["result"]
    await host.close()
    assert len(pids.read_text().split()) == 2  # the probed process and a fresh one for initialize
