"""Running a package client (npm, uv) for intake: bounded time and output, failures turned into one clear error.

The clients run as warden's own user with the user's environment, so their registry configuration (``.npmrc``,
``npm_config_*``, ``uv.toml``, ``UV_*``, credentials) is honoured exactly as the user set it; only their caches
are redirected into warden's state directory. They are never asked to run package code: npm gets
``--ignore-scripts``, uv gets ``--only-binary :all:`` (wheels only, nothing built).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from warden.errors import IntakeError
from warden.escape import for_terminal

TIMEOUT = 600.0
_MAX_OUTPUT = 8 << 20
_UNREACHABLE = re.compile(r"ECONNREFUSED|ENOTFOUND|ETIMEDOUT|EAI_AGAIN|ECONNRESET|Connection refused|"
                          r"Failed to fetch|error sending request|dns error|timed out|Could not connect",
                          re.IGNORECASE)
_CERTIFICATE = re.compile(r"invalid peer certificate|certificate verify failed|local issuer certificate|"
                          r"self[- _]signed certificate|UnknownIssuer|SELF_SIGNED_CERT|UNABLE_TO_VERIFY|"
                          r"UNABLE_TO_GET_ISSUER|CERT_HAS_EXPIRED", re.IGNORECASE)  # not a package named "certificate…"


@dataclass(frozen=True, slots=True)
class Output:
    stdout: bytes
    stderr: str


def last_lines(text: str, count: int = 4) -> str:
    """The last meaningful lines of a client's error output, escaped for a terminal (registries echo package
    metadata, which anyone can publish)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and "npm error A complete log" not in line]
    return for_terminal(" | ".join(lines[-count:])[:800])


def unreachable(stderr: str) -> bool:
    """True when the client's error says the registry could not be reached (down, refused, DNS, timeout, or a
    certificate it does not trust)."""
    return _UNREACHABLE.search(stderr) is not None or _CERTIFICATE.search(stderr) is not None


def unreachable_reason(stderr: str) -> str:
    """The line of the client's error that says what could not be reached (escaped for a terminal); a refused
    certificate first, as it is the one line that says what to fix (uv puts it last, under "Failed to fetch")."""
    lines = stderr.splitlines()
    line = next((x for x in lines if _CERTIFICATE.search(x)), None) or next(
        (x for x in lines if _UNREACHABLE.search(x)), None)
    return last_lines(stderr, 2) if line is None else for_terminal(line.removeprefix("npm error").strip()[:400])


def run_client(argv: Sequence[str], *, env: Mapping[str, str], cwd: str | None, what: str,
               stdin: bytes | None = None, timeout: float = TIMEOUT) -> Output:
    """Run ``argv``; return its output, or raise naming ``what`` was being done.

    Raises:
        IntakeError: the client is missing, timed out, or exited non-zero (the caller may catch it and look at
            the message to say something more precise).
    """
    try:
        done = subprocess.run(list(argv), env=dict(env), cwd=cwd, input=stdin, capture_output=True,
                              timeout=timeout, check=False, stdin=None if stdin is not None else subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise IntakeError(f"{argv[0]} is not installed, so warden cannot {what}",
                          hint="install it (npm comes with Node.js; uv is a dependency of warden)") from exc
    except subprocess.TimeoutExpired as exc:
        raise IntakeError(f"{argv[0]} did not finish within {timeout:.0f} s while trying to {what}",
                          hint="check the registry and the network, then try again") from exc
    stderr = done.stderr[-_MAX_OUTPUT:].decode("utf-8", "replace")
    if done.returncode != 0:
        raise ClientFailed(what, argv[0], done.returncode, stderr)
    return Output(done.stdout[:_MAX_OUTPUT], stderr)


class ClientFailed(IntakeError):
    """A client exited non-zero; ``stderr`` is kept for callers that turn known failures into precise errors."""

    def __init__(self, what: str, client: str, code: int, stderr: str) -> None:
        super().__init__(f"{client} could not {what} (exit {code}): {last_lines(stderr)}",
                         hint="check the package name and version, and the registry configuration")
        self.stderr = stderr
