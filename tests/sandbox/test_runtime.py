"""Runtime detection: which host paths a server's runtime needs, for node, python (venv, uvx), npx and binaries."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import PEERS, VENV_BIN
from warden.errors import LaunchError
from warden.sandbox._data import data_dir
from warden.sandbox._profiles import load_profiles
from warden.sandbox._runtime import Runtime, _script_argument, detect_runtime

PROFILES = load_profiles(data_dir() / "profiles")
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}


def detect(argv: list[str], *, cwd: str = "/", env: dict[str, str] | None = None, setting: str = "auto") -> Runtime:
    return detect_runtime(argv, setting=setting, profiles=PROFILES, host_env=env or ENV, cwd=cwd)


@given(st.lists(st.sampled_from(["-u", "-m", "mod", "-c", "code", "-W", "x", "--", "s.py", "-X", "dev", "a"]),
                max_size=6))
def test_script_argument_points_at_a_non_option(args: list[str]) -> None:
    index = _script_argument(args)
    if index is not None:
        assert 0 <= index < len(args)
        assert not args[index].startswith("-") or args[index - 1] == "--"


def test_venv_entry_point_binds_the_venv_and_its_base_interpreter() -> None:
    runtime = detect([str(VENV_BIN / "mcp-server-time")])
    assert runtime.profile == "python"
    paths = {b.finder: b.path for b in runtime.binds}
    assert paths["venv"] == str(VENV_BIN.parent)
    assert paths["runtime_prefix"] == str(Path(sys.base_prefix).resolve())
    assert runtime.path_dirs == (str(VENV_BIN),)
    assert runtime.env == {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}


def test_system_binaries_need_nothing_beyond_usr() -> None:
    for argv in (["true"], ["/bin/sh", "-c", "exit 0"], ["/usr/bin/python3", "-c", "pass"]):
        runtime = detect(argv)
        assert runtime.binds == (), argv
        assert runtime.path_dirs == ()


def test_node_script_binds_the_outermost_node_modules() -> None:
    script = PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    runtime = detect(["node", str(script), "stdio"])
    assert runtime.profile == "node"
    assert [(b.finder, b.path) for b in runtime.binds] == [("node_modules", str(PEERS))]
    assert runtime.argv == (shutil.which("node"), str(script), "stdio")


def test_relative_script_is_made_absolute(tmp_path: Path) -> None:
    (tmp_path / "server.py").write_text("print(1)\n")
    (tmp_path / ".env").write_text("SECRET=1\n")
    runtime = detect(["/usr/bin/python3", "-u", "server.py", "--flag"], cwd=str(tmp_path))
    assert runtime.argv == ("/usr/bin/python3", "-u", str(tmp_path / "server.py"), "--flag")
    assert [(b.finder, b.path) for b in runtime.binds] == [("script", str(tmp_path / "server.py"))]


def test_node_script_outside_node_modules_gets_its_package_json(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text('{"type": "module"}')
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "server.js").write_text("console.log(1)\n")
    runtime = detect(["node", "src/server.js"], cwd=str(tmp_path))
    assert {(b.finder, b.path) for b in runtime.binds} == {("package_json", str(tmp_path / "package.json")),
                                                          ("script", str(tmp_path / "src" / "server.js"))}


def test_binary_outside_usr_is_bound_alone(tmp_path: Path) -> None:
    program = tmp_path / "bin" / "server"
    program.parent.mkdir()
    shutil.copy("/usr/bin/true", program)
    runtime = detect([str(program)])
    assert runtime.profile == "binary"
    assert [(b.finder, b.path) for b in runtime.binds] == [("executable", str(program))]


def test_runner_commands_resolve_only_through_warden_s_store(tmp_path: Path) -> None:
    """npx / uvx no longer look in the working directory's node_modules, the npx cache or uv's tool dir: only a
    package warden took into its store runs (tests/intake)."""
    tool = tmp_path / "data" / "uv" / "tools" / "mcp-server-time" / "bin"
    tool.mkdir(parents=True)
    (tool / "mcp-server-time").write_text("#!/bin/sh\n")
    (tool / "mcp-server-time").chmod(0o755)
    env = {**ENV, "XDG_DATA_HOME": str(tmp_path / "data")}
    for argv in (["npx", "-y", "@modelcontextprotocol/server-everything", "stdio"], ["uvx", "mcp-server-time"]):
        with pytest.raises(LaunchError, match="has not been taken into warden's package store yet"):
            detect_runtime(argv, setting="auto", profiles=PROFILES, host_env=env, cwd=str(PEERS.parent),
                           state_dir=tmp_path / "state")
    with pytest.raises(LaunchError, match="commands run from warden's package store, and this launcher has none"):
        detect(["npx", "-y", "pkg"])


def test_profile_setting_overrides_detection() -> None:
    assert detect(["/usr/bin/true"], setting="python").profile == "python"
