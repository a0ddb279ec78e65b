"""The server's environment never reaches warden's exec shims (B.8 row 43).

Inside the sandbox warden runs ``prlimit``, then (a root warden) ``setpriv``, which still runs as uid 0 with
CAP_SETUID, CAP_SETGID and CAP_SETPCAP, then the Landlock shim, and only then the server. None of them is
setuid, so the dynamic loader honours ``LD_PRELOAD``, ``LD_AUDIT`` & co. in all of them: a config's
``LD_PRELOAD`` ran code of its choosing in ``prlimit``, as root, before the uid drop, the rlimits and Landlock
(it could read root's 0600 files, open ``/proc/sys/kernel/core_pattern`` for writing, and exec the server
without any limit). The server's variables now travel under a private prefix and the last shim puts them back.

The probe is the loader itself: ``LD_DEBUG=files`` with ``LD_DEBUG_OUTPUT`` makes every process that sees the
two variables write ``<path>.<pid>`` naming the program, so the files left in the write dir say exactly which
programs saw the server's environment, and as which uid.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.security.harness import IS_ROOT, World, make_world, run_as_user, run_in_process

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="drives a root warden and an unprivileged one (setpriv)")


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with make_world() as built:
        yield built


def _loader_logs(directory: Path) -> dict[str, int]:
    """Each ``ld.<pid>`` file the loader wrote: the programs it names -> the uid that wrote it."""
    out: dict[str, int] = {}
    for path in directory.glob("ld.*"):
        text = path.read_text(errors="replace")
        for program in ("/usr/bin/prlimit", "/usr/bin/setpriv", "/usr/bin/python3", "/usr/bin/true"):
            if f"needed by {program}" in text or f"calling init: {program}" in text:
                out[program] = path.stat().st_uid
        path.unlink()
    return out


@pytest.mark.parametrize("landlock", ["off", "require"])
@pytest.mark.parametrize("parent", ["root", "user"])
def test_B08_43_loader_variables_reach_the_server_and_no_shim(world: World, parent: str, landlock: str) -> None:
    workspace = world.workspaces[parent]
    settings = world.settings(parent, landlock=landlock)
    env = {"LD_DEBUG": "files", "LD_DEBUG_OUTPUT": str(workspace / "ld"), "PROBE_ALLOWED": "yes"}
    argv = ["/usr/bin/true"]
    if parent == "root":
        outcome = trio.run(lambda: run_in_process(settings, argv, state_dir=world.states["root"], env=env))
    else:
        outcome = run_as_user(settings, argv, state_dir=world.states["user"], env=env)
    assert outcome.error is None, outcome
    assert outcome.rc == 0, outcome
    seen = _loader_logs(workspace)
    assert "/usr/bin/prlimit" not in seen
    assert "/usr/bin/setpriv" not in seen
    assert "/usr/bin/python3" not in seen  # the Landlock shim
    assert "/usr/bin/true" in seen, f"the server lost its LD_* variables: {seen}"
    assert seen["/usr/bin/true"] != 0
    assert os.stat(workspace).st_uid == seen["/usr/bin/true"] or parent == "root"
