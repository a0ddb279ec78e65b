"""What every command gets: the resolved state dir and config path, and the environment it was started with."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import final

from warden.paths import ensure_private_dir, resolve_config_path, resolve_state_dir


@final
@dataclass(frozen=True, slots=True)
class CommandContext:
    state_dir: Path
    config_path: Path
    env: Mapping[str, str]

    @classmethod
    def from_args(cls, args: argparse.Namespace, env: Mapping[str, str]) -> CommandContext:
        return cls(
            state_dir=resolve_state_dir(args.state_dir, env),
            config_path=resolve_config_path(args.config, env),
            env=dict(env),
        )

    def private_state_dir(self) -> Path:
        """The state dir, created 0700 if missing; raises ``StateError`` if it is not private."""
        return ensure_private_dir(self.state_dir)
