"""Small shared vocabulary of the pin store and the decision engine."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

EntryKind = Literal["server", "instructions", "tool", "prompt", "resource", "resource_template"]
ENTRY_KINDS: tuple[EntryKind, ...] = ("server", "instructions", "tool", "prompt", "resource", "resource_template")


class PinState(StrEnum):
    """Where one entry stands. Only ``APPROVED`` lets it be listed or used.

    ``PENDING``: seen, never approved. ``CHANGED``: approved once, but the current definition has another digest
    (quarantined at once). ``REVOKED``: a human withdrew the approval; it stays refused until approved again.
    ``UNKNOWN``: not in the server's current list (never forwarded).
    """

    APPROVED = "approved"
    PENDING = "pending"
    CHANGED = "changed"
    REVOKED = "revoked"
    UNKNOWN = "unknown"
