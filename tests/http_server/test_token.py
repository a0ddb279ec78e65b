"""The HTTP endpoint's bearer token: made with the CSPRNG, kept 0600 in the state dir, reused, never loosened.

covers: SEC04
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from warden.errors import ConfigError, StateError
from warden.gateway.http_access import valid_token
from warden.gateway.http_token import load_or_create_token, read_token_file, token_path


def test_SEC04_a_new_token_is_random_private_and_reused(state_dir: Path) -> None:
    token, path = load_or_create_token(state_dir, "127.0.0.1", 8765)
    assert path == token_path(state_dir, "127.0.0.1", 8765)
    assert valid_token(token)
    assert len(token) >= 43  # 32 bytes of entropy, URL-safe Base64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text() == token + "\n"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind
    assert load_or_create_token(state_dir, "127.0.0.1", 8765) == (token, path)
    other, other_path = load_or_create_token(state_dir, "::1", 8765)
    assert other != token
    assert other_path.name == "__1_8765.token"


def test_SEC04_a_token_file_others_can_read_is_refused_not_repaired(state_dir: Path) -> None:
    _, path = load_or_create_token(state_dir, "127.0.0.1", 1)
    path.chmod(0o644)
    with pytest.raises(StateError, match="has mode 0644; it must be 0600: other users could read the token"):
        load_or_create_token(state_dir, "127.0.0.1", 1)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_SEC04_a_damaged_state_token_is_refused(state_dir: Path) -> None:
    _, path = load_or_create_token(state_dir, "127.0.0.1", 2)
    path.write_text("short\n")
    with pytest.raises(StateError, match="does not hold a usable bearer token"):
        load_or_create_token(state_dir, "127.0.0.1", 2)


def test_a_state_dir_others_can_enter_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    with pytest.raises(StateError, match="must be 0700"):
        load_or_create_token(loose, "127.0.0.1", 3)


def test_SEC04_operator_token_files(tmp_path: Path) -> None:
    good = tmp_path / "token"
    good.write_text("  " + "k" * 40 + "\n")
    good.chmod(0o600)
    assert read_token_file(good) == "k" * 40
    good.chmod(0o640)
    with pytest.raises(ConfigError, match="mode 0640"):
        read_token_file(good)
    with pytest.raises(ConfigError, match="cannot read token file"):
        read_token_file(tmp_path / "missing")
    with pytest.raises(ConfigError, match="not a regular file"):
        read_token_file(tmp_path)
    big = tmp_path / "big"
    big.write_bytes(b"k" * 5000)
    big.chmod(0o600)
    with pytest.raises(ConfigError, match="larger than 4096 bytes"):
        read_token_file(big)
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff" * 40)
    binary.chmod(0o600)
    with pytest.raises(ConfigError, match="not ASCII"):
        read_token_file(binary)


def test_a_token_another_warden_wrote_first_is_used(state_dir: Path) -> None:
    path = token_path(state_dir, "127.0.0.1", 4)
    path.parent.mkdir(mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"z" * 43 + b"\n")
    os.close(fd)
    assert load_or_create_token(state_dir, "127.0.0.1", 4) == ("z" * 43, path)
