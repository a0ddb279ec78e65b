"""What a stdio ``warden run`` loads: a host starts one warden per server, so every module it imports for nothing
is paid at every start. The HTTP face (hypercorn), HTTP upstreams and OAuth (httpx, authlib), output-schema checks
(jsonschema) and the OS keyring are loaded only by the runs that use them. Measured with ``-X importtime`` on a
real run (the host's initialize, a tool call, the end), not by importing modules in the test's own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import RAWSERVER, RawHost
from warden.protocol.messages import CONNECTION_CLOSED, REQUEST_TIMEOUT

NOT_FOR_A_STDIO_RUN = ("httpx", "hypercorn", "h11", "h2", "wsproto", "authlib", "joserfc", "jsonschema", "keyring",
                       "rich", "click", "warden.auth", "warden.gateway.http", "warden.transport.http_client")


def _imported(stderr: bytes) -> set[str]:
    names = set()
    for line in stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


async def test_a_stdio_run_loads_no_http_oauth_schema_or_keyring_code(tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    with err.open("wb") as sink:
        host = await RawHost.start([sys.executable, "-X", "importtime", "-m", "warden", "run", "--", *RAWSERVER],
                                   stderr=sink)
        await host.initialize()
        answer = await host.call(1, "echo", {"text": "hi"})
        assert answer["result"]["content"][0]["text"] == "hi"  # type: ignore[index]
        assert await host.close() == 0
    imported = _imported(err.read_bytes())
    assert "warden.gateway.core" in imported  # the measurement saw warden start
    loaded = sorted(name for name in imported
                    if any(name == top or name.startswith(top + ".") for top in NOT_FOR_A_STDIO_RUN))
    assert loaded == []


async def test_a_server_that_ends_at_every_start_answers_the_host_s_initialize_with_why() -> None:
    """A server that exits at once is restarted for ever by `warden run` (it has no restart limit), and the
    host's initialize waited as long, told nothing (the host's own timeout then says only that the server did not
    answer; seen with a pyenv shim and a `docker run` entry). Then it was answered after --request-timeout (50 s by
    default: a new user's trial waited that long for a server that could not start); now after three starts."""
    crash = "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"
    host = await RawHost.start([sys.executable, "-m", "warden", "run", "--name", "crash", "--", sys.executable, "-c",
                                crash], stderr=subprocess.DEVNULL)
    await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "rawhost", "version": "1"}})
    answer = await host.response(0, timeout=40)  # a generous hang bound below the request timeout (50 s)
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["code"] == CONNECTION_CLOSED
    assert error["message"].startswith("the server 'crash' ended 3 times in a row as it started (its last process: "
                                       "the server exited with status 3; last stderr: boom")  # the tail spans starts
    assert error["message"].endswith("); warden goes on starting it")
    assert error["data"] == {"hint": "fix what the server's stderr (in warden's log) says; the host's next try then "
                                     "finds it"}
    await host.close()


async def test_a_server_that_ended_once_and_then_hangs_is_answered_after_the_request_timeout(tmp_path: Path) -> None:
    """One failed start is not enough to answer with it (bad luck happens); a next process that never finishes its
    handshake is then waited for until the request timeout, and the host told why the last one ended."""
    marker = tmp_path / "started-once"  # the suite's config lets the server write tmp_path
    script = ("import os, sys, time\n"
              f"if not os.path.exists({str(marker)!r}):\n"
              f"    open({str(marker)!r}, 'w').close(); sys.stderr.write('first\\n'); sys.exit(3)\n"
              "time.sleep(600)\n")
    host = await RawHost.start([sys.executable, "-m", "warden", "run", "--request-timeout", "3", "--name", "hang",
                                "--", sys.executable, "-c", script], stderr=subprocess.DEVNULL)
    await host.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "rawhost", "version": "1"}})
    answer = await host.response(0, timeout=120)
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["code"] == REQUEST_TIMEOUT, error
    assert error["message"] == ("the server 'hang' did not start within 3 s (its last process: the server exited "
                                "with status 3; last stderr: first)")
    await host.close()
