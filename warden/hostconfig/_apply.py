"""Carrying out an import plan, and ``--undo``: backup first, then atomic replaces, nothing half-written.

Order of a real run (each step durable before the next):

1. a backup record in ``<state>/imports/<id>/``: the exact bytes of every host file and of warden's config as they
   were, their digests before and after, and the secrets the import adds;
2. the secrets, into the store;
3. warden's config, replaced atomically (temporary file, fsync, rename, fsync of the directory);
4. each host file, replaced the same way, keeping its mode (and, as root, its owner). A host file that is a
   symlink is written through it, so a dotfile manager's link stays a link.

A failure at steps 2–4 undoes the steps already taken before the error is raised. ``--undo`` takes the newest
import not yet undone and puts the original bytes of each file unchanged since back — byte for byte — the same
atomic way; in a file changed since (Claude Code rewrites ``~/.claude.json`` at every start), only the entries warden
wrote that are still as it wrote them get the user's originals back (the record keeps what it wrote), everything else
stays; the secrets the import added are removed from the store.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import secrets as _random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, final

from warden.durable import fsync_directory, write_new_file
from warden.errors import ConfigError, StateError
from warden.hostconfig._formats import (
    JSONC_HOSTS,
    REMOVED,
    dump_host_document,
    host_document,
    replace_entries,
    server_maps,
)
from warden.hostconfig._jsonc import rewrite_jsonc_file
from warden.hostconfig._plan import ImportPlan
from warden.paths import ensure_private_dir
from warden.secrets import SecretStore

__all__ = ["FileUndo", "ImportRecord", "UndoResult", "apply_plan", "replace_foreign_file", "undo_last_import"]

_FORMAT: Final = "warden-import/1"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def replace_foreign_file(path: Path, data: bytes, *, mode: int, owner: tuple[int, int] | None) -> None:
    """Atomically replace a file that belongs to the user or a host (not to warden), keeping ``mode`` (and
    ``owner`` when running as root)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".warden-tmp")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode)
        if owner is not None and os.geteuid() == 0:
            os.fchown(fd, *owner)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)


@final
@dataclass(frozen=True, slots=True)
class ImportRecord:
    """One import's backup record."""

    directory: Path
    data: dict[str, Any]

    def save(self) -> None:
        payload = json.dumps(self.data, indent=1, sort_keys=True).encode()
        tmp = self.directory / "record.json.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        write_new_file(tmp, payload)
        os.replace(tmp, self.directory / "record.json")
        fsync_directory(self.directory)


def _imports_dir(state_dir: Path) -> Path:
    return ensure_private_dir(state_dir / "imports")


def _stat_of(path: Path) -> tuple[int, tuple[int, int] | None]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return 0o600, None
    return st.st_mode & 0o7777, (st.st_uid, st.st_gid)


