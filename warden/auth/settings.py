"""How the user configured warden's OAuth client for one remote server (``warden run --oauth-*`` flags or the
server's ``auth = { type = "oauth", ... }`` block). Checked once, here; the client trusts what this built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, final, get_args

from warden.auth.browser import BrowserMode
from warden.auth.discovery import DiscoveryError, check_endpoint_url
from warden.errors import ConfigError

__all__ = ["EXCHANGE_TIMEOUT", "OAuthSettings", "oauth_settings"]

EXCHANGE_TIMEOUT: Final = 30.0
"""Seconds one OAuth discovery, client registration, token request or refresh may take in all. Each is a few small
requests a working server answers in well under a second; httpx's read timeout bounds each read, not the whole,
so without this a server that trickles its answer a byte at a time held the request (and the host) for minutes."""


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class OAuthSettings:
    """What the OAuth client may use besides discovery: a pre-registered client, a client ID metadata document
    URL, how the browser is opened, the loopback port, and how long the user has to authorize."""

    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    client_issuer: str | None = None
    """The authorization server the pre-registered client belongs to (None: whichever the server names)."""
    client_metadata_url: str | None = None
    """An https URL serving warden's client ID metadata document, used where the server supports them."""
    browser: BrowserMode = "ask"
    redirect_port: int = 0
    timeout: float = 300.0
    exchange_timeout: float = EXCHANGE_TIMEOUT
    """The deadline of each exchange with the servers that needs no user (:data:`EXCHANGE_TIMEOUT`)."""
    client_name: str = "warden"


def oauth_settings(options: Mapping[str, Any], env: Mapping[str, str]) -> OAuthSettings:
    """Build and check settings from ``options`` (the config block's keys or the CLI flags, by the same names);
    a client secret is read from the environment variable ``client_secret_env`` names, never given inline.

    Raises:
        ConfigError: an unknown key, a bad value, or a named variable that is unset.
    """
    known = {"type", "client_id", "client_secret_env", "issuer", "client_metadata_url", "browser", "redirect_port",
             "timeout"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"unknown OAuth setting(s): {', '.join(unknown)}",
                          hint=f"known: {', '.join(sorted(known - {'type'}))}")
    secret: str | None = None
    secret_env = options.get("client_secret_env")
    if secret_env is not None:
        if not isinstance(secret_env, str) or not env.get(secret_env):
            raise ConfigError(f"OAuth client_secret_env: the environment variable {secret_env!r} is not set",
                              hint="export it before starting warden; the secret never goes in a file or argv")
        secret = env[secret_env]
    client_id = options.get("client_id")
    if client_id is not None and (not isinstance(client_id, str) or not client_id):
        raise ConfigError("OAuth client_id must be a non-empty string")
    if secret is not None and client_id is None:
        raise ConfigError("an OAuth client secret needs client_id")
    browser = options.get("browser", "ask")
    if browser not in get_args(BrowserMode):
        raise ConfigError(f"OAuth browser must be one of {', '.join(get_args(BrowserMode))}, not {browser!r}")
    port = options.get("redirect_port", 0)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"OAuth redirect_port must be a port number (0 for any free port), not {port!r}")
    timeout = options.get("timeout", 300.0)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 1 <= timeout <= 3600:
        raise ConfigError(f"OAuth timeout must be 1-3600 seconds, not {timeout!r}")
    checked_urls: dict[str, str | None] = {}
    for key in ("issuer", "client_metadata_url"):
        value = options.get(key)
        try:
            checked_urls[key] = None if value is None else check_endpoint_url(value, f"OAuth {key}")
        except DiscoveryError as exc:
            raise ConfigError(exc.message, hint=exc.hint) from exc
    return OAuthSettings(client_id=client_id, client_secret=secret, client_issuer=checked_urls["issuer"],
                         client_metadata_url=checked_urls["client_metadata_url"], browser=browser,
                         redirect_port=port, timeout=float(timeout))
