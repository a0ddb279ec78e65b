"""What each server configuration answered about its era, remembered across warden runs (ER02).

The first meeting of a configuration follows the stdio probe (ER03: ``server/discover`` first). What it showed
is kept in ``<state>/eras.json``, keyed by the configuration's launch identity (a changed command, package or
sandbox is a new configuration, met with the probe again):

- ``legacy``: the probe found a legacy server. The next start sends ``initialize`` at once (ER02); a refusal
  drops the answer and probes again on a fresh process (ER17).
- ``dual``: a 2026 server that also took a legacy ``initialize`` (on the sibling process a legacy host gets). A
  legacy stdio host is then served by one legacy process from the start, instead of a 2026 process plus a legacy
  sibling started after it: half the start time and half the memory for such a server.

The file is a hint, never an authority: a wrong or stale entry costs one probe on a fresh process, never a wrong
era, so an unreadable file is ignored (and said so), not fatal.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Final, Literal, final

from warden.durable import replace_path
from warden.errors import StateError
from warden.paths import read_private_file

__all__ = ["EraAnswer", "EraMemory"]

log = logging.getLogger(__name__)

EraAnswer = Literal["legacy", "dual"]
FILE: Final = "eras.json"
MAX_ENTRIES: Final = 1024
_MAX_BYTES: Final = 256 * 1024


@final
class EraMemory:
    """The remembered era answer of one configuration (``key``: its launch identity digest)."""

    def __init__(self, state_dir: Path, key: str) -> None:
        self._path = state_dir / FILE
        self._key = key

    def _entries(self) -> dict[str, str]:
        try:
            raw = read_private_file(self._path, _MAX_BYTES, what="era answers")
        except StateError as exc:
            log.warning("%s; servers are probed as if it were empty", exc.message)
            return {}
        try:
            data = json.loads(raw) if raw is not None else {}
        except ValueError:
            data = None
        if not isinstance(data, dict):
            log.warning("%s is not a JSON object; servers are probed as if it were empty", self._path)
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and v in ("legacy", "dual")}

    def recall(self) -> EraAnswer | None:
        answer = self._entries().get(self._key)
        return "legacy" if answer == "legacy" else "dual" if answer == "dual" else None

    def remember(self, answer: EraAnswer | None) -> None:
        """Keep ``answer`` (None: forget it). Best effort: a write that fails is logged, and the next start
        probes."""
        entries = self._entries()
        if entries.get(self._key) == answer:
            return
        entries.pop(self._key, None)
        if answer is not None:
            entries[self._key] = answer  # last, so the oldest entries go first past the cap
        kept = dict(list(entries.items())[-MAX_ENTRIES:])
        try:  # a hint: wardens racing on the temporary name can at worst lose an answer or leave one ignored
            replace_path(self._path, json.dumps(kept).encode())
        except OSError as exc:
            log.warning("cannot keep the era answer in %s: %s", self._path, exc.strerror)
