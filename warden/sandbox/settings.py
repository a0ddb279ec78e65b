"""Per-server sandbox settings, as written in the ``[servers.NAME.sandbox]`` table of a config or policy file.

This model is owned by the sandbox code and embedded as-is by the policy model, so the two never disagree on what
a sandbox setting means. Unknown keys are errors.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    """Resource limits applied inside the sandbox (rlimits through an exec shim; container flags for engines)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_seconds: int = Field(default=3600, ge=1, description="RLIMIT_CPU")
    open_files: int = Field(default=1024, ge=16, description="RLIMIT_NOFILE")
    file_size_mb: int = Field(default=1024, ge=1, description="RLIMIT_FSIZE")
    processes: int = Field(default=256, ge=8, description="RLIMIT_NPROC (needs an unprivileged uid to bite)")
    memory_mb: int = Field(default=4096, ge=64, description="container --memory; RLIMIT_DATA for bwrap")
    tmp_size_mb: int = Field(default=256, ge=1, description="size of the private /tmp and $HOME tmpfs")


class SandboxSettings(BaseModel):
    """How one server is isolated. The default is the strongest: bwrap, no network, nothing writable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["bwrap", "container", "none"] = "bwrap"
    profile: Literal["auto", "node", "python", "binary"] = "auto"
    read_dirs: tuple[str, ...] = ()
    write_dirs: tuple[str, ...] = ()
    workdir: str | None = None
    network: Literal["none"] = "none"
    limits: Limits = Limits()
    engine: Literal["podman", "docker"] = "podman"
    image: str | None = None
    rootfs: str | None = None