def apply_plan(plan: ImportPlan, *, state_dir: Path, store: SecretStore,
               now: datetime.datetime | None = None) -> ImportRecord:
    """Carry ``plan`` out (see the module docstring) and return its backup record.

    Raises:
        StateError: the state directory or a file cannot be written; everything already changed is put back.
        ConfigError: a host file changed since the plan was made (nothing was written).
    """
    for f in plan.files:
        if _real(f.path).read_bytes() != f.raw:
            raise ConfigError(f"{f.path} changed while the import was being planned",
                              hint="run `warden import` again; nothing was written")
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    directory = _imports_dir(state_dir) / f"{stamp}-{_random.token_hex(4)}"
    directory.mkdir(mode=0o700)
    files: list[dict[str, Any]] = []
    for index, f in enumerate(plan.files):
        backup, written = f"host-{index}.orig", f"host-{index}.after"
        write_new_file(directory / backup, f.raw)
        write_new_file(directory / written, plan.host_after[f.path])
        mode, owner = _stat_of(_real(f.path))
        files.append({"path": str(f.path), "real_path": str(_real(f.path)), "backup": backup, "written": written,
                      "mode": mode, "owner": owner, "sha256_before": _sha(f.raw),
                      "sha256_after": _sha(plan.host_after[f.path]), "host": f.host})
    config_real = _real(plan.config_path)
    config: dict[str, Any] = {"path": str(plan.config_path), "real_path": str(config_real),
                              "existed": plan.config_before is not None,
                              "sha256_after": _sha(plan.config_after)}
    if plan.config_before is not None:
        write_new_file(directory / "config.orig", plan.config_before)
        config.update(backup="config.orig", sha256_before=_sha(plan.config_before))
    added = sorted({name for s in plan.tables for name in s.secrets if _current(store, name) is None})
    record = ImportRecord(directory, {"format": _FORMAT, "status": "started", "at": stamp, "files": files,
                                      "config": config, "secrets_added": added,
                                      "servers": [s.name for s in plan.tables]})
    record.save()
    done: list[str] = []
    try:
        for s in plan.tables:
            for name, value in s.secrets.items():
                store.set(name, value)
        done.append("secrets")
        config_real.parent.mkdir(parents=True, exist_ok=True)
        mode, owner = _stat_of(config_real)
        replace_foreign_file(config_real, plan.config_after, mode=mode if plan.config_before else 0o600,
                             owner=owner)
        done.append("config")
        for entry, f in zip(files, plan.files, strict=True):
            replace_foreign_file(Path(entry["real_path"]), plan.host_after[f.path], mode=entry["mode"],
                                 owner=tuple(entry["owner"]) if entry["owner"] else None)
            done.append(entry["path"])
    except OSError as exc:
        _roll_back(record, done, store)
        raise StateError(f"the import could not be written ({exc.strerror or exc}: {exc.filename}); everything it "
                         "had changed was put back", hint="check free space and permissions, then import again") \
            from exc
    record.data["status"] = "done"
    record.save()
    return record


def _current(store: SecretStore, name: str) -> str | None:
    try:
        return store.get(name)
    except ConfigError:
        return None


def _roll_back(record: ImportRecord, done: list[str], store: SecretStore) -> None:
    data = record.data
    for entry in data["files"]:
        if entry["path"] in done:
            raw = (record.directory / entry["backup"]).read_bytes()
            replace_foreign_file(Path(entry["real_path"]), raw, mode=entry["mode"],
                                 owner=tuple(entry["owner"]) if entry["owner"] else None)
    if "config" in done:
        _restore_config(record)
    for name in data["secrets_added"]:  # some may have been set before the failure
        store.remove(name)
    data["status"] = "rolled back"
    record.save()


def _restore_config(record: ImportRecord) -> None:
    config = record.data["config"]
    real = Path(config["real_path"])
    if config["existed"]:
        mode, owner = _stat_of(real)
        replace_foreign_file(real, (record.directory / config["backup"]).read_bytes(), mode=mode, owner=owner)
    else:
        with contextlib.suppress(FileNotFoundError):
            real.unlink()
        fsync_directory(real.parent)


def _records(state_dir: Path) -> Iterator[ImportRecord]:
    root = state_dir / "imports"
    if not root.is_dir():
        return
    for directory in sorted(root.iterdir(), reverse=True):
        try:
            data = json.loads((directory / "record.json").read_bytes())
        except (OSError, ValueError) as exc:
            raise StateError(f"import record {directory} is unreadable: {exc}",
                             hint=f"its backups are in {directory}; restore by hand") from exc
        if data.get("format") == _FORMAT:
            yield ImportRecord(directory, data)


@final
@dataclass(frozen=True, slots=True)
class FileUndo:
    """What undo does to one host file."""

    path: str
    data: bytes
    """The bytes it writes."""
    restored: tuple[str, ...] | None
    """The entries it puts back, by key path; None when the whole file is put back byte for byte (unchanged since
    the import)."""
    left: tuple[str, ...] = ()
    """Entries warden wrote that were changed or removed since, left as they are (key paths)."""
    removed: bool = False
    """The file was removed since the import: left removed (its entries no longer start anything)."""


