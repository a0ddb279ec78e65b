"""Headless approvals: a call that needs a human, when nobody can be asked in-band, goes to a signed webhook.

``warden run`` speaks MCP on its stdin and stdout, so it has no terminal to ask on; a host without form
elicitation cannot carry the question either. With ``[approvals]`` configured, such a call (a ``confirm`` rule, or
a flow sink with ``on_violation = "confirm"``) is sent to a webhook, and the answer decides. Anything else --
the receiver down, a timeout, a non-200 status, a bad signature, an answer to another request, a late answer --
is a refusal: the call is not forwarded (fail closed).

Configuration (user config, or the org policy, whose table then wins)::

    [approvals]
    webhook = "https://approvals.example.com/warden"   # http only on loopback
    secret = "${secret:WARDEN_APPROVALS_KEY}"           # warden secrets set WARDEN_APPROVALS_KEY
    timeout_seconds = 120                                # how long the human has

The exchange is one HTTPS POST; the receiver holds it open until a human answers (or answers ``deny`` at once).

Request (``Content-Type: application/json``, canonical: sorted keys, no spaces)::

    {"type": "warden.approval.request", "version": 1, "id": "<32 hex, fresh per request>",
     "server": "...", "tool": "...", "arguments_digest": "sha256:<hex of the RFC 8785 arguments>",
     "reason": "why a human is needed", "rule": "the rule, file:line", "session": "host session key",
     "issued_at": <unix seconds>, "expires_at": <unix seconds>}

    X-Warden-Signature: v1=<hex HMAC-SHA256(key, b"warden-approval-request\\n" + body)>

Answer (status 200)::

    {"type": "warden.approval.answer", "version": 1, "id": "<the request's id>", "decision": "approve" | "deny",
     "arguments_digest": "<the request's>", "expires_at": <unix seconds>, "by": "who answered"}

    X-Warden-Signature: v1=<hex HMAC-SHA256(key, b"warden-approval-answer\\n" + body)>

warden accepts an answer only if, in this order: the signature is valid over the exact body bytes (compared in
constant time; the two directions are domain-separated, so a request echoed back is never an answer); it answers
*this* request's id (each request has a fresh id and gets one answer, on its own POST, so an answer captured from
an earlier request is a replay); it names the same arguments digest (a human approves exactly these arguments,
nothing the model may change afterwards); and it arrives before the request's ``expires_at`` and before its own.
Only then does ``approve`` approve.

Wiring a chat service (Slack, Matrix, Teams, a ticket system): run a small bot that (1) receives the POST and
checks ``X-Warden-Signature`` with the shared key, (2) posts a message with the server, tool, reason, rule and the
arguments digest, and two buttons, (3) when someone presses one -- before ``expires_at`` -- answers the held POST
with the signed answer above (``by`` = who pressed). In Slack, for example: ``chat.postMessage`` with Block Kit
buttons whose ``value`` is the request id; the interactivity endpoint looks up the held request by that id and
completes it. The arguments themselves never leave warden (a chat service is a third party): the human compares the
digest with the one the host or ``warden audit show`` displays (at ``audit_arguments = "full"`` the record holds
the values too). Keep the key only in warden's secrets store and the bot's own secret storage.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, final

import trio

if TYPE_CHECKING:
    import httpx

__all__ = ["ANSWER_DOMAIN", "REQUEST_DOMAIN", "ApprovalRequest", "ApprovalVerdict", "WebhookApprovals",
           "sign_approval"]

log = logging.getLogger(__name__)

REQUEST_DOMAIN: Final = b"warden-approval-request\n"
ANSWER_DOMAIN: Final = b"warden-approval-answer\n"
SIGNATURE_HEADER: Final = "X-Warden-Signature"
MAX_ANSWER_BYTES: Final = 64 * 1024


def sign_approval(key: bytes, domain: bytes, body: bytes) -> str:
    """The ``X-Warden-Signature`` value of ``body`` in one direction (``REQUEST_DOMAIN`` / ``ANSWER_DOMAIN``)."""
    return "v1=" + hmac.new(key, domain + body, hashlib.sha256).hexdigest()


def _canonical(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@final
@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What a human is asked to approve: one call with exactly these arguments."""

    server: str
    tool: str
    arguments_digest: str
    reason: str
    rule: str
    session: str | None = None


