"""The taint ledger: which flow sources have returned content into which host session.

One file per host session, ``<state>/flow/<session>.json``, so that every warden process serving the same host
session (two ``warden run`` started by one host share its session key) sees the same taint, and so that a human --
and only a human -- clears it: ``warden flow clear SESSION`` removes the file, and the next sink decision of every
process sees the session clean. Nothing in the gateway ever removes a mark.

Reads are one ``stat`` while the file is unchanged (its identity and size are remembered); a mark is written under
an exclusive lock on the directory's lock file, read-modify-write, atomically replaced (fsync'd: a refused sink
must not become allowed because the machine crashed between a source and the sink).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, final

from warden.durable import exclusive_lock, replace_path
from warden.errors import StateError
from warden.paths import ensure_private_dir, read_private_file
from warden.policy._flow import TaintMark

__all__ = ["MAX_MARKS", "TaintLedger", "TaintedSession", "check_session_key", "clear_session", "flow_dir",
           "host_process_session", "host_session_ended", "principal_session", "tainted_sessions"]

_SESSION: Final = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
MAX_MARKS: Final = 64
"""Marks kept per session: the first source is the evidence that matters; later ones are kept up to this bound."""
_MAX_FILE: Final = 256 * 1024


def host_process_session(pid: int) -> str | None:
    """The session key of a stdio host: its process (pid, start time, boot), so every ``warden run`` one host
    started shares one session and its taint, and a new host process -- or a reused pid -- starts clean. None
    when ``/proc`` cannot say (the caller keeps a per-process session). A host that starts warden through a
    wrapper (a shell, ``npx``) gives each server its own wrapper, hence its own session: taint then stays per
    server, never wider than it should."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read(64).strip()[:8].decode("ascii", "replace")
        start = stat[stat.rindex(b")") + 2:].split()[19].decode("ascii")
    except (OSError, ValueError, IndexError):
        return None
    return check_session_key(f"host-{boot}-{pid}-{start}")


def principal_session(principal: str) -> str:
    """The session key of a principal the HTTP face authenticated: every session and request of that principal
    shares one taint (it is who was authenticated, not a connection), which outlives a warden restart like a
    stdio host's does; two principals never share one. A digest, since a principal (an OAuth subject) may hold
    anything."""
    return check_session_key("principal-" + hashlib.sha256(principal.encode("utf-8", "replace")).hexdigest()[:32])


def host_session_ended(session: str) -> bool:
    """Whether a ``host-...`` session's host process is gone (another boot, or that pid now started at another
    time). False for other sessions and whenever ``/proc`` cannot tell: only a sure answer counts."""
    parts = session.split("-")
    if len(parts) != 4 or parts[0] != "host" or not parts[2].isdigit():
        return False
    now = host_process_session(int(parts[2]))
    if now is not None:
        return now != session
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read(64).strip()[:8].decode("ascii", "replace")
    except OSError:
        return False
    return boot != parts[1] or not Path(f"/proc/{parts[2]}").exists()


def flow_dir(state_dir: Path) -> Path:
    return state_dir / "flow"


def check_session_key(session: str) -> str:
    """A session key is a file name: letters, digits, ``_ . -``, at most 128 (never ``.`` or ``..``)."""
    if not _SESSION.fullmatch(session) or session in (".", ".."):
        raise StateError(f"{session!r} is not a session key", hint="copy it from `warden flow list`")
    return session


def _parse(raw: bytes, path: Path) -> tuple[TaintMark, ...]:
    try:
        doc = json.loads(raw)
        return tuple(TaintMark(str(m["server"]), str(m["tool"]), m["index"] if isinstance(m["index"], int) else None)
                     for m in doc["marks"])
    except (ValueError, KeyError, TypeError) as exc:
        # Unreadable taint must not read as "clean": the caller treats this as tainted by an unknown source.
        raise StateError(f"taint ledger {path} is not readable: {exc}",
                         hint=f"inspect it; `warden flow clear {path.stem}` removes it") from exc


@final
class TaintLedger:
    """The taint of one host session, as one warden process sees it."""

    def __init__(self, state_dir: Path, session: str) -> None:
        self.session = check_session_key(session)
        self.dir = flow_dir(state_dir)
        self.path = self.dir / f"{session}.json"
        self._seen: tuple[int, int, int] | None = None
        self._marks: tuple[TaintMark, ...] = ()

    def marks(self) -> tuple[TaintMark, ...]:
        """The session's marks now (another process's marks and a human's clearing count at once).

        Raises:
            StateError: the ledger exists but cannot be read (the caller must refuse sinks, not allow them).
        """
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            self._seen, self._marks = None, ()
            return ()
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._seen:
            raw = read_private_file(self.path, _MAX_FILE, what="taint ledger")
            self._marks = () if raw is None else _parse(raw, self.path)
            self._seen = key
        return self._marks

    def mark(self, mark: TaintMark, *, client: str | None = None, principal: str | None = None) -> None:
        """Add ``mark`` (a source's content reached this session, whose host is ``client``, authenticated as
        ``principal``). Durable when it returns.

        Raises:
            StateError: the ledger could not be written (the caller refuses sinks from now on).
        """
        ensure_private_dir(self.dir)
        with exclusive_lock(self.dir / ".lock"):
            current = self.marks()
            if mark in current or len(current) >= MAX_MARKS:
                return
            doc: dict[str, Any] = {"session": self.session, "client": client, "principal": principal,
                                   "marks": [{"server": m.server, "tool": m.tool, "index": m.index}
                                             for m in (*current, mark)]}
            try:
                replace_path(self.path, json.dumps(doc, sort_keys=True).encode())
            except OSError as exc:
                raise StateError(f"cannot write taint ledger {self.path}: {exc.strerror}") from exc
            self._seen = None

@final
@dataclass(frozen=True, slots=True)
class TaintedSession:
    session: str
    client: str | None
    marks: tuple[TaintMark, ...]
    principal: str | None = None


def tainted_sessions(state_dir: Path) -> list[TaintedSession]:
    """Every session with taint, for ``warden flow list``."""
    out: list[TaintedSession] = []
    directory = flow_dir(state_dir)
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        raw = read_private_file(path, _MAX_FILE, what="taint ledger")
        if raw is None:
            continue
        marks = _parse(raw, path)  # StateError, naming the file, for anything unreadable
        doc = json.loads(raw)
        client, principal = doc.get("client"), doc.get("principal")
        out.append(TaintedSession(path.stem, client if isinstance(client, str) else None, marks,
                                  principal if isinstance(principal, str) else None))
    return out


def clear_session(state_dir: Path, session: str) -> bool:
    """A human clears a session's taint (``warden flow clear``). True if there was any."""
    path = flow_dir(state_dir) / f"{check_session_key(session)}.json"
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
