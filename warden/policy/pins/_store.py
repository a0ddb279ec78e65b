"""The pin store: one JSON file in warden's private state directory, shared safely by several processes.

Layout: ``<state>/pins.json`` (mode 0600, in a 0700 directory that no sandbox ever sees) holds, per server, one
record per pinned thing: the server identity (its launch manifest), its instructions, and each tool, prompt,
resource and resource template. A record keeps the current definition and digest, the approved definition and
digest, the findings of the scanner, and who approved it when.

Concurrency: every change takes an exclusive ``flock`` on ``<state>/pins.lock``, re-reads the file, applies the
change and replaces the file atomically (write a temporary file, fsync, rename, fsync the directory), so several
``warden run`` processes and a ``warden pins approve`` in another terminal never lose each other's updates. Readers
take no lock: they ``stat`` the file on each check and reload only when its inode, size or mtime changed, which is
cheap enough to do on every call and makes an approval or revocation from another terminal effective at once.

Whether an entry may be used is decided from the digest the caller sees *now*: it is approved only while that
digest equals the approved digest and the entry is not revoked. A definition that changed is therefore
quarantined even before any process has written the change down.

Secrets: what is stored is redacted with the state directory's secrets registry (``warden.secrets``): a definition
that holds a registered value (a token a server echoed into a description) is stored with it cut out and
``redacted: true``, while its digest stays that of the real definition, so pinning is unchanged. A tool or prompt
whose *name* holds one, or breaks the name rules (:mod:`warden.policy.pins._names`), is refused before anything is
stored: never listed, never approvable.

Trust: the file is refused (fail closed, nothing approved) if it is a symlink, not ours, group/world accessible or
malformed. Nothing a server sends can approve anything: servers only cause ``pending`` or ``changed`` records;
approvals come from :meth:`PinStore.approve` (the terminal) and :meth:`PinStore.approve_exact` (an in-band answer).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import stat
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, final

from pydantic import BaseModel, ConfigDict, ValidationError

from warden.durable import exclusive_lock, replace_path
from warden.errors import PolicyError, RemoteProtocolError, StateError
from warden.paths import ensure_private_dir, private_problem
from warden.policy.pins._canonical import digest as compute_digest
from warden.policy.pins._names import refused_names
from warden.policy.pins._scan import Finding, scan_definition
from warden.policy.pins._types import ENTRY_KINDS, EntryKind, PinState
from warden.secrets import Redactor, load_redactor

__all__ = ["Detection", "ListObservation", "PinEntry", "PinStore", "entry_key"]

FORMAT: Literal["warden-pins/1"] = "warden-pins/1"
MAX_STORE_BYTES = 64 << 20
_KEY_FIELD: dict[str, str] = {"tool": "name", "prompt": "name", "resource": "uri", "resource_template": "uriTemplate"}


class _Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str
    path: str
    message: str


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: EntryKind
    key: str
    state: Literal["pending", "approved", "changed", "revoked"]
    digest: str
    definition: Any
    approved_digest: str | None = None
    approved_definition: Any = None
    findings: list[_Finding] = []
    first_seen: str
    changed_at: str | None = None
    approved_at: str | None = None
    approved_by: str | None = None
    redacted: bool = False
    """``definition`` (and so an approval of it) had registered secret values cut out; the digest is the real one."""
    approved_for: list[str] | None = None
    """The principals the approval holds for (``warden pins approve --principal``); None: everyone."""


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["warden-pins/1"]
    servers: dict[str, dict[str, _Record]] = {}


def entry_key(kind: EntryKind, key: str) -> str:
    """The record key inside a server: ``kind:key`` (kinds contain no colon, so the split is unambiguous)."""
    return f"{kind}:{key}"


@final
@dataclass(frozen=True, slots=True)
class PinEntry:
    """A read-only view of one record."""

    server: str
    kind: EntryKind
    key: str
    state: PinState
    digest: str
    definition: Any
    approved_digest: str | None
    approved_definition: Any
    findings: tuple[Finding, ...]
    first_seen: str
    changed_at: str | None
    approved_at: str | None
    approved_by: str | None
    redacted: bool = False
    """The stored definition had registered secret values cut out (views say so); ``digest`` is the real one's."""
    approved_for: tuple[str, ...] | None = None
    """The principals the approval holds for; None: everyone."""

    @classmethod
    def _of(cls, server: str, r: _Record) -> PinEntry:
        return cls(server, r.kind, r.key, PinState(r.state), r.digest, r.definition, r.approved_digest,
                   r.approved_definition, tuple(Finding(f.code, f.path, f.message) for f in r.findings),
                   r.first_seen, r.changed_at, r.approved_at, r.approved_by, r.redacted,
                   None if r.approved_for is None else tuple(r.approved_for))

    @property
    def label(self) -> str:
        return "server identity" if self.kind == "server" else "instructions" if self.kind == "instructions" \
            else f"{self.kind.replace('_', ' ')} {self.key!r}"


