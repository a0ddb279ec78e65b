"""The store's carved exception to invariant 5: a sandbox sees its one package entry, read-only, and nothing else of
warden's state directory (pins, keys, audit log, records, index, caches, other packages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.intake.conftest import PypiIndex
from tests.intake.packages import wheel
from tests.security.harness import run_in_process
from warden.errors import LaunchError
from warden.intake import Store, parse_runner, take_in
from warden.launcher import LaunchSpec
from warden.sandbox import SandboxSettings, make_launcher
from warden.sandbox._plan import _store_entry

PROBE = """
import json, os, sys
state, entry, other = sys.argv[1:4]
seen = {}
for path in [state, os.path.join(state, "pins.json"), os.path.join(state, "audit"), os.path.join(state, "keys"),
             os.path.join(state, "store"), os.path.join(state, "store", "index.json"),
             os.path.join(state, "store", "records"), os.path.join(state, "cache"), other]:
    try:
        seen[path] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read()
    except OSError as exc:
        seen[path] = exc.errno
try:
    open(os.path.join(entry, "planted"), "w")
    seen["write"] = "written"
except OSError as exc:
    seen["write"] = exc.errno
print(json.dumps(seen))
"""


async def test_a_sandbox_sees_its_entry_read_only_and_nothing_else_of_the_state_dir(
        pypi_index: PypiIndex, state_dir: Path, host_env: dict[str, str]) -> None:
    names = [pypi_index.unique("warden-fixture-py") for _ in range(2)]
    for name in names:
        pypi_index.add(name, *wheel(name, "1.0.0"))
    records = []
    for name in names:
        request = parse_runner(["uvx", name])
        assert request is not None
        records.append(take_in(request, state_dir=state_dir, env=host_env).record)
    store = Store(state_dir)
    entry, other = (store.entry_path(r) for r in records)
    # Bait: what an attacker would look for in the state directory.
    (state_dir / "pins.json").write_text("PINS")
    (state_dir / "audit").mkdir(exist_ok=True)
    (state_dir / "audit" / "entries.log").write_text("AUDIT")
    (state_dir / "keys").mkdir(exist_ok=True)
    (state_dir / "keys" / "signing.key").write_text("KEY")
    outcome = await run_in_process(SandboxSettings(), [str(entry / "bin" / "python"), "-I", "-c", PROBE,
                                                       str(state_dir), str(entry), str(other)], state_dir=state_dir)
    assert outcome.rc == 0, outcome
    seen = json.loads(outcome.stdout)
    assert seen.pop("write") == 30  # EROFS: the entry is read-only
    # The state directory is an empty mount-point parent; nothing in it exists inside the sandbox.
    assert seen.pop(str(state_dir)) == ["store"]
    assert seen.pop(str(state_dir / "store")) == ["pypi"]
    assert set(seen.values()) == {2}, seen  # ENOENT for pins, audit, keys, index, records, cache, the other entry


def test_only_store_entries_are_carved_out() -> None:
    root = "/state/store/"
    assert _store_entry("/state/store/npm/pkg-1.0.0-ab12/node_modules", root)
    assert _store_entry("/state/store/pypi/pkg-1.0.0-ab12", root)
    for path in ("/state/store", "/state/store/npm", "/state/store/index.json", "/state/store/records/x.json",
                 "/state/store/cache/npm", "/state/store/npm/.staging", "/state/pins.json", "/state/storex/npm/a"):
        assert not _store_entry(path, root), path


async def test_the_store_cannot_be_granted_as_a_read_or_write_dir(state_dir: Path) -> None:
    store = state_dir / "store" / "pypi" / "x-1.0.0-00000000"
    store.mkdir(parents=True)
    for settings in (SandboxSettings(read_dirs=(str(store),)), SandboxSettings(write_dirs=(str(store),))):
        launcher = make_launcher(settings, state_dir=state_dir)
        with pytest.raises(LaunchError, match="would expose warden's state directory"):
            await launcher.launch(LaunchSpec(argv=("/usr/bin/true",)))
