"""``warden run --read DIR --write DIR`` (issue 10, build item 4): the directories reach the sandbox with exactly
that access, through the real ``warden run`` and the real server-filesystem; a root warden runs the server as the
write dir's owner, so the file it writes belongs to that owner with no chgrp; the org's ceilings bind the flags."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import IS_ROOT
from tests.security.harness import UNPRIV_UID
from tests.support import RawHost, filesystem_server, through_warden
from warden.cli.run import with_dirs
from warden.errors import ConfigError
from warden.policy import EffectivePolicy

OWNER = UNPRIV_UID if IS_ROOT else os.getuid()


@pytest.fixture
def dirs() -> Iterator[tuple[Path, Path]]:
    base = Path(tempfile.mkdtemp(prefix="warden-run-dirs-", dir="/var/tmp"))
    base.chmod(0o755)
    project, reference = base / "project", base / "reference"
    project.mkdir()
    reference.mkdir()
    (reference / "notes.txt").write_text("read me\n")
    reference.chmod(0o755)
    (reference / "notes.txt").chmod(0o644)
    if IS_ROOT:
        os.chown(project, OWNER, OWNER)  # a user's project: nothing else is done to it
    try:
        yield project, reference
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _config(tmp_path: Path, extra: str = "") -> None:
    path = Path(os.environ["WARDEN_CONFIG"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[defaults]\non_new = "tofu"\n{extra}')


def _text(answer: dict[str, object]) -> str:
    result = answer.get("result")
    assert isinstance(result, dict), answer
    return "\n".join(item.get("text", "") for item in result.get("content", []) if isinstance(item, dict))


async def test_read_and_write_flags_grant_exactly_that(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    project, reference = dirs
    _config(tmp_path)
    host = await RawHost.start(through_warden([*filesystem_server(project), str(reference)], "--name", "fs",
                                              "--write", str(project), "--read", str(reference)),
                               stderr=subprocess.PIPE, env=dict(os.environ))
    await host.initialize()
    await host.request("list", "tools/list")
    await host.response("list", timeout=60)
    wrote = await host.call(1, "write_file", {"path": str(project / "made.txt"), "content": "ok"})
    read = await host.call(2, "read_text_file", {"path": str(reference / "notes.txt")})
    refused = await host.call(3, "write_file", {"path": str(reference / "no.txt"), "content": "no"})
    assert await host.close() == 0
    assert not wrote["result"].get("isError")  # type: ignore[union-attr]
    made = project / "made.txt"
    assert made.read_text() == "ok"
    assert (made.stat().st_uid, made.stat().st_gid) == (OWNER, OWNER if IS_ROOT else os.getgid())
    assert _text(read) == "read me\n"
    assert "read-only file system" in _text(refused).lower()
    assert not (reference / "no.txt").exists()


async def test_policy_explain_and_the_org_ceiling_bind_the_flags(tmp_path: Path, dirs: tuple[Path, Path]) -> None:
    project, _ = dirs
    org = tmp_path / "org.toml"
    org.write_text(f'[org]\nwrite_dirs = ["{tmp_path}"]\n')
    _config(tmp_path)
    env = {**os.environ, "WARDEN_ORG_POLICY": str(org)}
    host = await RawHost.start(through_warden(["/bin/true"], "--name", "ceiling", "--write", str(project)),
                               stderr=subprocess.PIPE, env=env)
    await host.initialize()
    await host.request("list", "tools/list")
    answer = await host.response("list", timeout=60)
    assert await host.close() == 0
    assert host.process.stderr is not None
    stderr = (await host.process.stderr.receive_some(1 << 20)).decode()
    assert f"launch refused: sandbox write dir '{project}' lies outside the org's write_dirs" in stderr, stderr
    assert answer["error"]["message"].startswith("launch refused: sandbox write dir")  # type: ignore[index]


def test_flags_add_to_the_config_resolved_from_the_working_directory(tmp_path: Path, dirs: tuple[Path, Path],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    project, reference = dirs
    server = EffectivePolicy(None, None).server("x", ["/bin/true"])
    monkeypatch.chdir(project.parent)
    widened = with_dirs(server, ["reference", str(reference)], ["project"])
    assert widened.sandbox.value.read_dirs == (str(reference),)
    assert widened.sandbox.value.write_dirs == (str(project),)
    assert widened.sandbox.source.key == "--read/--write"
    assert widened.digest != server.digest  # the policy in force names them
    assert with_dirs(server, [], []) is server
    with pytest.raises(ConfigError) as info:
        with_dirs(server, ["/a\nb"], [])
    assert info.value.message == "--read / --write: Value error, '/a\\nb' contains a NUL or newline"