@final
@dataclass(frozen=True, slots=True)
class ApprovalVerdict:
    """The outcome: ``approved``, and why (for the log and the refusal), and who answered (self-reported by the
    receiver, inside a signed answer)."""

    approved: bool
    reason: str
    by: str | None = None


@final
class WebhookApprovals:
    """The approval channel of one warden process. ``clock`` is wall time (expiries are compared with the
    receiver's); ``transport`` lets a test put an httpx transport in between (the tests use a real receiver)."""

    def __init__(self, url: str, key: bytes, *, timeout: float = 120.0,
                 clock: Callable[[], float] = time.time, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if len(key) < 16:
            raise ValueError("the approval key must be at least 16 bytes")
        self.url = url
        self._key = key
        self._timeout = timeout
        self._clock = clock
        self._transport = transport

    def __repr__(self) -> str:  # never the key
        return f"WebhookApprovals({self.url!r})"

    async def ask(self, request: ApprovalRequest) -> ApprovalVerdict:
        """Send ``request`` and wait (at most the timeout) for a human's signed answer. Never raises for what the
        receiver does: every failure is a refusal that says why."""
        now = self._clock()
        nonce = secrets.token_hex(16)
        expires_at = int(now + self._timeout)
        body = _canonical({"type": "warden.approval.request", "version": 1, "id": nonce, "server": request.server,
                           "tool": request.tool, "arguments_digest": request.arguments_digest,
                           "reason": request.reason, "rule": request.rule, "session": request.session,
                           "issued_at": int(now), "expires_at": expires_at})
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign_approval(self._key, REQUEST_DOMAIN, body)}
        import httpx  # here, not at the top: `warden run` loads httpx only when it is used (startup time)

        try:
            with trio.move_on_after(self._timeout) as scope:
                async with httpx.AsyncClient(transport=self._transport, timeout=self._timeout, trust_env=False,
                                             follow_redirects=False) as client, \
                        client.stream("POST", self.url, content=body, headers=headers) as response:
                    status = response.status_code
                    signature = response.headers.get(SIGNATURE_HEADER, "")
                    answer = b""
                    async for chunk in response.aiter_bytes():
                        answer += chunk
                        if len(answer) > MAX_ANSWER_BYTES:
                            return self._refuse(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
        except httpx.HTTPError as exc:
            return self._refuse(f"the approval webhook could not be reached ({type(exc).__name__})")
        if scope.cancelled_caught:
            return self._refuse(f"no answer within {self._timeout:g} s")
        if status != 200:
            return self._refuse(f"the approval webhook answered HTTP {status}")
        return self._verdict(answer, signature, nonce, request.arguments_digest, expires_at)

    def _verdict(self, body: bytes, signature: str, nonce: str, arguments_digest: str,
                 expires_at: int) -> ApprovalVerdict:
        expected = sign_approval(self._key, ANSWER_DOMAIN, body)
        if not hmac.compare_digest(expected.encode(), signature.encode("ascii", "replace")):
            return self._refuse("the answer's signature is not valid")
        try:
            doc = json.loads(body)
        except ValueError:
            return self._refuse("the answer is not JSON")
        if not isinstance(doc, dict) or doc.get("type") != "warden.approval.answer" or doc.get("version") != 1:
            return self._refuse("the answer is not a warden.approval.answer (version 1)")
        if doc.get("id") != nonce:
            return self._refuse("the answer is for another request (a replayed answer)")
        if doc.get("arguments_digest") != arguments_digest:
            return self._refuse("the answer approves other arguments than this call's")
        now = self._clock()
        answer_expiry = doc.get("expires_at")
        if now > expires_at or not isinstance(answer_expiry, int | float) or now > answer_expiry:
            return self._refuse("the answer has expired")
        by = doc.get("by") if isinstance(doc.get("by"), str) else None
        if doc.get("decision") == "approve":
            return ApprovalVerdict(True, "approved through the approval webhook", by and by[:256])
        return self._refuse("a human denied it through the approval webhook", by and by[:256])

    def _refuse(self, why: str, by: str | None = None) -> ApprovalVerdict:
        log.warning("approval webhook: %s; the call is refused", why)
        return ApprovalVerdict(False, why, by)
