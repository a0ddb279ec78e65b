"""What a launch hands a server, registered before the server starts: the values every process must redact.

``warden run`` resolves the policy's ``env = [...]`` names (and, for a remote server, the ``--header`` values) to
values from its own environment. Those values are the secrets most likely to leak — an honest server with a debug
print echoes them to stderr, into an error, into a tool description — and the processes that later write about
that server (``warden pins approve`` in another terminal, ``warden audit show``) never saw that environment. So the
values go into the state directory's registry (:meth:`SecretStore.record_handed`) before the server starts, and
the redactor this process uses is the registry plus the values themselves.

Short values. A value under :data:`MIN_SECRET_LENGTH` characters cannot be redacted without blanking ordinary text
(``1``, ``true``, ``8080``), so there is no silent choice to make here:

* under a name that :func:`looks_secret` (``API_KEY=abc123``) the launch is **refused**, naming the variable and
  the rule — a secret that short would reach every log line and record in clear;
* under any other name (``DEBUG=1``, ``PORT=8080``) it is handed as a setting, and the launch says so in warden's
  log (``not redacted: shorter than 8 characters``), naming each such variable, so the gap is visible.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from warden.errors import LaunchError
from warden.secrets._redact import MIN_SECRET_LENGTH, Redactor, looks_secret, redactable
from warden.secrets._store import SecretStore

__all__ = ["hand_to_server"]

log = logging.getLogger(__name__)


def hand_to_server(state_dir: Path, server: str, values: Mapping[str, str]) -> Redactor:
    """Register ``values`` (variable or header name -> value) handed to ``server``; return this process's
    redactor (the state directory's registry and these values).

    Raises:
        LaunchError: a secret-looking name holds a value too short to redact (the server must not start).
        StateError: the secrets store cannot be trusted or written (fail closed).
    """
    too_short = sorted(name for name, value in values.items() if not redactable(value))
    refused = [name for name in too_short if looks_secret(name) and values[name]]
    if refused:
        raise LaunchError(f"launch refused: {', '.join(refused)} for server {server!r} "
                          f"{'holds a value' if len(refused) == 1 else 'hold values'} shorter than "
                          f"{MIN_SECRET_LENGTH} characters, which warden cannot redact from its logs, audit records "
                          "and messages [secrets: minimum length]",
                          hint=f"give {'it' if len(refused) == 1 else 'them'} a real secret of at least "
                               f"{MIN_SECRET_LENGTH} characters, or leave the variable out of the server's env")
    shown = [name for name in too_short if values[name]]
    if shown:
        log.warning("%s: env %s handed to the server not redacted: shorter than %d characters (a setting, not a "
                    "secret)", server, ", ".join(shown), MIN_SECRET_LENGTH)
    kept = {name: value for name, value in values.items() if redactable(value)}
    store = SecretStore(state_dir)
    store.record_handed(server, kept)
    return store.redactor(tuple(kept.values()))
