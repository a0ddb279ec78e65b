"""Shared helpers of the policy tests."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from tests.support import WARDEN
from warden.policy import EffectivePolicy, ServerPolicy
from warden.policy._load import LoadedFile, load_policy_file


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def policy_from(tmp: Path, *, user: str | None = None, org: str | None = None) -> EffectivePolicy:
    u: LoadedFile | None = load_policy_file(write(tmp / "user.toml", user), "user") if user is not None else None
    o: LoadedFile | None = load_policy_file(write(tmp / "org.toml", org), "org") if org is not None else None
    return EffectivePolicy(o, u)


def server(tmp: Path, name: str = "s", argv: tuple[str, ...] = ("srv",), *, user: str | None = None,
           org: str | None = None) -> ServerPolicy:
    return policy_from(tmp, user=user, org=org).server(name, argv)


def warden(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WARDEN, *args], capture_output=True, text=True, input=input, env=env, timeout=60)
