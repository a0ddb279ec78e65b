"""A server that can write its project directory must not be able to steer its *next* launch (B.8 #32 and the
runtime-detection variant of it): symlinks planted where the policy names a path, a rewritten pyvenv.cfg or
package.json "bin" that would make warden bind some other host directory. Each is refused, with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.security.harness import IS_ROOT, run_in_process
from tests.support import sandbox_writable
from warden.errors import LaunchError
from warden.launcher import LaunchSpec
from warden.sandbox import SandboxSettings, make_launcher

pytestmark = pytest.mark.skipif(not IS_ROOT, reason="the workspace is made writable for the root warden's "
                                                    "sandbox group (chgrp needs root)")


@pytest.fixture
def host_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="warden-persist-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def project(host_dir: Path) -> Path:
    proj = sandbox_writable(host_dir / "proj")
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(proj / ".venv")], check=True)
    for root, dirs, _files in os.walk(proj):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o2775)
            os.chown(os.path.join(root, name), -1, os.stat(proj).st_gid)
    secret = host_dir / "secret-prefix"
    (secret / "bin").mkdir(parents=True)
    (secret / "lib").mkdir()
    (secret / "lib" / "credentials").write_text("TOP-SECRET")
    return proj


async def test_rewritten_pyvenv_cfg_cannot_expose_another_directory(project: Path, host_dir: Path,
                                                                    state_dir: Path) -> None:
    settings = SandboxSettings(write_dirs=(str(project),))
    python = str(project / ".venv" / "bin" / "python")
    first = await run_in_process(settings, [python, "-c", "print('clean run')"], state_dir=state_dir)
    assert first.error is None, first
    assert first.stdout.strip() == "clean run", first
    # The server, inside its sandbox, rewrites its own pyvenv.cfg to point at a directory it wants to read.
    evil = (f"home = {host_dir / 'secret-prefix' / 'bin'}\\ninclude-system-site-packages = false\\n")
    cfg = project / ".venv" / "pyvenv.cfg"
    code = f"import os; os.remove('{cfg}'); open('{cfg}', 'w').write('{evil}')"  # the dir is the server's to write
    attack = await run_in_process(settings, [python, "-c", code], state_dir=state_dir)
    assert attack.rc == 0, attack
    assert "secret-prefix" in (project / ".venv" / "pyvenv.cfg").read_text()
    launcher = make_launcher(settings, state_dir=state_dir)
    with pytest.raises(LaunchError, match=f"{project / '.venv' / 'pyvenv.cfg'} says home = "
                                          f"{host_dir / 'secret-prefix' / 'bin'}, and {host_dir / 'secret-prefix'} "
                                          "is no Python installation"):
        await launcher.launch(LaunchSpec(argv=(python, "-c", "pass")))


async def test_a_pyvenv_cfg_the_server_cannot_write_still_names_only_a_python_installation(
        project: Path, host_dir: Path, state_dir: Path) -> None:
    """The same pyvenv.cfg, in a project the server may only read (a cloned repository's .venv, started as
    ``.venv/bin/python server.py``): the taint rule does not apply, and warden bound whatever directory ``home``
    named (/var, or ~/.local through home = /proc/self/cwd/../.local/bin) into the sandbox. ``home`` must now lead
    to a Python installation."""
    cfg = project / ".venv" / "pyvenv.cfg"
    cfg.write_text(f"home = {host_dir / 'secret-prefix' / 'bin'}\ninclude-system-site-packages = false\n")
    python = str(project / ".venv" / "bin" / "python")
    launcher = make_launcher(SandboxSettings(read_dirs=(str(project),)), state_dir=state_dir)
    with pytest.raises(LaunchError, match=f"{host_dir / 'secret-prefix'} is no Python installation"):
        await launcher.launch(LaunchSpec(argv=(python, "-c", "pass")))
    cfg.write_text("home = /var/bin\ninclude-system-site-packages = false\n")
    with pytest.raises(LaunchError, match="/var is no Python installation"):
        launcher.manifest(LaunchSpec(argv=(python, "-c", "pass")))


async def test_symlink_planted_at_a_policy_path_is_refused(project: Path, host_dir: Path, state_dir: Path) -> None:
    (host_dir / "elsewhere").mkdir()
    (host_dir / "elsewhere" / "id_rsa").write_text("PRIVATE")
    plant = await run_in_process(SandboxSettings(write_dirs=(str(project),)),
                                 ["/bin/sh", "-c", f"ln -s {host_dir / 'elsewhere'} {project / 'config'}"],
                                 state_dir=state_dir)
    assert plant.rc == 0, plant
    assert (project / "config").is_symlink()
    settings = SandboxSettings(write_dirs=(str(project),), read_dirs=(str(project / "config"),))
    launcher = make_launcher(settings, state_dir=state_dir)
    with pytest.raises(LaunchError, match=f"read_dirs entry {project / 'config'} lies inside the writable"):
        await launcher.launch(LaunchSpec(argv=("/usr/bin/true",)))
    assert sorted(p.name for p in (host_dir / "elsewhere").iterdir()) == ["id_rsa"]  # nothing created there


async def test_a_package_planted_in_the_working_directory_is_never_what_npx_runs(host_dir: Path,
                                                                                 state_dir: Path) -> None:
    """npx resolves only through warden's package store, never the cwd's node_modules (which a server with a
    write dir there could plant); the intake's own bin check is in tests/intake/test_spec.py."""
    package = host_dir / "app" / "node_modules" / "evil-server"
    package.mkdir(parents=True)
    (host_dir / "outside.js").write_text("console.log('outside')\n")
    (package / "package.json").write_text(json.dumps({"name": "evil-server", "version": "1.0.0",
                                                     "bin": "../../../outside.js"}))
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir)
    with pytest.raises(LaunchError, match="npx package 'evil-server@latest' has not been taken into warden's"):
        await launcher.launch(LaunchSpec(argv=("npx", "-y", "evil-server"), cwd=str(host_dir / "app")))
    await trio.lowlevel.checkpoint()
