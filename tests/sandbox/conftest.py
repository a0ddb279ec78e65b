"""Fixtures for the sandbox tests: a private state dir and host directories the sandbox uid can use."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

IS_ROOT = os.geteuid() == 0


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A directory outside /tmp (the sandbox's /tmp is its own tmpfs) that the test owns; removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="warden-sbx-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)

