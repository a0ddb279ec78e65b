"""Shared test setup. Every test runs with its own state dir, config dir and org-policy path, so nothing a test
does can touch a real user's warden state."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import write_config


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every warden path at a private dir beside this test's tmp dir (not inside it: tests let sandboxes
    write ``tmp_path``, and warden refuses to expose its state to a sandbox); returns the state dir (not yet
    created)."""
    home = tmp_path.parent / f"{tmp_path.name}-warden"
    home.mkdir(mode=0o700, exist_ok=True)
    state = home / "state"
    monkeypatch.setenv("WARDEN_STATE_DIR", str(state))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "xdg-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg-config"))
    monkeypatch.setenv("WARDEN_CONFIG", str(home / "xdg-config" / "warden" / "warden.toml"))
    monkeypatch.delenv("WARDEN_ORG_POLICY", raising=False)
    return state


@pytest.fixture
def state_dir(isolated_env: Path) -> Path:
    isolated_env.mkdir(mode=0o700, exist_ok=True)
    return isolated_env


@pytest.fixture
def trusting_config(isolated_env: Path, tmp_path: Path) -> Path:
    """A user config for tests that are not about pins: new definitions are trusted on first use, every
    capability may be forwarded, and the sandbox may read and write this test's tmp dir."""
    return write_config(tmp_path)
