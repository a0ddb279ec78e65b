"""Fixtures for driving warden with real clients and servers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import sandbox_readable, write_config


@pytest.fixture(scope="session")
def git_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("gitrepo")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)
    (repo / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(repo), "add", "README.md"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "first"], check=True, env=env)
    (repo / "README.md").write_text("hello, changed\n")
    return sandbox_readable(repo)


@pytest.fixture(scope="session")
def fs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fsroot")
    (root / "hello.txt").write_text("hello from the test dir\n")
    (root / "sub").mkdir()
    return sandbox_readable(root)


@pytest.fixture(autouse=True)
def trusting(isolated_env: Path, tmp_path: Path, git_repo: Path, fs_root: Path) -> Path:
    """These suites are about the proxy, not pins: trust on first use, every capability on, and a sandbox that may
    read the test repo and write this test's tmp dir and the filesystem server's root."""
    return write_config(tmp_path, read_dirs=(str(git_repo),), write_dirs=(str(fs_root),))
