"""warden's own ``requestState``: an integrity-protected handle for a multi-round request it runs itself.

When a 2026 host must answer a question that only warden can carry (a legacy server asked it on the wire, or
warden asks for consent), warden answers the host's request with ``input_required`` and a ``requestState`` of its
own; the host's retry brings it back. The spec says a server must treat ``requestState`` as attacker-controlled and
integrity-protect it (SEC07), and should bind it to the principal, the originating request and a short expiry
(SEC08). So the state is ``wdn1.<payload>.<mac>`` where the payload names the exchange, the host link, a digest
of the method and target, and an expiry, and the MAC is HMAC-SHA256 under a key in warden's state dir. Holding a
state authenticates nothing (SEC09): it only finds an exchange the same host started.

Pure: the key and the time are arguments.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Final, final

from warden.errors import RemoteProtocolError
from warden.protocol.messages import INVALID_PARAMS

PREFIX: Final = "wdn1."
MAX_STATE_LENGTH: Final = 1024


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@final
@dataclass(frozen=True, slots=True)
class StateClaims:
    exchange: str
    host: str
    binding: str
    expires: float


def binding_of(method: str, params_digest: str) -> str:
    """What a state is bound to: the request it continues (its method and the digest of its params)."""
    return hashlib.sha256(f"{method}\0{params_digest}".encode()).hexdigest()[:32]


def is_ours(state: object) -> bool:
    """Whether a ``requestState`` claims to be warden's (otherwise it belongs to the server and passes through)."""
    return isinstance(state, str) and state.startswith(PREFIX)


@final
class StateSigner:
    """Mints and opens warden's request states under one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("the request-state key must be at least 32 bytes")
        self._key = key

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def mint(self, claims: StateClaims) -> str:
        payload = _b64(json.dumps({"x": claims.exchange, "h": claims.host, "b": claims.binding,
                                   "e": round(claims.expires, 3)}, separators=(",", ":")).encode())
        return f"{PREFIX}{payload}.{self._mac(payload)}"

    def open(self, state: str, *, host: str, binding: str, now: float) -> str:
        """The exchange a valid state names.

        Raises:
            RemoteProtocolError: (-32602) the state was tampered with, belongs to another host or request, or
                expired. Which one is not said beyond that: an attacker learns nothing from the answer.
        """
        refused = RemoteProtocolError("requestState is invalid, expired, or not for this request",
                                      jsonrpc_code=INVALID_PARAMS)
        if not is_ours(state) or len(state) > MAX_STATE_LENGTH or not state.isascii():
            raise refused  # (a state warden minted is ASCII; compare_digest refuses to compare anything else)
        body = state[len(PREFIX):]
        payload, _, mac = body.partition(".")
        if not payload or not mac or not hmac.compare_digest(mac, self._mac(payload)):
            raise refused
        try:
            claims = json.loads(_unb64(payload))
            exchange, claimed_host, claimed_binding, expires = claims["x"], claims["h"], claims["b"], claims["e"]
        except (ValueError, KeyError, TypeError) as exc:  # a valid MAC over a payload warden never wrote
            raise refused from exc
        if not (hmac.compare_digest(str(claimed_host).encode(), host.encode())
                and hmac.compare_digest(str(claimed_binding).encode(), binding.encode())):
            raise refused
        if not isinstance(expires, int | float) or now > expires:
            raise refused
        return str(exchange)
