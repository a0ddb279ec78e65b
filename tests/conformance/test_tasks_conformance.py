"""The harness's ``tasks-*`` scenarios (SEP-2663, unscored extension checks) judge warden's tasks carriage: the
task fixture (tests/fixtures/task_server.py) is run once directly over its own HTTP and once behind
``warden run --http`` (over stdio, sandboxed), with 0.2.0-alpha.12 ``--requirements 2026-07-28``. Only the
``tasks-*`` lines count (the fixture implements nothing else): the fixture passes every check directly, and
warden may fail none of them (a server warden fronts keeps every task check it passes alone). Both figures are
printed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import trio

from tests.conformance.test_server_suites import _ANSI, HARNESS_ALPHA, NODE22
from tests.http_server.warden_http import warden_http
from tests.support import FIXTURES, PYTHON, start_listening, write_config

TASK_SERVER = [PYTHON, str(FIXTURES / "task_server.py")]
_SCENARIO_LINE = re.compile(r"^[✓✗] (tasks-[a-z0-9-]+): (\d+) passed, (\d+) failed$")


async def _tasks_run(url: str, cwd: Path) -> dict[str, tuple[int, int]]:
    """Passed and failed checks per ``tasks-*`` scenario of one harness run against ``url``."""
    done = await trio.run_process([str(NODE22), str(HARNESS_ALPHA), "server", "--url", url, "--requirements",
                                   "2026-07-28"], capture_stdout=True, capture_stderr=True, check=False,
                                  cwd=str(cwd))
    output = _ANSI.sub("", done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace"))
    found = {}
    for line in output.splitlines():
        match = _SCENARIO_LINE.match(line.strip())
        if match:
            found[match.group(1)] = (int(match.group(2)), int(match.group(3)))
    assert found, output[-3000:]
    return found


async def test_tasks_scenarios_fail_no_more_through_warden(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    port, direct_server = await trio.to_thread.run_sync(
        lambda: start_listening(lambda port: subprocess.Popen([*TASK_SERVER, "--http", str(port)])))
    try:
        direct = await _tasks_run(f"http://127.0.0.1:{port}/mcp", tmp_path)
    finally:
        direct_server.terminate()
        direct_server.wait(10)
    write_config(tmp_path)
    async with warden_http(TASK_SERVER, cwd=tmp_path, no_auth=True) as w:
        through = await _tasks_run(w.url, tmp_path)
        assert not any("WITHOUT a sandbox" in line for line in w.stderr)
    totals = {label: (sum(p for p, _ in run.values()), sum(f for _, f in run.values()))
              for label, run in (("direct", direct), ("through warden", through))}
    with capsys.disabled():
        print("\n[tasks-* --requirements 2026-07-28] " + " | ".join(
            f"{label}: {p} passed, {f} failed" for label, (p, f) in totals.items()))
    assert through.keys() == direct.keys()
    worse = {name: (direct[name], through[name]) for name in direct if through[name][1] > direct[name][1]}
    assert not worse, f"scenarios failing more checks through warden (direct, through): {worse}"
    assert totals["direct"][1] == 0, f"the task fixture fails checks on its own: {direct}"
    assert totals["through warden"] == totals["direct"], (direct, through)
