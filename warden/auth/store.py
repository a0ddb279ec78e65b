"""Where OAuth credentials live between runs: the secrets store (``secrets.json`` 0600 in the private state
directory, or the OS keyring), never a config file, a log or an audit record.

Two kinds of entry, each under a name derived from what it is bound to:

* a **client registration** per authorization server (issuer) and redirect URI: the ``client_id`` and, for a
  confidential client, its secret. SEP-2352: credentials from one authorization server are never offered to
  another, so the issuer is part of the key.
* a **token set** per protected resource and issuer: the access token, the refresh token, and what they are good
  for (scopes, expiry). A token is only ever looked up for the resource it was issued for.

Each secret value (an access token, a refresh token, a client secret) is its own entry, so every warden process's
redactor (:func:`warden.secrets.load_redactor`) cuts it out of what it writes; the rest (scopes, expiry, client id)
is a separate JSON entry. Values too short to redact reliably are kept in memory only, for this run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, final

from warden.errors import ConfigError
from warden.secrets import MIN_SECRET_LENGTH, SecretStore

__all__ = ["ClientRegistration", "CredentialStore", "TokenSet", "token_digest"]

log = logging.getLogger(__name__)

_PREFIX: Final = "oauth"


def token_digest(token: str) -> str:
    """``sha256:<hex>`` of a token: all an audit record or a log line may say of it."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def _key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:32]


@final
@dataclass(frozen=True, slots=True)
class ClientRegistration:
    """warden's client identity at one authorization server."""

    issuer: str
    client_id: str
    client_secret: str | None
    token_endpoint_auth_method: str
    redirect_uri: str
    """The loopback redirect URI registered with it (a port warden asks to get again)."""


@final
@dataclass(frozen=True, slots=True)
class TokenSet:
    """Tokens issued for one resource by one issuer."""

    resource: str
    issuer: str
    client_id: str
    access_token: str
    token_type: str
    scopes: tuple[str, ...]
    expires_at: float | None = None
    """When warden stops using the access token (a little before the server would refuse it)."""
    refresh_token: str | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def __repr__(self) -> str:
        return (f"TokenSet(resource={self.resource!r}, issuer={self.issuer!r}, scopes={self.scopes!r}, "
                f"access={token_digest(self.access_token)[:19]}...)")


@final
class CredentialStore:
    """Client registrations and token sets in a :class:`~warden.secrets.SecretStore`, with an in-memory copy for
    values the store cannot keep."""

    def __init__(self, secrets: SecretStore | None, *, clock: Callable[[], float] = time.time) -> None:
        self._secrets = secrets
        self._memory: dict[str, str] = {}
        self.clock = clock

    # -- raw entries ----------------------------------------------------------------------------------------------

    def _get(self, name: str) -> str | None:
        if name in self._memory:
            return self._memory[name]
        if self._secrets is None or name not in self._secrets.names():
            return None
        return self._secrets.get(name)

    def _set(self, name: str, value: str | None) -> None:
        if value is None:
            self._drop(name)
            return
        if self._secrets is None or len(value) < MIN_SECRET_LENGTH:
            self._memory[name] = value
            return
        self._memory.pop(name, None)
        try:
            self._secrets.set(name, value)
        except ConfigError:  # too long or holding NUL: keep it for this run only
            self._memory[name] = value

    def _drop(self, name: str) -> None:
        self._memory.pop(name, None)
        if self._secrets is not None and name in self._secrets.names():
            self._secrets.remove(name)

    # -- registrations --------------------------------------------------------------------------------------------

    def registration(self, issuer: str) -> ClientRegistration | None:
        base = f"{_PREFIX}.client.{_key(issuer)}"
        meta = self._get(base + ".meta")
        if meta is None:
            return None
        data = json.loads(meta)
        if data.get("issuer") != issuer:
            return None
        return ClientRegistration(issuer=issuer, client_id=data["client_id"],
                                  client_secret=self._get(base + ".secret"),
                                  token_endpoint_auth_method=data["method"], redirect_uri=data["redirect_uri"])

    def save_registration(self, registration: ClientRegistration) -> None:
        base = f"{_PREFIX}.client.{_key(registration.issuer)}"
        self._set(base + ".secret", registration.client_secret)
        self._set(base + ".meta", json.dumps({
            "issuer": registration.issuer, "client_id": registration.client_id,
            "method": registration.token_endpoint_auth_method, "redirect_uri": registration.redirect_uri}))

    def forget_registration(self, issuer: str) -> None:
        base = f"{_PREFIX}.client.{_key(issuer)}"
        for suffix in (".meta", ".secret"):
            self._drop(base + suffix)

    # -- tokens ---------------------------------------------------------------------------------------------------

    def tokens(self, resource: str, issuer: str) -> TokenSet | None:
        base = f"{_PREFIX}.token.{_key(resource, issuer)}"
        meta = self._get(base + ".meta")
        access = self._get(base + ".access")
        if meta is None or access is None:
            return None
        data: dict[str, Any] = json.loads(meta)
        if data.get("resource") != resource or data.get("issuer") != issuer:
            return None
        expires = data.get("expires_at")
        return TokenSet(resource=resource, issuer=issuer, client_id=str(data.get("client_id", "")),
                        access_token=access, token_type=str(data.get("token_type", "Bearer")),
                        scopes=tuple(data.get("scopes") or ()),
                        expires_at=float(expires) if isinstance(expires, int | float) else None,
                        refresh_token=self._get(base + ".refresh"))

    def save_tokens(self, tokens: TokenSet) -> None:
        base = f"{_PREFIX}.token.{_key(tokens.resource, tokens.issuer)}"
        self._set(base + ".access", tokens.access_token)
        self._set(base + ".refresh", tokens.refresh_token)
        self._set(base + ".meta", json.dumps({
            "resource": tokens.resource, "issuer": tokens.issuer, "client_id": tokens.client_id,
            "token_type": tokens.token_type, "scopes": list(tokens.scopes), "expires_at": tokens.expires_at}))

    def forget_access_token(self, tokens: TokenSet) -> TokenSet:
        """Drop a token the server refused, keeping the refresh token (if any) for a refresh."""
        stale = replace(tokens, expires_at=0.0)
        self.save_tokens(stale)
        return stale

    def forget_tokens(self, resource: str, issuer: str) -> None:
        base = f"{_PREFIX}.token.{_key(resource, issuer)}"
        for suffix in (".access", ".refresh", ".meta"):
            self._drop(base + suffix)
