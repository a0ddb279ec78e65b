"""Issue 10's secret acceptance bullet: a canary set through ``warden secrets`` and referred to as
``${secret:NAME}`` reaches the sandboxed server's environment and appears in no argv, log line, audit record,
pins file, status output or host message (DESIGN invariant 10).

The server proves it received the value by answering its SHA-256 (it never sends the value). A second test has
the server send the value back and print it on stderr: then warden's redaction must cut it from the host message
and from warden's log.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import trio

import warden.secrets
from tests.support import FIXTURES, PYTHON, WARDEN, RawHost

CANARY = "canary-Secret-7f3a9c1e5b"
SECRET = "envy.CANARY_TOKEN"


def warden_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WARDEN, *args], capture_output=True, text=True, input=stdin, timeout=60, check=False)


@pytest.fixture
def canary_config(isolated_env: Path) -> Path:
    r = warden_cli("secrets", "set", SECRET, stdin=CANARY + "\n")
    assert r.returncode == 0, r.stderr
    assert CANARY not in r.stdout + r.stderr
    config = Path(os.environ["WARDEN_CONFIG"])
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"""
[servers.envy]
command = "{PYTHON}"
args = ["{FIXTURES / 'env_server.py'}"]
env = {{ CANARY_TOKEN = "${{secret:{SECRET}}}" }}
on_new = "tofu"
""")
    return config


def argv_of_every_process() -> list[bytes]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                out.append(Path(f"/proc/{entry}/cmdline").read_bytes())
            except OSError:
                continue
    return out


async def run_envy(tool: str) -> tuple[dict[str, object], list[bytes], bytes, bytes]:
    """Start ``warden run --name envy`` as a host would, call ``tool`` for CANARY_TOKEN; return the answer, every
    process's argv seen while the server ran, everything warden wrote to the host and to its stderr."""
    host = await RawHost.start([WARDEN, "run", "--name", "envy"], stderr=subprocess.PIPE)
    assert host.process.stderr is not None
    stderr = bytearray()

    async def drain() -> None:
        assert host.process.stderr is not None
        while chunk := await host.process.stderr.receive_some(65536):
            stderr.extend(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        await host.initialize()
        await host.request(1, "tools/list")
        listed = await host.response(1, timeout=60)
        assert [t["name"] for t in listed["result"]["tools"]] == ["env_digest", "env_echo"], listed  # type: ignore
        answer = await host.call(2, tool, {"name": "CANARY_TOKEN"}, timeout=60)
        argvs = argv_of_every_process()
        await host._stdin.aclose()  # the host leaves: warden stops the server and exits
        with trio.fail_after(60):
            await host.process.wait()
    wire = b"".join(repr(m).encode() for m in host.seen) + host._buffer
    return answer, argvs, wire, bytes(stderr)


def assert_nowhere_but_the_store(state_dir: Path, *outputs: str | bytes) -> None:
    needle = CANARY.encode()
    for output in outputs:
        assert needle not in (output if isinstance(output, bytes) else output.encode())
    checked = 0
    for path in state_dir.rglob("*"):
        if path.is_file() and path.name not in ("secrets.json",):
            assert needle not in path.read_bytes(), path
            checked += 1
    assert (state_dir / "pins.json").is_file()
    assert any(state_dir.rglob("entries*")), "the audit log was written and checked"
    assert checked > 3


async def test_canary_reaches_the_server_env_and_nothing_else(canary_config: Path, isolated_env: Path) -> None:
    answer, argvs, wire, stderr = await run_envy("env_digest")
    assert answer["result"]["content"][0]["text"] == hashlib.sha256(CANARY.encode()).hexdigest()  # type: ignore
    assert not any(CANARY.encode() in argv for argv in argvs), "no process has the value in its argv"
    status = [warden_cli("pins", "list"), warden_cli("secrets", "list"),
              warden_cli("policy", "explain", "--server", "envy"), warden_cli("audit", "verify")]
    for r in status:
        assert r.returncode == 0, r.stderr
    assert SECRET in status[1].stdout
    assert "${secret:envy.CANARY_TOKEN}" in status[2].stdout
    assert_nowhere_but_the_store(isolated_env, wire, stderr, *(r.stdout + r.stderr for r in status))


@pytest.mark.skipif(not hasattr(warden.secrets, "hand_to_server"),
                    reason="host-channel and log redaction land with branch `output` (warden.secrets.hand_to_server)")
async def test_canary_sent_back_by_the_server_is_redacted(canary_config: Path, isolated_env: Path) -> None:
    answer, _, wire, stderr = await run_envy("env_echo")
    # the result-side content rule (issue 17) cuts registry values first and names its rule
    assert answer["result"]["content"][0]["text"] == "[REDACTED:secrets_registry]"  # type: ignore[index]
    assert b"env_echo: [REDACTED]" in stderr, "the server's stderr line reaches warden's log redacted"
    assert_nowhere_but_the_store(isolated_env, wire, stderr)


async def test_a_variable_the_host_meant_for_the_server_is_named_not_passed(isolated_env: Path) -> None:
    """The host gives ``GITHUB_PERSONAL_ACCESS_TOKEN`` to ``warden run`` (as a host file's ``env`` does), the
    policy does not pass it: warden warns with the variable's name and the line to add, never the value, and the
    server does not get it."""
    # a CI machine may have GITHUB_* variables of its own; they would be named too, rightly
    env = {**{k: v for k, v in os.environ.items() if "GITHUB" not in k.upper()}, "GITHUB_PERSONAL_ACCESS_TOKEN": CANARY}
    host = await RawHost.start([WARDEN, "run", "--name", "github", "--", PYTHON, str(FIXTURES / "env_server.py")],
                               stderr=subprocess.PIPE, env=env)
    assert host.process.stderr is not None
    await host.initialize()
    await host._stdin.aclose()
    stderr = bytearray()
    with trio.fail_after(60):
        while chunk := await host.process.stderr.receive_some(65536):
            stderr.extend(chunk)
        await host.process.wait()
    text = stderr.decode()
    assert "github: GITHUB_PERSONAL_ACCESS_TOKEN is set in warden's environment" in text
    assert f'under [servers.github] in {os.environ["WARDEN_CONFIG"]}: env = ["GITHUB_PERSONAL_ACCESS_TOKEN"]' in text
    assert CANARY not in text
