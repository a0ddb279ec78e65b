"""A server's identity: the digest of its launch manifest.

The manifest holds what decides what the server can do: the command line, the names of the env vars it receives,
the sandbox manifest its launcher reports (``Launcher.manifest(spec)``: kind, profile, binds, limits) and its
network allowance. Change any of it and the server is a new, unapproved server (DESIGN invariant 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from warden.policy.pins._canonical import digest

__all__ = ["identity_digest", "launch_manifest"]


def launch_manifest(argv: Sequence[str], env_names: Sequence[str], sandbox_manifest: Mapping[str, Any],
                    network: str | Mapping[str, Any] = "none") -> dict[str, Any]:
    """The identity manifest (env *names* only, sorted; values never appear)."""
    return {"command": argv[0] if argv else "", "args": list(argv[1:]), "env": sorted(set(env_names)),
            "sandbox": dict(sandbox_manifest),
            "network": network if isinstance(network, str) else dict(network)}


def identity_digest(manifest: Mapping[str, Any]) -> str:
    return digest(dict(manifest))
