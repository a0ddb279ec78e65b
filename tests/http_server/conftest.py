"""The HTTP face's suites run warden with a trusting config (tofu, every capability on): they are about the
transport, not pins. The upstream still runs in warden's default sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import write_config


@pytest.fixture(autouse=True)
def trusting(isolated_env: Path, tmp_path: Path) -> Path:
    return write_config(tmp_path)
