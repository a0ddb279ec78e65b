"""The secrets store: named values warden hands to servers, and the registry every output channel redacts.

Two kinds of value are kept, and both feed the one :class:`~warden.secrets.Redactor` that every warden process
builds (``warden run`` for its host messages, logs and audit records; ``warden pins``/``audit``/``status`` for what
they print and record):

* **secrets** the user set by name (``warden secrets set NAME``, ``warden import`` moving a host file's env values
  here) and a config refers to as ``${secret:NAME}``;
* **handed values**: whatever a launch passed to a server from warden's own environment (``env = ["GITHUB_TOKEN"]``).
  ``warden run`` records them here at launch, so that ``warden pins approve`` in another terminal — a process that
  never saw that environment — still cuts them out of what it writes and shows.

Where the values live. When the ``keyring`` library finds a real OS keyring (Secret Service, KWallet, the macOS
Keychain), values go there and ``secrets.json`` keeps only names and times; otherwise they are in
``<state>/secrets.json``, mode 0600 in the 0700 state directory that no sandbox ever sees — the protection the
audit signing key and the pin store already rely on. Keyring backends that are themselves plain files
(``keyrings.alt``) are not used: they would add nothing. The backend is chosen when the store is first written and
recorded in the file; a store whose keyring is unreachable later is refused, never silently moved to a file.

Writes take an ``flock`` on ``secrets.lock``, re-read, change and replace the file atomically (the pin store's
discipline), so several processes never lose each other's updates.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal, Protocol, final

from warden.durable import exclusive_lock, replace_path
from warden.errors import ConfigError, StateError
from warden.paths import ensure_private_dir, read_private_file
from warden.secrets._redact import MIN_SECRET_LENGTH, REDACTED, Redactor, redactable

__all__ = ["MAX_HANDED", "MAX_SECRET_BYTES", "SecretStore", "check_secret_name", "load_redactor"]

FORMAT: Final = "warden-secrets/1"
MAX_SECRET_BYTES: Final = 64 * 1024
MAX_HANDED: Final = 4096
"""Handed values kept for redaction; the oldest go first (a value not handed for that long is rotated or gone)."""
_MAX_FILE: Final = 16 << 20
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}")
_SERVICE: Final = "warden"
_HANDED_KEY: Final = "\x00handed"  # the keyring entry holding the handed values (no secret name can start so)
Backend = Literal["file", "keyring"]
# Backends that are files or nothing: no better than secrets.json, so not used.
_FILE_LIKE_BACKENDS: Final = ("keyrings.alt", "keyring.backends.null")


class Keyring(Protocol):
    """The part of a ``keyring`` backend warden uses."""

    def get_password(self, service: str, username: str) -> str | None: ...
    def set_password(self, service: str, username: str, password: str) -> None: ...
    def delete_password(self, service: str, username: str) -> None: ...


def os_keyring() -> Keyring | None:
    """The OS keyring the ``keyring`` library finds, or None when there is none worth using (no backend, the
    fail/null backends, an empty chain, or a backend that is only a file)."""
    try:
        import keyring
        from keyring.backends import chainer, fail
    except ImportError:  # pragma: no cover - keyring is a dependency
        return None
    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring) or type(backend).__module__.startswith(_FILE_LIKE_BACKENDS):
        return None
    if isinstance(backend, chainer.ChainerBackend) and not backend.backends:
        return None
    return backend


def check_secret_name(name: str) -> str:
    """Return ``name`` if it can name a secret (``[A-Za-z_][A-Za-z0-9_.-]{0,127}``).

    Raises:
        ConfigError: naming the rule.
    """
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{name!r} cannot name a secret", hint="use 1-128 of A-Z a-z 0-9 _ . - (not starting "
                                                                 "with a digit, '.' or '-')")
    return name


def _check_value(name: str, value: str) -> None:
    if len(value) < MIN_SECRET_LENGTH:
        raise ConfigError(f"secret {name}: a value of {len(value)} characters is too short to be redacted "
                          f"reliably (at least {MIN_SECRET_LENGTH})",
                          hint="a value that short is not a secret: pass it as a plain environment variable")
    if not redactable(value):
        raise ConfigError(f"secret {name}: the value is part of the redaction marker {REDACTED}",
                          hint="choose another value")
    if "\x00" in value or len(value.encode("utf-8", "surrogatepass")) > MAX_SECRET_BYTES:
        raise ConfigError(f"secret {name}: the value holds a NUL byte or is larger than {MAX_SECRET_BYTES} bytes")


@final
class SecretStore:
    """``<state>/secrets.json`` and, where one is in use, the OS keyring. Every method re-reads the file: other
    processes change it."""

    def __init__(self, state_dir: Path, *, keyring: Keyring | Literal["auto"] | None = "auto",
                 clock: Callable[[], float] = time.time) -> None:
        self._dir = state_dir
        self._path = state_dir / "secrets.json"
        self._lock = state_dir / "secrets.lock"
        self._keyring_arg = keyring
        self._clock = clock

    @property
    def path(self) -> Path:
        return self._path

    # -- reading ----------------------------------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        raw = read_private_file(self._path, _MAX_FILE, what="secrets store")
        if raw is None:
            return {"format": FORMAT, "backend": None, "secrets": {}, "handed": []}
        try:
            data = json.loads(raw)
            ok = (isinstance(data, dict) and data.get("format") == FORMAT and data.get("backend") in ("file",
                  "keyring") and isinstance(data.get("secrets"), dict) and isinstance(data.get("handed"), list))
        except ValueError:
            ok = False
        if not ok:
            raise StateError(f"secrets store {self._path} is corrupt",
                             hint="restore it from a backup, or remove it and set the secrets again")
        return data  # type: ignore[no-any-return]

    def _keyring_for(self, backend: Backend | None) -> Keyring | None:
        """The keyring a store with ``backend`` uses (None: values in the file). A file store never asks the OS
        for its keyring (finding one costs ~100 ms at every start)."""
        if backend == "file":
            return None
        chosen = os_keyring() if self._keyring_arg == "auto" else self._keyring_arg
        if backend is None and chosen is None:
            return None
        if chosen is None:
            raise StateError(f"the secrets in {self._path} are kept in the OS keyring, which cannot be reached now",
                             hint="unlock or start your keyring (Secret Service, KWallet), then try again")
        return chosen

    def _service(self) -> str:
        return f"{_SERVICE}:{self._dir}"

    def names(self) -> list[str]:
        """The secret names, sorted."""
        return sorted(self._read()["secrets"])

    def get(self, name: str) -> str:
        """The value of secret ``name``.

        Raises:
            ConfigError: there is no such secret (the hint names the command that sets it).
            StateError: the store or its keyring cannot be used.
        """
        data = self._read()
        entry = data["secrets"].get(name)
        if entry is None:
            raise ConfigError(f"there is no secret {name!r}", hint=f"set it with: warden secrets set {name}")
        keyring = self._keyring_for(data["backend"])
        value = entry.get("value") if keyring is None else keyring.get_password(self._service(), name)
        if not isinstance(value, str):
            raise StateError(f"secret {name!r} is listed in {self._path} but its value is missing",
                             hint=f"set it again: warden secrets set {name}")
        return value

    def values(self) -> list[str]:
        """Every value to redact: the secrets and the handed values (none before the store's first write)."""
        data = self._read()
        if data["backend"] is None:
            return []
        keyring = self._keyring_for(data["backend"])
        if keyring is None:
            secrets = [e.get("value") for e in data["secrets"].values()]
            handed = [e.get("value") for e in data["handed"]]
        else:
            secrets = [keyring.get_password(self._service(), name) for name in data["secrets"]]
            blob = keyring.get_password(self._service(), _HANDED_KEY)
            handed = [e.get("value") for e in json.loads(blob)] if blob else []
        return [v for v in (*secrets, *handed) if isinstance(v, str)]

    def redactor(self, extra: tuple[str, ...] = ()) -> Redactor:
        return Redactor((*self.values(), *extra))

    # -- writing ----------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _update(self) -> Iterator[dict[str, Any]]:
        ensure_private_dir(self._dir)
        with exclusive_lock(self._lock):
            data = self._read()
            if data["backend"] is None:
                data["backend"] = "file" if self._keyring_for(None) is None else "keyring"
            yield data
            payload = json.dumps(data, sort_keys=True, indent=1, ensure_ascii=True).encode()
            try:
                replace_path(self._path, payload)
            except OSError as exc:
                raise StateError(f"cannot write {self._path}: {exc.strerror}",
                                 hint="check free space and permissions of the state directory") from exc

    def _now(self) -> str:
        return datetime.datetime.fromtimestamp(self._clock(), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def set(self, name: str, value: str) -> None:
        """Set secret ``name`` to ``value`` (replacing any earlier value).

        Raises:
            ConfigError: a bad name, or a value too short to redact, holding NUL, or too large.
        """
        check_secret_name(name)
        _check_value(name, value)
        with self._update() as data:
            keyring = self._keyring_for(data["backend"])
            entry: dict[str, Any] = {"set_at": self._now()}
            if keyring is None:
                entry["value"] = value
            else:
                keyring.set_password(self._service(), name, value)
            data["secrets"][name] = entry

    def remove(self, name: str) -> bool:
        """Forget secret ``name``; False when there was none. Its value moves to the handed registry: a removed
        (rotated) value is still redacted from everything warden writes later."""
        with self._update() as data:
            entry = data["secrets"].pop(name, None)
            if entry is None:
                return False
            keyring = self._keyring_for(data["backend"])
            value = entry.get("value") if keyring is None else keyring.get_password(self._service(), name)
            if isinstance(value, str):
                self._hand(data, keyring, {name: value}, server=None)
            if keyring is not None:
                from keyring.errors import PasswordDeleteError
                with contextlib.suppress(PasswordDeleteError):  # already gone is what was asked
                    keyring.delete_password(self._service(), name)
            return True

    def record_handed(self, server: str, env: Mapping[str, str]) -> None:
        """Remember values a launch gave ``server`` (env name → value) for redaction by every later process.
        Values too short to redact are not kept (see :data:`MIN_SECRET_LENGTH`)."""
        wanted = {k: v for k, v in env.items() if redactable(v)}
        if not wanted or set(wanted.values()) <= set(self.values()):
            return  # nothing new: the common relaunch writes nothing
        with self._update() as data:
            self._hand(data, self._keyring_for(data["backend"]), wanted, server=server)

    def _hand(self, data: dict[str, Any], keyring: Keyring | None, env: Mapping[str, str],
              server: str | None) -> None:
        if keyring is None:
            handed: list[dict[str, Any]] = data["handed"]
        else:
            blob = keyring.get_password(self._service(), _HANDED_KEY)
            handed = json.loads(blob) if blob else []
        now = self._now()
        for name, value in env.items():
            handed[:] = [e for e in handed if e.get("value") != value]
            handed.append({"value": value, "env": name, "server": server, "at": now})
        del handed[:-MAX_HANDED]
        if keyring is None:
            data["handed"] = handed
        else:
            keyring.set_password(self._service(), _HANDED_KEY, json.dumps(handed))
            data["handed"] = [{"env": e["env"], "server": e["server"], "at": e["at"]} for e in handed]


def load_redactor(state_dir: Path, extra: tuple[str, ...] = ()) -> Redactor:
    """The one redaction registry for this state directory, plus ``extra`` values this process holds.

    Raises:
        StateError: the store exists but cannot be trusted or read (fail closed: no output is produced unredacted
            because the registry is broken).
    """
    return SecretStore(state_dir).redactor(extra)
