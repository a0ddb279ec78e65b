"""Fixtures for the sandbox tests: a private state dir and host directories the sandbox uid can use."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.sandbox._uids import SANDBOX_GID

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


def sandbox_writable(path: Path) -> Path:
    """Make ``path`` writable for any sandbox of a root warden (group SANDBOX_GID, setgid) or for us."""
    path.mkdir(parents=True, exist_ok=True)
    if IS_ROOT:
        os.chown(path, -1, SANDBOX_GID)
        path.chmod(0o2775)
    return path
