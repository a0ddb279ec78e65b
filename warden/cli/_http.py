"""``warden run|serve --http HOST:PORT``: the command-line half of the HTTP face (options, token, what is printed).

The bearer token is never printed: warden prints where it is (a file of mode 0600 in its state directory, or the
``--token-file`` the operator gave) and how to send it. ``--no-auth`` is for loopback only, and says so loudly.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from warden import logs
from warden.cli._common import CommandContext
from warden.errors import ConfigError
from warden.gateway.http_access import parse_bind
from warden.gateway.http_token import load_or_create_token, read_token_file
from warden.gateway.principals import TokenRegistry
from warden.loopback import is_loopback

if TYPE_CHECKING:
    from warden.auth import ResourceServer
    from warden.gateway.http import HttpOptions

log = logging.getLogger(__name__)

SERVING_PREFIX = "warden: serving MCP over HTTP at "
"""The start of the line on stderr that names the endpoint's URL (tests and scripts look for it)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("HTTP (serve hosts over Streamable HTTP instead of stdio)")
    group.add_argument("--http", metavar="HOST:PORT",
                       help="serve hosts of either MCP era at http://HOST:PORT/mcp (HOST defaults to 127.0.0.1; "
                            "port 0 picks a free one)")
    group.add_argument("--token-file", metavar="FILE", type=Path,
                       help="the bearer token hosts must send (default: one warden makes in its state dir)")
    group.add_argument("--no-auth", action="store_true",
                       help="accept requests without a bearer token (refused unless HOST is a loopback address)")
    group.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="also accept browser requests from ORIGIN (scheme://host[:port]); repeatable")
    group.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="also accept NAME in the Host header (e.g. behind a reverse proxy); repeatable")
    group.add_argument("--accept-oauth-issuer", metavar="URL",
                       help="also accept JWT access tokens this authorization server issued for warden (RFC 9068; "
                            "keys from its metadata's jwks_uri)")
    group.add_argument("--accept-oauth-jwks", metavar="URL", help="the issuer's JWK set, if not in its metadata")
    group.add_argument("--resource-url", metavar="URL",
                       help="warden's MCP URL as hosts reach it: the audience tokens must name (default: "
                            "http://HOST:PORT/mcp)")
    group.add_argument("--require-scope", action="append", default=[], metavar="SCOPE",
                       help="a scope every token must carry (else 403 insufficient_scope); repeatable")
    group.add_argument("--keepalive", type=float, default=15.0, metavar="SECONDS",
                       help="send a keep-alive comment on a quiet event stream this often (default 15)")


def http_from_args(ctx: CommandContext, args: argparse.Namespace, *, max_body_size: int,
                   question_timeout: float) -> tuple[HttpOptions, Path | None] | None:
    """:func:`http_options` when ``--http`` is given, else None.

    Raises:
        ConfigError: an HTTP-only flag without ``--http``; or what :func:`http_options` raises.
    """
    if args.http is not None:
        return http_options(ctx, args, max_body_size=max_body_size, question_timeout=question_timeout)
    given = [flag for flag, value in (("--no-auth", args.no_auth), ("--token-file", args.token_file),
                                      ("--allow-origin", args.allow_origin), ("--allow-host", args.allow_host),
                                      ("--accept-oauth-issuer", args.accept_oauth_issuer),
                                      ("--accept-oauth-jwks", args.accept_oauth_jwks),
                                      ("--resource-url", args.resource_url), ("--require-scope", args.require_scope))
             if value]
    if given:
        raise ConfigError(f"HTTP face flags only go with --http: {', '.join(given)}",
                          hint="add --http 127.0.0.1:PORT to serve hosts over HTTP")
    return None


def http_options(ctx: CommandContext, args: argparse.Namespace, *, max_body_size: int,
                 question_timeout: float) -> tuple[HttpOptions, Path | None]:
    """The HTTP face's options from the command line, and the token file in force (None with ``--no-auth``).

    Raises:
        ConfigError: a malformed ``--http``, ``--no-auth`` off loopback or with ``--token-file``, an unusable
            token file or origin.
        StateError: the state directory (where warden keeps its token) is unsafe.
    """
    # The HTTP face (hypercorn, OAuth) is imported only when it is asked for: a stdio `warden run` starts sooner.
    from warden.gateway.http import HttpOptions

    host, port = parse_bind(args.http)
    if args.no_auth:
        if args.token_file is not None:
            raise ConfigError("--no-auth and --token-file exclude each other", hint="drop one of them")
        token, token_file = None, None  # off loopback, HttpOptions refuses it
    elif args.token_file is not None:
        token, token_file = read_token_file(args.token_file), args.token_file
    else:
        token, token_file = load_or_create_token(ctx.private_state_dir(), host, port)
    tokens = None
    if not args.no_auth:  # named tokens (`warden tokens`): a list warden cannot read is refused now, not later
        tokens = TokenRegistry(ctx.private_state_dir())
        tokens.tokens()
    options = HttpOptions(host=host, port=port, token=token, insecure_no_auth=args.no_auth,
                          allow_hosts=tuple(args.allow_host), allow_origins=tuple(args.allow_origin),
                          max_body_size=max_body_size, question_timeout=question_timeout,
                          keepalive_interval=args.keepalive, resource_server=_resource_server(args, host, port),
                          tokens=tokens)
    if not is_loopback(host):
        log.warning("serving HTTP on %s: reachable from other machines; every request needs the bearer token", host)
    return options, token_file


def _resource_server(args: argparse.Namespace, host: str, port: int) -> ResourceServer | None:
    """The OAuth resource server the ``--accept-oauth-*`` flags ask for (None without them)."""
    if args.accept_oauth_issuer is None:
        if args.accept_oauth_jwks or args.resource_url or args.require_scope:
            raise ConfigError("--accept-oauth-jwks, --resource-url and --require-scope go with --accept-oauth-issuer")
        return None
    resource = args.resource_url
    if resource is None:
        if port == 0:
            raise ConfigError("tokens must name warden's URL as their audience, which port 0 does not fix",
                              hint="give --resource-url, or a fixed port in --http")
        literal = f"[{host}]" if ":" in host else host
        resource = f"http://{literal}:{port}/mcp"
    from warden.auth import ResourceServer, ResourceServerSettings

    return ResourceServer(ResourceServerSettings(resource=resource, issuer=args.accept_oauth_issuer,
                                                 jwks_uri=args.accept_oauth_jwks, scopes=tuple(args.require_scope)))


def announce(url: str, token_file: Path | None) -> None:
    """Tell the user where the endpoint is and where its token lives (never the token itself)."""
    logs.say(f"{SERVING_PREFIX}{url}")
    if token_file is None:
        logs.say("warden: WARNING: --no-auth: any program on this machine may use this endpoint")
    else:
        logs.say(f'warden: bearer token in {token_file} (hosts send "Authorization: Bearer <that token>")')