@final
@dataclass(frozen=True, slots=True)
class Detection:
    """Something the gateway must report (stderr now, an audit record later)."""

    server: str
    kind: EntryKind
    key: str
    event: Literal["new", "changed", "reverted", "tofu-approved", "rejected"]
    digest: str | None
    previous_digest: str | None = None
    findings: tuple[Finding, ...] = ()
    detail: str = ""

    def __str__(self) -> str:
        what = {"server": "server identity", "instructions": "instructions"}.get(self.kind, f"{self.kind} {self.key!r}")
        extra = f" ({len(self.findings)} finding(s))" if self.findings else ""
        tail = f": {self.detail}" if self.detail else ""
        return f"warden: pins: server {self.server!r}: {what} {self.event}{extra}{tail}"


_NAMED_IN_SUMMARY: Final = 6
"""How many entries a summary line names before it counts the rest."""


def report_lines(detections: Sequence[Detection]) -> list[str]:
    """What a person reads of ``detections``: each one its own line, except plain ``new`` and ``tofu-approved``
    entries of one server and kind (no findings, no detail), which are one line naming the first few. A first
    start of a server with forty tools is then one line per kind, not forty, and what needs a look (a change, a
    revert, a rejection, a finding) stands out. Names are shown by ``repr``, so none can break a line."""
    shown: list[Detection | list[Detection]] = []
    groups: dict[tuple[str, EntryKind, str], list[Detection]] = {}
    for d in detections:
        if d.event not in ("new", "tofu-approved") or d.findings or d.detail or d.kind in ("server", "instructions"):
            shown.append(d)
            continue
        group = groups.get((d.server, d.kind, d.event))
        if group is None:
            group = groups[(d.server, d.kind, d.event)] = []
            shown.append(group)
        group.append(d)
    return [str(item).removeprefix("warden: ") if isinstance(item, Detection) else _summary(item) for item in shown]


def _summary(group: Sequence[Detection]) -> str:
    first = group[0]
    if len(group) == 1:
        return str(first).removeprefix("warden: ")
    named = ", ".join(repr(d.key) for d in group[:_NAMED_IN_SUMMARY])
    more = f" and {len(group) - _NAMED_IN_SUMMARY} more" if len(group) > _NAMED_IN_SUMMARY else ""
    what = "new" if first.event == "new" else "approved on first use"
    return f"pins: server {first.server!r}: {len(group)} {first.kind}s {what}: {named}{more}"


@final
@dataclass(frozen=True, slots=True)
class ListObservation:
    """What one upstream list contained: each usable key's digest and pin state, plus what to report."""

    digests: Mapping[str, str]
    states: Mapping[str, PinState]
    detections: tuple[Detection, ...] = ()
    rejected: tuple[str, ...] = field(default=())


def _now_iso(clock: Callable[[], float]) -> str:
    return datetime.datetime.fromtimestamp(clock(), tz=datetime.UTC).isoformat(timespec="seconds")


