"""Multi-round requests warden runs itself with a 2026 host (PX07, PX13).

A legacy server asks its questions (sampling, elicitation, roots) as wire requests in the middle of a call; a 2026
host takes questions only as ``input_required`` results and answers them by retrying its request. An
:class:`Exchange` bridges the two: the server's call runs on in the background while the host's request returns
``input_required`` with the held questions and warden's own ``requestState``; the host's retry delivers the
answers, which go back to the server as the replies to its wire requests, and waits for the next step. A host that
never retries does not leave the server hanging: each held question times out with an error (always answer
upstream), and a finished exchange nobody collects is forgotten.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, final

import trio

from warden.errors import StateError, WardenError
from warden.paths import private_problem
from warden.protocol.messages import REQUEST_TIMEOUT
from warden.protocol.session import Reply

STATE_KEY_FILE: Final = "request-state.key"


def load_state_key(state_dir: Path) -> bytes:
    """The HMAC key for warden's request states, kept in the state dir (0600), made on first use.

    Raises:
        StateError: the key file exists but is not a private 32-byte file of ours.
    """
    path = state_dir / STATE_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StateError(f"cannot create {path}: {exc.strerror}") from exc
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
            f.flush()
            os.fsync(f.fileno())
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            key = f.read(64)
    except OSError as exc:
        raise StateError(f"cannot read {path}: {exc.strerror}", hint="remove it; warden makes a new one") from exc
    if private_problem(st, mode=0o600) is not None or len(key) != 32:
        raise StateError(f"{path} is not a private 32-byte key of ours", hint="remove it; warden makes a new one")
    return key


@final
@dataclass(slots=True)
class _Held:
    method: str
    params: Mapping[str, Any]
    sent: bool = False
    answer: Reply | None = None
    answered: trio.Event = field(default_factory=trio.Event)


@final
@dataclass(frozen=True, slots=True)
class Questions:
    """What the host must answer before retrying: ``{key: {method, params}}``."""

    requests: dict[str, dict[str, Any]]


@final
class Exchange:
    """One request a 2026 host continues across rounds. ``id`` is secret only in combination with the MAC; the
    host link and request it belongs to are bound by the ``requestState`` that names it, checked when it is
    opened."""

    def __init__(self, *, question_timeout: float) -> None:
        self.id = secrets.token_urlsafe(16)
        self._timeout = question_timeout
        self._held: dict[str, _Held] = {}
        self._next = 0
        self._result: Reply | WardenError | None = None
        self._changed = trio.Event()
        self.collected = trio.Event()

    async def ask(self, method: str, params: Mapping[str, Any]) -> Reply:
        """The server's question (called from the server's side): wait for the host's answer in a retry."""
        self._next += 1
        key = f"warden-q{self._next}"
        held = _Held(method, dict(params))
        self._held[key] = held
        self._signal()
        with trio.move_on_after(self._timeout):
            await held.answered.wait()
        self._held.pop(key, None)
        if held.answer is None:
            return Reply.failure(REQUEST_TIMEOUT, f"the client did not answer {method} in time (it never retried)")
        return held.answer

    def deliver(self, responses: object) -> None:
        """Answers from the host's retry (``inputResponses``); unknown keys are ignored (MRTR server rule)."""
        if not isinstance(responses, Mapping):
            return
        for key, value in responses.items():
            held = self._held.get(key)
            if held is not None and held.sent and held.answer is None and isinstance(value, Mapping):
                held.answer = Reply.from_result(value)
                held.answered.set()

    def finish(self, result: Reply | WardenError) -> None:
        self._result = result
        self._signal()

    async def next_step(self) -> Reply | Questions:
        """Wait until the call ended (its reply) or the server asked something not yet put to the host.

        Raises the :class:`WardenError` the call ended with.
        """
        while True:
            if isinstance(self._result, WardenError):
                self.collected.set()
                raise self._result
            if self._result is not None:
                self.collected.set()
                return self._result
            unsent = {k: h for k, h in self._held.items() if not h.sent}
            if unsent:
                for held in unsent.values():
                    held.sent = True
                return Questions({k: {"method": h.method, "params": dict(h.params)} for k, h in unsent.items()})
            await self._changed.wait()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