@final
@dataclass(frozen=True, slots=True)
class UndoResult:
    record: ImportRecord
    files: tuple[FileUndo, ...]
    config_back: bool
    """Whether warden's config was put back too (it was not edited since)."""


def _entry_undo(record: ImportRecord, entry: dict[str, Any], current: bytes) -> FileUndo:
    """For a host file changed since the import (Claude Code rewrites ``~/.claude.json`` at every start): each
    entry warden rewrote that is still exactly what it wrote gets the user's original back; every other byte stays
    as it now is (a JSON-with-comments file edited in place, the others re-dumped, as the import did); an entry
    changed or removed since is left, and named. An entry the import removed (``--serve``) comes back, in place of
    the one entry that replaced it, when that entry is itself put back.

    Raises:
        ConfigError: the file is no longer one its host can read, or the import's record has no copy of what it
            wrote (an import by an older warden).
    """
    path, host = Path(entry["path"]), entry["host"]
    if "written" not in entry:
        raise ConfigError(f"{path} changed since warden imported it, and this import's record (by an older warden) "
                          "does not say which entries it wrote, so undo would lose those changes",
                          hint=f"its original is {record.directory / entry['backup']}; copy its entries back by hand; "
                               "nothing was restored")
    original = host_document((record.directory / entry["backup"]).read_bytes(), path, host).doc
    written = host_document((record.directory / entry["written"]).read_bytes(), path, host).doc
    now = host_document(current, path, host)
    before, after, maps = server_maps(host, original), server_maps(host, written), server_maps(host, now.doc)
    replacements: dict[tuple[str, ...], Any] = {}
    restored: list[str] = []
    left: list[str] = []
    for container in dict.fromkeys([*before, *after]):
        old, new, present = before.get(container, {}), after.get(container, {}), maps.get(container)
        changed = [k for k in dict.fromkeys([*old, *new]) if old.get(k, _MISSING) != new.get(k, _MISSING)]
        added = [k for k in changed if k in new]
        back = [k for k in added if present is not None and present.get(k, _MISSING) == new[k]]
        left.extend(".".join((*container, k)) for k in added if k not in back)
        removed = [k for k in changed if k not in new]
        returning = {k: old[k] for k in removed if present is not None and k not in present}
        if removed and (back != added or len(returning) != len(removed)):  # the entry replacing them changed, or
            left.extend(".".join((*container, k)) for k in [*back, *removed])  # a name is taken: all stay as now
            back, returning = [], {}
        for k in back:
            replacements[(*container, k)] = old.get(k, REMOVED)
        if returning and present is not None:
            first = next((k for k in back if k not in old), None)  # the serve entry that replaced them, if new
            rebuilt: dict[str, Any] = {}
            for k, value in present.items():
                if k == first:
                    rebuilt.update(returning)
                elif (*container, k) in replacements:
                    if replacements[(*container, k)] is not REMOVED:
                        rebuilt[k] = replacements[(*container, k)]
                else:
                    rebuilt[k] = value
            for k in back:
                del replacements[(*container, k)]
            replacements[container] = rebuilt if first is not None else {**rebuilt, **returning}
        restored.extend(".".join((*container, k)) for k in [*back, *returning] if k in old)
    if not replacements:
        return FileUndo(str(path), current, (), tuple(left))
    doc = replace_entries(now.doc, replacements)
    if host not in JSONC_HOSTS:
        return FileUndo(str(path), dump_host_document(now, doc), tuple(restored), tuple(left))
    try:
        return FileUndo(str(path), rewrite_jsonc_file(now, replacements, doc), tuple(restored), tuple(left))
    except ConfigError as exc:
        raise ConfigError(exc.headline, hint=f"its original is {record.directory / entry['backup']}; move the "
                                            f"comments out of the server entries of {path} and undo again; nothing "
                                            "was restored") from exc


