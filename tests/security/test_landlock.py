"""The optional Landlock layer (B.5, B.7): with ``landlock = "require"`` the server also runs under a Landlock
domain - file access only beneath what is mounted for it (every ABI), no TCP bind/connect (ABI >= 4), no signals
or abstract sockets outside the sandbox (ABI >= 6); on an older kernel the shim asks only for what it supports,
and the test expects exactly that. Compared against the same probe with the layer off, so each difference is shown
to come from Landlock. Where the kernel lacks Landlock, the launch must be refused (tests/sandbox/test_fail_closed).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.harness import IS_ROOT, World, make_world, run_probe
from warden.sandbox._host import landlock_abi

ABI = landlock_abi()
pytestmark = [
    pytest.mark.skipif(not IS_ROOT, reason="drives a root warden and an unprivileged one (setpriv): needs root"),
    pytest.mark.skipif(ABI < 1, reason="this kernel has no Landlock: 'require' is refused instead "
                                       "(tests/sandbox/test_fail_closed.py)"),
]


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with make_world() as built:
        yield built


@pytest.mark.parametrize("parent", ["root", "user"])
def test_landlock_layer_adds_what_the_mount_namespace_does_not(world: World, parent: str) -> None:
    off = run_probe(world, parent, "landlock", landlock="off").result()
    on = run_probe(world, parent, "landlock", landlock="require").result()
    assert off["bind_tcp"] == {"ok": None}
    assert on["bind_tcp"] == ({"errno": "EACCES"} if ABI >= 4 else off["bind_tcp"])  # TCP rules: ABI 4
    assert off["list_root"] == {"ok": ["bin"]}
    assert on["list_root"] == {"errno": "EACCES"}  # file rules: every ABI
    assert off["signal_init"] == ({"errno": "EPERM"} if parent == "root" else {"ok": None})
    assert on["signal_init"] == ({"errno": "EPERM"} if ABI >= 6 else off["signal_init"])  # scopes: ABI 6
    for result in (off, on):  # and the server still works
        assert result["read_etc"] == {"ok": True}
        assert result["write_workspace"] == {"ok": 2}
        assert result["write_tmp"] == {"ok": 2}
        assert result["exec_usr"] == {"ok": 0}
