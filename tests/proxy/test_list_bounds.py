"""Issue 11 item 3 through ``warden run``: a server that pages ``tools/list`` forever between two cursors, with
large pages, cannot make warden hold its pages — the list ends with an error naming the server and the rule, memory
stays bounded (measured from /proc), and the server's other lists still work."""

from __future__ import annotations

from pathlib import Path

from tests.support import FIXTURES, PYTHON, RawHost, rss_kib, through_warden

MIB = 1024


def peak_kib(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")


async def test_two_alternating_cursors_with_large_pages_keep_warden_bounded() -> None:
    """covers: MS15 — pages are followed, but a cursor cycle (A, B, A) ends the list instead of filling memory."""
    server = [PYTHON, str(FIXTURES / "hostile_server.py"), "--cycle-tools", "2000"]  # ~1.7 MB per page
    host = await RawHost.start(through_warden(server, "--name", "cycler"))
    await host.initialize()
    before = rss_kib(host.process.pid)
    for n in range(1, 4):  # every list is refused the same way; nothing accumulates across lists
        await host.request(n, "tools/list")
        answer = await host.response(n, timeout=120)
        error = answer.get("error")
        assert isinstance(error, dict), answer
        assert error["code"] == -32603
        assert "cycler: tools/list refused" in error["message"]
        assert "repeats an earlier cursor" in error["message"]
    growth_mib = (peak_kib(host.process.pid) - before) / MIB
    assert growth_mib < 64, f"warden's peak memory grew by {growth_mib:.0f} MiB on a two-cursor list"
    await host.request(10, "prompts/list")
    assert (await host.response(10)).get("result") == {"prompts": []}
    await host.request(11, "resources/list")
    assert (await host.response(11)).get("result") == {"resources": []}
    assert await host.close() == 0
