"""Env values in a config: the ``${secret:NAME}`` / ``${env:NAME}`` grammar and their resolution at launch.

A server's ``env`` is either a list of names (each passed from warden's own environment) or a table
``NAME = "value"``. A table value is literal text with references in it:

* ``${secret:S}`` — secret ``S`` of warden's secrets store (``warden secrets set S``); resolved when the server
  is launched, handed to it in its environment only (never in an argv, a log line or a record: every value
  resolved here is redacted by the launch's registry);
* ``${env:V}`` — variable ``V`` of warden's own environment (what the list form means for each name).

Any other ``${`` is an error, so a host's syntax (``${input:x}``, ``${workspaceFolder}``) copied into a config
is refused with its line instead of reaching a server as text. A literal value is accepted only under a name that
does not look secret (:func:`warden.secrets.looks_secret`): a token written in clear into a config file is
refused with the command that moves it into the store.

Checking is pure; resolution takes the environment and the secret lookup as arguments.

This module also decides which variables of warden's environment a host "plainly meant" for a server that the
policy does not pass (:func:`unpassed_env`): a host that sets ``GITHUB_PERSONAL_ACCESS_TOKEN`` for a server it
launches as ``warden run -- npx -y @modelcontextprotocol/server-github`` gets a warning naming the variable, never
its value, and the line to add.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from warden.secrets import looks_secret

__all__ = ["check_env_table", "check_env_value", "env_line", "references", "resolve_env", "secret_reference",
           "unpassed_env", "unpassed_env_warning"]

_REF: Final = re.compile(r"\$\{(secret|env):([^}]*)\}")
_SECRET_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_VALUE_CHARS: Final = 64 * 1024


def secret_reference(name: str) -> str:
    """The config spelling of secret ``name``."""
    return "${secret:" + name + "}"


def references(value: str) -> list[tuple[str, str]]:
    """The ``(kind, name)`` references in a checked value, in order (``kind`` is ``secret`` or ``env``)."""
    return [(m.group(1), m.group(2)) for m in _REF.finditer(value)]


def check_env_value(value: str) -> str:
    """Return ``value`` if it is a valid env value: literal text and well-formed references only.

    Raises:
        ValueError: an unknown ``${...}`` form, a bad name in a reference, NUL, or a value over 64 KiB (pydantic
            reports it with the file and line).
    """
    if "\x00" in value or len(value) > MAX_VALUE_CHARS:
        raise ValueError(f"an env value may not hold NUL or be longer than {MAX_VALUE_CHARS} characters")
    for match in _REF.finditer(value):
        kind, name = match.group(1), match.group(2)
        pattern = _SECRET_NAME if kind == "secret" else _ENV_NAME
        if not pattern.fullmatch(name):
            raise ValueError(f"{match.group(0)!r} does not name a {'secret' if kind == 'secret' else 'variable'}")
    rest = _REF.sub("", value)
    if "${" in rest:
        bad = rest[rest.index("${"):].split("}")[0][:40]
        raise ValueError(f"{bad}...: only ${{secret:NAME}} (warden's secrets store) and ${{env:NAME}} (warden's "
                         "environment) can be referred to in an env value")
    return value


def check_env_table(env: Mapping[str, str]) -> None:
    """Refuse a literal value under a name that looks secret: the value belongs in the secrets store.

    Raises:
        ValueError: naming the variable (never its value) and the two steps that fix it.
    """
    for name, value in env.items():
        if value and not references(value) and looks_secret(name):
            raise ValueError(f"env {name}: a literal value under a secret name would keep the secret in clear in "
                             f"this file; move it into warden's secrets store (`warden secrets set {name}`) and "
                             f"write {name} = {secret_reference(name)!r}")


def resolve_env(env: Mapping[str, str], host_env: Mapping[str, str],
                secret: Callable[[str], str]) -> tuple[dict[str, str], list[str]]:
    """The environment a launch hands the server, and the variables left out because a ``${env:V}`` they refer to
    is not set in warden's environment (the caller warns about those).

    ``secret(name)`` returns a secret's value or raises (``SecretStore.get``: ``ConfigError`` naming the command
    that sets it), so a missing secret refuses the launch rather than starting the server without it.
    """
    out: dict[str, str] = {}
    missing: list[str] = []
    for name, spec in env.items():
        parts: list[str] = []
        position = 0
        absent = False
        for match in _REF.finditer(spec):
            parts.append(spec[position:match.start()])
            kind, ref = match.group(1), match.group(2)
            if kind == "secret":
                parts.append(secret(ref))
            elif ref in host_env:
                parts.append(host_env[ref])
            else:
                absent = True
            position = match.end()
        parts.append(spec[position:])
        if absent:
            missing.append(name)
        else:
            out[name] = "".join(parts)
    return out, missing


# Variables every process has, which no host sets "for" a server.
_SESSION: Final = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "PWD", "OLDPWD", "SHLVL", "_", "TZ",
    "TMPDIR", "TMP", "TEMP", "DISPLAY", "WAYLAND_DISPLAY", "COLORTERM", "EDITOR", "VISUAL", "PAGER", "MAIL",
    "HOSTNAME", "MOTD_SHOWN", "LS_COLORS", "VIRTUAL_ENV", "NODE_OPTIONS", "NODE_PATH", "PYTHONPATH",
})
_SESSION_PREFIXES: Final = ("LC_", "XDG_", "DBUS_", "SSH_", "TERM_", "GPG_", "WARDEN_", "npm_", "VSCODE_",
                            "CLAUDE_", "CURSOR_", "ELECTRON_", "CHROME_", "GIO_", "GTK_", "QT_", "KDE_", "GNOME_")
_GENERIC_WORDS: Final = frozenset({"mcp", "server", "servers", "modelcontextprotocol", "model", "context",
                                   "protocol", "npx", "uvx", "node", "python", "python3", "run", "main", "index",
                                   "dist", "cli", "app", "the", "official", "src", "bin", "lib", "usr", "home",
                                   "modules", "local", "opt", "var", "tmp", "root", "build", "env"})


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if len(w) >= 3 and w not in _GENERIC_WORDS}


def unpassed_env(server: str, argv: Sequence[str], passed: Iterable[str], host_env: Mapping[str, str]) -> list[str]:
    """Variables of warden's environment that the host plainly set for this server but that policy does not pass:
    not an ordinary session variable, and named after the server (a word of the server's name or of its command,
    ``GITHUB_…`` for ``server-github``, ``MEMORY_FILE_PATH`` for ``server-memory``). Of a command word only the
    last path component counts: the directories an interpreter or script lives in (``/check/work/.venv/bin``)
    say nothing about the server and would otherwise name ``PIP_DISABLE_PIP_VERSION_CHECK``. Sorted names, never
    values."""
    words = _words(server)
    for arg in argv[:4]:
        if not arg.startswith("-"):
            words |= _words(arg.rstrip("/").rpartition("/")[2])
    passed_set = set(passed)
    out = []
    for name in host_env:
        if name in passed_set or name in _SESSION or name.startswith(_SESSION_PREFIXES):
            continue
        if words & _words(name):
            out.append(name)
    return sorted(out)


def env_line(names: Sequence[str], existing: Sequence[str] = ()) -> str:
    """The ``env`` line of a ``[servers.NAME]`` table that passes ``names`` as well as ``existing``."""
    merged = list(dict.fromkeys((*existing, *names)))
    return "env = [" + ", ".join(f'"{n}"' for n in merged) + "]"


def unpassed_env_warning(server: str, argv: Sequence[str], env: Mapping[str, str], host_env: Mapping[str, str],
                         config: str) -> str | None:
    """The warning for :func:`unpassed_env` (None when there is nothing to say): the names, the file and the exact
    line that passes them. ``env`` is the server's configured env table (name → value spec)."""
    names = unpassed_env(server, argv, env, host_env)
    if not names:
        return None
    if all(spec == "${env:" + name + "}" for name, spec in env.items()):
        line = env_line(names, tuple(env))
    else:
        line = "env = { " + ", ".join(f'{n} = "{spec}"' for n, spec in
                                      {**env, **{n: "${env:" + n + "}" for n in names}}.items()) + " }"
    which = ", ".join(names)
    return (f"{server}: {which} {'is' if len(names) == 1 else 'are'} set in warden's environment (the host meant "
            f"{'it' if len(names) == 1 else 'them'} for this server) but the policy does not pass "
            f"{'it' if len(names) == 1 else 'them'}; to pass, put this line under [servers.{server}] in {config}: "
            f"{line}")
