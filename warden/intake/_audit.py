"""Every intake and update is an audit record: package, version, the registry's integrity, digests, who approved."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from warden import audit
from warden.intake._store import InstalledPackage


def approver() -> str:
    """Who ran the command that approved the fetch: the user name and uid warden runs as."""
    uid = os.getuid()
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def package_record(record: InstalledPackage, *, server_name: str | None, consent: audit.Consent,
                   previous: InstalledPackage | None = None) -> audit.Record:
    """The ``package.intake`` (or, with ``previous``, ``package.updated``) record of a committed store entry."""
    return audit.Record(
        event=audit.Event.PACKAGE_UPDATED if previous is not None else audit.Event.PACKAGE_INTAKE,
        server_name=server_name, target=f"{record.ecosystem}:{record.name}@{record.version}",
        target_digest=record.tree_digest, previous_digest=None if previous is None else previous.tree_digest,
        consent=consent,
        package=audit.Package(ecosystem=record.ecosystem, name=record.name, version=record.version,
                              requested=record.requested, integrity=record.integrity,
                              lock_digest=record.lock_digest, tree_digest=record.tree_digest,
                              install_scripts=tuple(record.install_scripts),
                              previous_version=None if previous is None else previous.version,
                              approved_by=approver()))


async def append_package_record(state_dir: Path, record: audit.Record) -> None:
    """Append ``record`` to the state directory's audit log (opened for this one record)."""
    async with audit.open_audit_log(state_dir) as log:
        await log.append(record)
