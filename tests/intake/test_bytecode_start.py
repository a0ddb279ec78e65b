"""Python servers start from the bytecode compiled at intake (issue 10, why 10): inside the sandbox the store entry
is read-only, so a module without a valid ``.pyc`` would be compiled from source at every start (2.8-3.5 s for the
reference servers, against 0.65 s direct). Run with ``PYTHONVERBOSE=1``, the interpreter names where each module's
code object came from; every one must be a ``.pyc``, and none may be "could not create" (an attempted write)."""

from __future__ import annotations

import re
from pathlib import Path

import trio

from tests.intake.conftest import PypiIndex
from tests.intake.packages import wheel
from warden.intake import parse_runner, take_in
from warden.launcher import LaunchSpec
from warden.sandbox import SandboxSettings, make_launcher

_CODE_FROM = re.compile(r"^# code object from '?(?P<path>[^']+)'?$", re.MULTILINE)


async def test_a_sandboxed_start_compiles_nothing_the_intake_compiled(
        pypi_index: PypiIndex, state_dir: Path, host_env: dict[str, str]) -> None:
    name = pypi_index.unique("warden-fixture-pyc")
    filename, data = wheel(name, "1.0.0")
    pypi_index.add(name, filename, data)
    request = parse_runner(["uvx", name])
    assert request is not None
    await trio.to_thread.run_sync(lambda: take_in(request, state_dir=state_dir, env=host_env))
    launcher = make_launcher(SandboxSettings(), state_dir=state_dir, host_env=host_env)
    child = await launcher.launch(LaunchSpec(argv=("uvx", name), env={"PYTHONVERBOSE": "1"}, cwd="/"))
    err = b""
    out = b""
    async with trio.open_nursery() as nursery:
        async def drain() -> None:
            nonlocal err
            while chunk := await child.stderr.receive_some():
                err += chunk
        nursery.start_soon(drain)
        await child.stdin.send_all(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
                                   b'"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n')
        with trio.fail_after(60):
            while b"\n" not in out:
                chunk = await child.stdout.receive_some()
                assert chunk, err[-2000:]
                out += chunk
        await child.stdin.aclose()
        assert await child.wait() == 0
    text = err.decode("utf-8", "replace")
    sources = [m["path"] for m in _CODE_FROM.finditer(text)]
    module = name.replace("-", "_")
    assert any(f"/site-packages/{module}/__pycache__/__init__.cpython-" in path for path in sources), text[-3000:]
    assert [path for path in sources if not path.endswith(".pyc")] == []
    assert "could not create" not in text