@final
class PinStore:
    """Pins for every server, in ``state_dir``. See the module docstring for the guarantees.

    Raises (from every method): :class:`StateError` when the store cannot be read or written safely.
    """

    def __init__(self, state_dir: Path, *, clock: Callable[[], float] = time.time,
                 redactor: Redactor | None = None) -> None:
        """``redactor``: the secrets registry to store definitions through; by default the state directory's,
        read again at each change (so a value registered by another process since is covered)."""
        self._redactor = redactor
        self._dir = ensure_private_dir(state_dir)
        self._path = self._dir / "pins.json"
        self._lock_path = self._dir / "pins.lock"
        self._clock = clock
        self._stamp: tuple[int, int, int, int] | None = None
        self._data = _File(format=FORMAT)
        self.generation = 0
        """Counts the times this store found the file changed by someone else (another process): never by its
        own writes. Each reader sharing the store (``warden serve``'s gateways) compares it with what it saw."""
        self.revision = 0
        """Counts every change of what this store holds, a reload or its own write: whatever a reader derived from
        the store (a cached decision) holds exactly while this is unchanged."""

    @property
    def path(self) -> Path:
        return self._path

    # ---- reading -------------------------------------------------------------------------------------------

    def _read(self) -> tuple[_File, tuple[int, int, int, int] | None]:
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return _File(format=FORMAT), None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StateError(f"{self._path} is a symlink; refusing it",
                                 hint=f"remove it and re-approve: rm {self._path}") from exc
            raise StateError(f"cannot open {self._path}: {exc.strerror}") from exc
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or private_problem(st, mode=0o600) is not None:
                raise StateError(f"{self._path} is not a private regular file of ours (mode "
                                 f"{stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid}); refusing every pin",
                                 hint=f"check who changed it; then chmod 600 {self._path}")
            raw = f.read(MAX_STORE_BYTES + 1)
        if len(raw) > MAX_STORE_BYTES:
            raise StateError(f"{self._path} is larger than {MAX_STORE_BYTES} bytes")
        try:
            data = _File.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as exc:
            raise StateError(f"{self._path} is corrupt: {str(exc).splitlines()[0]}",
                             hint="restore it from a backup, or remove it and approve again") from exc
        return data, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def refresh(self) -> bool:
        """Reload if another process replaced the file (one ``stat``; called by every read unless the caller
        refreshed once for several reads, as one decision does, or watches the file). True when it reloaded."""
        try:
            st = os.stat(self._path, follow_symlinks=False)
            stamp: tuple[int, int, int, int] | None = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        except OSError as exc:
            raise StateError(f"cannot stat {self._path}: {exc.strerror}") from exc
        if stamp != self._stamp or (stamp is None and self._data.servers):
            self._data, self._stamp = self._read()
            self.generation += 1
            self.revision += 1
            return True
        return False

    def state(self, server: str, kind: EntryKind, key: str, digest: str, *, refresh: bool = True,
              principal: str | None = None) -> PinState:
        """Is this exact ``digest`` approved for the entry, for ``principal`` (None: the stdio host)? An approval
        given for other principals only is, to this one, still pending. Cheap: a ``stat`` plus a dict lookup (no
        ``stat`` with ``refresh=False``, after the caller's own :meth:`refresh`)."""
        if refresh:
            self.refresh()
        rec = self._data.servers.get(server, {}).get(entry_key(kind, key))
        if rec is None:
            return PinState.UNKNOWN
        if rec.state == "revoked":
            return PinState.REVOKED
        if rec.approved_digest == digest:
            if rec.approved_for is not None and principal not in rec.approved_for:
                return PinState.PENDING
            return PinState.APPROVED
        return PinState.CHANGED if rec.approved_digest is not None else PinState.PENDING

    def is_approved(self, server: str, kind: EntryKind, key: str, digest: str) -> bool:
        return self.state(server, kind, key, digest) is PinState.APPROVED

    def entries(self, server: str | None = None, *, refresh: bool = True) -> list[PinEntry]:
        """Every record (of one server), sorted by server, kind order, key."""
        if refresh:
            self.refresh()
        out = [PinEntry._of(s, r) for s, recs in self._data.servers.items() if server is None or s == server
               for r in recs.values()]
        return sorted(out, key=lambda e: (e.server, ENTRY_KINDS.index(e.kind), e.key))

    def get(self, server: str, kind: EntryKind, key: str, *, refresh: bool = True) -> PinEntry | None:
        if refresh:
            self.refresh()
        rec = self._data.servers.get(server, {}).get(entry_key(kind, key))
        return PinEntry._of(server, rec) if rec else None

    def servers(self) -> list[str]:
        self.refresh()
        return sorted(self._data.servers)

    def tool_names_by_server(self) -> dict[str, set[str]]:
        """Every server's known tool names (for the cross-server scanner checks)."""
        self.refresh()
        return {s: {r.key for r in recs.values() if r.kind == "tool"} for s, recs in self._data.servers.items()}

    # ---- writing -------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _update(self) -> Iterator[_File]:
        with exclusive_lock(self._lock_path):
            data, stamp = self._read()
            if stamp != self._stamp:  # another process wrote since this store last looked
                self.generation += 1
            before = data.model_dump_json()
            yield data
            if data.model_dump_json() != before:
                self._write(data)
            self._data, self._stamp = self._read()
            self.revision += 1

    def _write(self, data: _File) -> None:
        """Replace ``pins.json`` atomically and durably (the caller holds the store's lock)."""
        payload = json.dumps(data.model_dump(mode="json"), sort_keys=True, indent=1, ensure_ascii=True).encode()
        try:
            replace_path(self._path, payload)
        except OSError as exc:
            raise StateError(f"cannot write {self._path}: {exc.strerror}",
                             hint="check free space and permissions of the state directory") from exc

    def registry(self) -> Redactor:
        """The secrets registry this store redacts with (see ``__init__``)."""
        return self._redactor if self._redactor is not None else load_redactor(self._dir)

    def _observe_one(self, data: _File, server: str, kind: EntryKind, key: str, definition: Any, d: str,
                     findings: Sequence[Finding], on_new: str, redactor: Redactor) -> list[Detection]:
        stored = redactor.json_value(definition)
        redacted = stored != definition
        definition = stored
        recs = data.servers.setdefault(server, {})
        rk = entry_key(kind, key)
        rec = recs.get(rk)
        now = _now_iso(self._clock)
        fmodels = [_Finding(code=f.code, path=f.path, message=f.message) for f in findings]
        if rec is None:
            rec = _Record(kind=kind, key=key, state="pending", digest=d, definition=definition, findings=fmodels,
                          first_seen=now, redacted=redacted)
            recs[rk] = rec
            out = [Detection(server, kind, key, "new", d, None, tuple(findings))]
            if on_new == "tofu" and not findings:
                rec.state, rec.approved_digest, rec.approved_definition = "approved", d, definition
                rec.approved_at, rec.approved_by = now, "trust-on-first-use"
                out.append(Detection(server, kind, key, "tofu-approved", d))
            return out
        if rec.digest == d:
            return []
        previous = rec.digest
        rec.digest, rec.definition, rec.findings, rec.changed_at = d, definition, fmodels, now
        rec.redacted = redacted
        if rec.state == "revoked":
            return [Detection(server, kind, key, "changed", d, previous, tuple(findings), "still revoked")]
        if rec.approved_digest == d:
            rec.state = "approved"
            return [Detection(server, kind, key, "reverted", d, previous, detail="back to the approved definition")]
        rec.state = "changed" if rec.approved_digest is not None else "pending"
        return [Detection(server, kind, key, "changed", d, previous, tuple(findings),
                          "quarantined until approved again" if rec.approved_digest else "still pending")]

    def observe_server(self, server: str, manifest: Mapping[str, Any], *, on_new: str) -> tuple[PinState,
                                                                                               list[Detection]]:
        """Record the server's identity (its launch manifest); return its pin state and what to report."""
        d = compute_digest(dict(manifest))
        redactor = self.registry()
        with self._update() as data:
            detections = self._observe_one(data, server, "server", "", dict(manifest), d, (), on_new, redactor)
        return self.state(server, "server", "", d), detections

    def observe_instructions(self, server: str, instructions: str | None, *, on_new: str) -> tuple[PinState,
                                                                                                  list[Detection]]:
        """Record the server's instructions (absent instructions pin as ``null``)."""
        d = compute_digest(instructions)
        current = self.get(server, "instructions", "")
        if current is not None and current.digest == d:
            return self.state(server, "instructions", "", d), []
        findings = scan_definition("instructions", instructions or "", server=server,
                                   other_servers=self.tool_names_by_server())
        redactor = self.registry()
        with self._update() as data:
            detections = self._observe_one(data, server, "instructions", "", instructions, d, findings, on_new,
                                           redactor)
        return self.state(server, "instructions", "", d), detections

    def observe_list(self, server: str, kind: EntryKind, definitions: Sequence[Any], *, on_new: str,
                     extra_names: Mapping[str, Collection[str]] | None = None,
                     namespaced: bool = False) -> ListObservation:
        """Record a complete upstream list (all pages) of ``kind``: new entries become pending (or approved under
        trust-on-first-use when the scanner found nothing), changed ones are quarantined at once. Definitions
        without a usable key, that cannot be hashed, or whose key occurs twice are rejected (never listed).
        ``extra_names`` adds other servers' tool names the store does not know yet (other upstreams of this
        gateway) for the collision and shadowing checks; ``namespaced`` leaves the name-collision check out (see
        :func:`scan_definition`)."""
        if kind not in _KEY_FIELD:
            raise ValueError(f"observe_list takes tools, prompts, resources or templates, not {kind!r}")
        field_name = _KEY_FIELD[kind]
        keyed: dict[str, list[Any]] = {}
        rejected: list[str] = []
        detections: list[Detection] = []
        for i, definition in enumerate(definitions):
            key = definition.get(field_name) if isinstance(definition, Mapping) else None
            if not isinstance(key, str) or not key:
                rejected.append(f"#{i}")
                detections.append(Detection(server, kind, f"#{i}", "rejected", None,
                                            detail=f"no string {field_name!r}"))
                continue
            keyed.setdefault(key, []).append(definition)
        redactor = self.registry()
        refused = refused_names(kind, keyed, redactor)
        digests: dict[str, str] = {}
        for key, defs in keyed.items():
            if key in refused:
                rejected.append(key)
                detections.append(Detection(server, kind, key, "rejected", None,
                                            findings=(Finding("refused-name", "$." + field_name, refused[key]),),
                                            detail=refused[key] + " (hidden; not approvable)"))
                continue
            if len(defs) > 1:
                rejected.append(key)
                detections.append(Detection(server, kind, key, "rejected", None,
                                            detail=f"{len(defs)} definitions share this {field_name}"))
                continue
            try:
                digests[key] = compute_digest(defs[0])
            except RemoteProtocolError as exc:
                rejected.append(key)
                detections.append(Detection(server, kind, key, "rejected", None, detail=exc.message))
        self.refresh()
        known = self._data.servers.get(server, {})
        todo = {k: d for k, d in digests.items() if (rec := known.get(entry_key(kind, k))) is None or rec.digest != d}
        if todo:
            others = {s: set(n) for s, n in self.tool_names_by_server().items() if s != server}
            for s, names in (extra_names or {}).items():
                if s != server:
                    others.setdefault(s, set()).update(names)
            scanned = {k: scan_definition(kind, keyed[k][0], server=server, other_servers=others,
                                          namespaced=namespaced) for k in todo}
            with self._update() as data:
                for k, d in todo.items():
                    detections.extend(self._observe_one(data, server, kind, k, keyed[k][0], d, scanned[k], on_new,
                                                        redactor))
        states = {k: self.state(server, kind, k, d) for k, d in digests.items()}
        return ListObservation(digests, states, tuple(detections), tuple(rejected))

    def _select(self, data: _File, server: str, kind: EntryKind | None, key: str | None) -> list[_Record]:
        recs = data.servers.get(server)
        if not recs:
            raise PolicyError(f"no pins for server {server!r}", hint="run `warden pins list` to see known servers")
        if key is None and kind is None:
            return [r for r in recs.values() if r.state in ("pending", "changed")]
        found = [r for r in recs.values() if (key is None or r.key == key) and (kind is None or r.kind == kind)]
        if key is not None and kind is None and len({r.kind for r in found}) > 1:
            raise PolicyError(f"{key!r} names several kinds of entry of server {server!r}",
                              hint="add --kind tool|prompt|resource|resource_template")
        if not found and kind == "server":
            raise PolicyError(f"server {server!r} has no identity pin (it was never launched through warden)",
                              hint=f"revoke single entries instead: warden pins revoke {server} NAME")
        if not found:
            raise PolicyError(f"server {server!r} has no {kind or 'entry'} {key!r}",
                              hint=f"run `warden pins list {server}`")
        return found

    def approve(self, server: str, kind: EntryKind | None = None, key: str | None = None, *,
                expected: Mapping[tuple[EntryKind, str], str] | None = None, by: str = "terminal") -> list[PinEntry]:
        """Approve the current definition of the selected entries (the whole server: everything pending or
        changed, its identity included). ``expected`` maps ``(kind, key)`` to the digest the human was shown; an
        entry whose digest moved since then is not approved (raises :class:`PolicyError`)."""
        now = _now_iso(self._clock)
        with self._update() as data:
            chosen = self._select(data, server, kind, key)
            for r in chosen:
                want = (expected or {}).get((r.kind, r.key))
                if expected is not None and want != r.digest:
                    raise PolicyError(f"{r.kind} {r.key!r} of server {server!r} changed after it was shown; "
                                      "nothing was approved", hint=f"review it again: warden pins diff {server}")
            for r in chosen:
                r.state, r.approved_digest, r.approved_definition = "approved", r.digest, r.definition
                r.approved_at, r.approved_by, r.approved_for = now, by, None
        return [PinEntry._of(server, r) for r in chosen]

    def approve_exact(self, server: str, items: Sequence[tuple[EntryKind, str, str]], *, by: str,
                      principals: Sequence[str] | None = None) -> list[PinEntry]:
        """Approve exactly these ``(kind, key, digest)`` triples (an in-band answer), for everyone or, with
        ``principals``, for those only (added to whom an approval of the same digest already holds for). All or
        nothing: if any entry's current digest differs, nothing is approved and :class:`PolicyError` is raised."""
        now = _now_iso(self._clock)
        with self._update() as data:
            recs = data.servers.get(server, {})
            chosen: list[_Record] = []
            for kind, key, d in items:
                rec = recs.get(entry_key(kind, key))
                if rec is None or rec.digest != d:
                    raise PolicyError(f"{kind} {key!r} of server {server!r} is no longer the definition that was "
                                      "shown; nothing was approved")
                chosen.append(rec)
            for r in chosen:
                already = r.approved_for if r.state == "approved" and r.approved_digest == r.digest else []
                r.approved_for = None if principals is None or already is None \
                    else sorted({*already, *principals})
                r.state, r.approved_digest, r.approved_definition = "approved", r.digest, r.definition
                r.approved_at, r.approved_by = now, by
        return [PinEntry._of(server, r) for r in chosen]

    def revoke(self, server: str, kind: EntryKind | None = None, key: str | None = None) -> list[PinEntry]:
        """Revoke the selected entries (no ``kind``/``key``: the server identity, which refuses the whole
        server). A revoked entry stays refused until approved again by name."""
        with self._update() as data:
            chosen = self._select(data, server, kind or ("server" if key is None else None), key)
            for r in chosen:
                r.state = "revoked"
        return [PinEntry._of(server, r) for r in chosen]
