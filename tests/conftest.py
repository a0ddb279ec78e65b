"""Shared test setup. Every test runs with its own state dir, config dir and org-policy path, so nothing a test
does can touch a real user's warden state."""

from __future__ import annotations

from pathlib import Path

import pytest


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
