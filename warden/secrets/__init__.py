"""Secrets: the store of named values handed to servers, and the one redaction registry.

Invariant 10: no secret reaches an argv, a log line, an audit record, the pin store, a display or a message to a
host in clear. Every warden process builds its :class:`Redactor` from one registry — :func:`load_redactor` over the
state directory's :class:`SecretStore` (secrets set by name, and every value a launch handed a server) plus the
values that process itself holds — and applies it at each of its output channels, once per channel.

Values shorter than :data:`MIN_SECRET_LENGTH` are not redacted: the store refuses them, a launch refuses to hand one
to a server under a name that :func:`looks_secret`, and names every other one it hands in its log as not redacted
(see :func:`hand_to_server`), so no short value passes silently.
"""

from __future__ import annotations

from warden.secrets._launch import hand_to_server
from warden.secrets._redact import MIN_SECRET_LENGTH, REDACTED, Redactor, looks_secret, redactable
from warden.secrets._store import (
    MAX_HANDED,
    MAX_SECRET_BYTES,
    SecretStore,
    check_secret_name,
    load_redactor,
    os_keyring,
)

__all__ = [
    "MAX_HANDED",
    "MAX_SECRET_BYTES",
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "Redactor",
    "SecretStore",
    "check_secret_name",
    "hand_to_server",
    "load_redactor",
    "looks_secret",
    "os_keyring",
    "redactable",
]
