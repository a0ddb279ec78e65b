"""warden's exception tree.

Every error warden raises on purpose derives from :class:`WardenError`. Each subsystem defines its specific errors
next to its code, always as a subclass of one of the bases below, and raises them ``from`` the lower-layer cause at
its boundary, so a raw ``OSError``, ``msgspec.DecodeError`` or ``httpx`` exception never reaches the gateway.
Only ``warden.cli`` catches :class:`WardenError` and turns it into an exit code.

The tree::

    WardenError                      base; carries a ``hint`` telling the user what to do
    ├── ConfigError                  a config or policy file is invalid or missing (local fault)
    │   └── GlobSyntaxError          a policy glob is malformed (warden.policy; also a ValueError)
    ├── StateError                   the state directory is unusable (permissions, ownership, corruption)
    ├── ProtocolError                abstract: an MCP / JSON-RPC rule was broken
    │   ├── CanonicalizationError    a value has no RFC 8785 form (warden.canonical; also a ValueError)
    │   ├── LocalProtocolError       warden itself was about to break it (a bug, or a caller misuse)
    │   └── RemoteProtocolError      the peer broke it (hostile or buggy host/server)
    │       └── StreamGap            an HTTP host resumed a stream past its replay window
    ├── UpstreamError                talking to a real server failed
    │   ├── LaunchError              the server could not be started (sandbox refusal included)
    │   ├── UpstreamClosed           the server's process or connection went away
    │   ├── UpstreamTimeout          a request got no answer within its deadline
    │   └── IncompatibleServer       the server speaks no protocol version warden can speak
    ├── SandboxUnavailable           a required isolation piece is missing; nothing is started (fail closed)
    ├── IntakeError                  a package could not be taken into warden's store (registry, integrity, age)
    ├── PolicyError                  a request was refused by policy, pins or consent (carries the reason)
    └── AuditError                   the audit log cannot be written or read
        └── VerificationError        the audit log or a checkpoint failed verification (tamper evidence)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar


class WardenError(Exception):
    """Base of every error warden raises on purpose.

    ``hint`` is a short instruction for the user ("run `warden doctor`", "install bubblewrap"); the CLI prints it
    under the message. ``details`` are the items of an error that has several (each problem of a config file):
    the CLI prints each on a line of its own, escaped on its own, so a line break inside one (a hostile name) can
    never start a line of its own; :attr:`message` carries them too, for logs and records. ``exit_code`` is what
    the CLI exits with when this error ends a command.
    """

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, *, hint: str | None = None, details: Sequence[str] = ()) -> None:
        self.headline = message
        self.details = tuple(details)
        self.message = message + "".join("\n  " + detail for detail in self.details)
        super().__init__(self.message)
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ConfigError(WardenError):
    """A config or policy file is missing, unreadable or invalid; nothing runs until it is fixed."""

    exit_code = 2


class StateError(WardenError):
    """warden's state directory cannot be used safely (wrong owner, too-open mode, unreadable files)."""

    exit_code = 2


class ProtocolError(WardenError):
    """Abstract: a JSON-RPC or MCP rule was broken. Use one of the two subclasses, which say who is at fault.

    ``jsonrpc_code`` is the JSON-RPC error code to answer with when the broken message had an id.
    """

    jsonrpc_code: int

    def __init__(self, message: str, *, jsonrpc_code: int = -32600, hint: str | None = None) -> None:
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract: raise LocalProtocolError or RemoteProtocolError")
        super().__init__(message, hint=hint)
        self.jsonrpc_code = jsonrpc_code


class LocalProtocolError(ProtocolError):
    """warden was about to send something the protocol forbids (a bug or a misuse by the caller)."""


class RemoteProtocolError(ProtocolError):
    """The peer (host or server) sent something the protocol forbids."""


class UpstreamError(WardenError):
    """Talking to a real MCP server failed."""


class LaunchError(UpstreamError):
    """The server could not be started; the message names what is missing."""

    exit_code = 3


class UpstreamClosed(UpstreamError):
    """The server's process exited or its connection closed while warden still needed it."""


class UpstreamTimeout(UpstreamError):
    """A request to the server got no answer within its deadline."""


class IncompatibleServer(UpstreamError):
    """The server answered with a protocol version (or era) warden cannot speak; warden disconnected."""


class SandboxUnavailable(WardenError):
    """A required isolation piece (bwrap, namespaces, seccomp, an engine) is missing: nothing is started."""

    exit_code = 4


class IntakeError(WardenError):
    """A package could not be fetched into warden's store: unknown name, registry down, integrity mismatch, a
    version younger than the release-age gate, an sdist, install scripts policy refuses. Nothing was installed."""

    exit_code = 8


class PolicyError(WardenError):
    """A request was refused by policy, pins or consent; the message says why and which command approves it."""

    exit_code = 5


class AuditError(WardenError):
    """The audit log cannot be written or read; while it is broken, warden allows no further actions."""

    exit_code = 6


class VerificationError(AuditError):
    """The audit log or a checkpoint failed verification: evidence of tampering, rollback or a fork."""

    exit_code = 7