_MISSING: Final = object()


def undo_last_import(state_dir: Path, store: SecretStore) -> UndoResult:
    """Put back what the newest import (not yet undone) changed: a host file unchanged since, byte for byte; one
    changed since, entry by entry (:func:`_entry_undo`); one removed since stays removed. All or nothing: every
    file is read and its new bytes made first, then each is replaced atomically, its bytes as they were saved in
    the record beside the backup; a failure puts back those already written.

    When warden's config was edited since (a server added, a policy line changed), or an entry was left (it still
    starts warden), the host files are still put back, but the config is left as it is, and so are the secrets the
    import added (a table there may still use them): the caller says which tables to remove. An edit is never
    lost.

    Raises:
        ConfigError: there is no import to undo, or a host file can no longer be read as its host's (nothing is
            restored).
        StateError: a file could not be written, or changed while undo ran (what was written is put back).
    """
    record = next((r for r in _records(state_dir) if r.data.get("status") == "done"), None)
    if record is None:
        raise ConfigError(f"there is no import to undo in {state_dir / 'imports'}",
                          hint="`warden import` records every import there; nothing was changed")
    data = record.data
    plans: list[tuple[dict[str, Any], bytes, FileUndo]] = []
    for index, entry in enumerate(data["files"]):
        current = _read(Path(entry["real_path"]))
        if current is None:  # the user's (or the host's) doing: made again, it would be a file they did not want
            plans.append((entry, b"", FileUndo(entry["path"], b"", (), removed=True)))
            continue
        if _sha(current) == entry["sha256_after"]:
            undo = FileUndo(entry["path"], (record.directory / entry["backup"]).read_bytes(), None)
        else:
            undo = _entry_undo(record, entry, current)
            write_new_file(record.directory / f"host-{index}.before-undo-{_random.token_hex(4)}", current)
        plans.append((entry, current, undo))
    config = data["config"]
    current_config = _read(Path(config["real_path"]))
    # an entry left as it is still starts `warden run --name NAME`: its table (and secrets) must stay
    config_back = current_config is not None and _sha(current_config) == config["sha256_after"] and \
        not any(undo.left for _, _, undo in plans)
    written: list[tuple[dict[str, Any], bytes]] = []
    try:
        for entry, current, undo in plans:
            if not undo.removed and undo.data != current:
                _replace_unchanged(entry, current, undo.data)
                written.append((entry, current))
    except OSError as exc:
        _put_back(written)
        raise StateError(f"undo could not write {exc.filename} ({exc.strerror or exc}); what it had written was put "
                         "back", hint="check free space and permissions, then run `warden import --undo` again") \
            from exc
    except StateError:
        _put_back(written)
        raise
    if config_back:
        _restore_config(record)
        for name in data["secrets_added"]:
            store.remove(name)
    data["status"] = "undone" if config_back else "undone, config kept"
    record.save()
    return UndoResult(record, tuple(undo for _, _, undo in plans), config_back)


def _replace_unchanged(entry: dict[str, Any], current: bytes, data: bytes) -> None:
    """Replace a host file with ``data`` if it still holds ``current`` (its host may rewrite it at any time)."""
    real = Path(entry["real_path"])
    if _read(real) != current:
        raise StateError(f"{entry['path']} changed while undo was running (its host rewrote it?); what undo had "
                         "written was put back", hint="run `warden import --undo` again")
    replace_foreign_file(real, data, mode=entry["mode"], owner=tuple(entry["owner"]) if entry["owner"] else None)


def _put_back(written: list[tuple[dict[str, Any], bytes]]) -> None:
    for entry, data in written:
        replace_foreign_file(Path(entry["real_path"]), data, mode=entry["mode"],
                             owner=tuple(entry["owner"]) if entry["owner"] else None)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
