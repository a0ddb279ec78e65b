"""Runtime detection: which host paths a server's runtime needs, for node, python (venv, uvx), npx and binaries."""

from __future__ import annotations

import os
import shutil
import subprocess
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


def test_npx_resolves_to_the_installed_package() -> None:
    runtime = detect(["npx", "-y", "@modelcontextprotocol/server-everything@latest", "stdio"], cwd=str(PEERS.parent))
    assert runtime.argv[1] == str(PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js")
    assert runtime.argv[2:] == ("stdio",)


def test_npx_with_a_version_that_is_not_installed_is_refused() -> None:
    with pytest.raises(LaunchError, match="is not installed"):
        detect(["npx", "-y", "@modelcontextprotocol/server-everything@0.0.1"], cwd=str(PEERS.parent))


def test_uvx_resolves_to_the_installed_tool(tmp_path: Path) -> None:
    tool = tmp_path / "data" / "uv" / "tools" / "mcp-server-time"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(tool)], check=True)
    entry = tool / "bin" / "mcp-server-time"
    entry.write_text(f"#!{tool}/bin/python\nprint('time')\n")
    entry.chmod(0o755)
    env = {**ENV, "XDG_DATA_HOME": str(tmp_path / "data")}
    runtime = detect(["uvx", "mcp-server-time", "--local-timezone", "UTC"], env=env)
    assert runtime.argv == (str(entry), "--local-timezone", "UTC")
    assert runtime.profile == "python"
    assert ("venv", str(tool)) in {(b.finder, b.path) for b in runtime.binds}
    with pytest.raises(LaunchError, match="uv tool 'mcp-server-fetch' is not installed") as info:
        detect(["uvx", "mcp-server-fetch"], env=env)
    assert info.value.hint == "install it first: `uv tool install mcp-server-fetch`"


def test_profile_setting_overrides_detection() -> None:
    assert detect(["/usr/bin/true"], setting="python").profile == "python"
