"""Shared test setup. Every test runs with its own state dir, config dir and org-policy path, so nothing a test
does can touch a real user's warden state."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
PEERS = ROOT / "tests" / "peers" / "node_modules"
FIXTURES = ROOT / "tests" / "fixtures"
NODE = shutil.which("node") or "node"
WARDEN = str(VENV_BIN / "warden")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every warden path at this test's tmp dir; returns the state dir (not yet created)."""
    state = tmp_path / "warden-state"
    monkeypatch.setenv("WARDEN_STATE_DIR", str(state))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("WARDEN_CONFIG", str(tmp_path / "xdg-config" / "warden" / "warden.toml"))
    monkeypatch.setenv("WARDEN_ORG_POLICY", str(tmp_path / "no-org-policy.toml"))
    return state


@pytest.fixture
def state_dir(isolated_env: Path) -> Path:
    isolated_env.mkdir(mode=0o700, exist_ok=True)
    return isolated_env
