"""``warden serve`` refuses a config it cannot serve safely before anything starts: a server named twice, a name
holding the namespace separator (or ending in part of it), a separator outside the name rules, no servers, an
unknown ``--server``. Each exits 2 with the file (and line where there is one), and no server was launched:
nothing started half-way. ``warden status`` still shows what runs when the config is broken."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from tests.support import FIXTURES, PYTHON, RAWSERVER, WARDEN, RawHost, audit_records


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WARDEN, "serve", *args], input="", capture_output=True, text=True, timeout=60)


def table(name: str) -> str:
    return f"\n[servers.{name}]\ncommand = {json.dumps(PYTHON)}\nargs = {json.dumps(RAWSERVER[1:])}\n"


@pytest.mark.parametrize(("tables", "args", "says"), [
    (table("a") + table("a"), (), "Cannot declare ('servers', 'a') twice"),
    (table("a__b"), (), "server name 'a__b' holds the namespace separator '__'"),
    (table("a_"), (), "server name 'a_' holds the namespace separator '__' or ends in part of it"),
    (table("a"), ("--separator", "::"), "namespace separator '::' must be 1-8 of"),
    (table("a"), ("--separator", ""), "namespace separator '' must be 1-8 of"),
    ("", (), "has no [servers.NAME] table"),
    (table("a"), ("--server", "b"), "--server 'b' is not configured"),
])
def test_a_config_serve_cannot_serve_is_refused_before_anything_starts(
        trusting: Path, state_dir: Path, tables: str, args: tuple[str, ...], says: str) -> None:
    with trusting.open("a") as config:
        config.write(tables)
    result = serve(*args)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert result.stdout == ""
    shown = subprocess.run([WARDEN, "audit", "show", "--event", "server.", "--json"], capture_output=True,
                           text=True, timeout=30)
    assert shown.stdout == ""  # no server was launched (or refused: none was planned that far)
    assert not (state_dir / "serve").exists() or not list((state_dir / "serve").iterdir())


def test_status_shows_the_config_error_and_exits_2(trusting: Path) -> None:
    with trusting.open("a") as config:
        config.write("\n= broken\n")
    result = subprocess.run([WARDEN, "status"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "invalid TOML" in result.stderr
    assert str(trusting) in result.stderr


def test_status_skips_hostile_status_files_without_waiting_or_crashing(trusting: Path, state_dir: Path,
                                                                      tmp_path: Path) -> None:
    """Found in review: a FIFO hung `warden status`, a symlink to /dev/zero passed the size check, nested JSON and
    wrong types crashed it. Each is skipped now, and a file naming a live process that is not a serve too."""
    directory = state_dir / "serve"
    directory.mkdir(parents=True, mode=0o700)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        os.mkfifo(directory / f"{sleeper.pid}.json")
        (directory / "1.json").symlink_to("/dev/zero")
        (directory / f"{os.getpid()}.json").write_text("[" * 100_000)
        (directory / "abc.json").write_text("{}")
        result = subprocess.run([WARDEN, "status", "--json"], capture_output=True, text=True, timeout=30)
    finally:
        sleeper.kill()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["serving"] == []


async def test_a_secret_set_anew_restarts_on_reload_the_server_it_is_handed_to(trusting: Path) -> None:
    """Found in review: a reload compared names only, so ``warden secrets set`` of a server's secret left it
    running with the old value. Now the server it is handed to starts again with the new one; the others keep
    running."""
    values = ("first-secret-value-0123456789", "second-secret-value-987654321")

    def set_secret(value: str) -> None:
        done = subprocess.run([WARDEN, "secrets", "set", "tok"], input=value + "\n", capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    set_secret(values[0])
    with trusting.open("a") as config:
        config.write(f"\n[servers.envy]\ncommand = {json.dumps(PYTHON)}\n"
                     f"args = {json.dumps([str(FIXTURES / 'env_server.py')])}\n"
                     'env = { TOKEN = "${secret:tok}" }\n' + table("other"))
    host = await RawHost.start([WARDEN, "serve"], env=os.environ)
    try:
        await host.initialize()
        for n, value in enumerate(values):
            answer = await host.call(n, "envy__env_digest", {"name": "TOKEN"}, timeout=60)
            assert json.dumps(answer).count(hashlib.sha256(value.encode()).hexdigest()) == 1, answer
            assert (await host.call(10 + n, "other__echo", {"text": "x"}))["result"]
            if n == 0:
                set_secret(values[1])
                os.kill(host.process.pid, signal.SIGHUP)
                with trio.fail_after(30):
                    while not audit_records("config.reloaded"):
                        await trio.sleep(0.2)
                reason = audit_records("config.reloaded")[-1]["reason"]
                assert reason == "changed, started again as what it now is: envy"
        assert await host.close() == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            host.process.kill()


@pytest.mark.parametrize("era", ["legacy", "2026"])
async def test_a_call_in_flight_when_a_reload_replaces_its_server_is_answered_at_once(trusting: Path,
                                                                                    era: str) -> None:
    """Found in review: a 2026 host's call to a server a reload replaced while it ran waited out its whole
    deadline (a legacy host's got "stopped by warden"). Now retiring a server ends what it is answering, and the
    host is told to try again, in both eras; the new server (approved, as a changed one must be) answers the
    retry."""
    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}}} if era == "2026" else {}
    good = trusting.read_text() + table("raw")
    trusting.write_text(good)
    host = await RawHost.start([WARDEN, "serve"], env=os.environ)
    try:
        if not meta:
            await host.initialize()
        await host.request(1, "tools/list", meta)
        await host.response(1, 60)
        await host.request(2, "tools/call", {"name": "raw__slow", "arguments": {"seconds": 30}, **meta})
        await trio.sleep(0.5)
        trusting.write_text(good + 'env = ["HOME"]\n')  # the server's launch changes: a reload replaces it
        with trio.fail_after(15):
            answer = await host.response(2, 15)
        assert answer["error"]["message"] in (
            "stopped by warden", "server 'raw' was stopped (a reload replaced or removed it) while answering; "
                                 "try again"), answer
        approved = subprocess.run([WARDEN, "pins", "approve", "raw", "--yes"], capture_output=True, text=True,
                                  timeout=60)
        assert approved.returncode == 0, approved.stderr
        await host.request(3, "tools/call", {"name": "raw__echo", "arguments": {"text": "again"}, **meta})
        retried = await host.response(3, 60)
        assert retried["result"]["content"][0]["text"] == "again", retried
        assert await host.close() == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            host.process.kill()


async def test_the_end_of_a_dual_era_servers_legacy_session_counts_as_a_restart(trusting: Path) -> None:
    """Found in review: a legacy host in front of a dual-era server is served by a legacy session on a sibling
    process, and when that process ended ``warden status`` counted no restart and named no error, so a sibling
    that kept dying looked healthy. Its end now counts as a restart with its reason, the era reads
    ``modern+legacy`` while the sibling serves, and the next legacy call starts another."""
    argv = [*RAWSERVER[1:], "--era", "dual", "--exit-after", "2"]
    trusting.write_text(trusting.read_text() + f"\n[servers.dual]\ncommand = {json.dumps(PYTHON)}\n"
                                               f"args = {json.dumps(argv)}\n")
    host = await RawHost.start([WARDEN, "serve"], env=os.environ)
    try:
        await host.initialize()
        await host.request(1, "tools/call", {"name": "dual__echo", "arguments": {"text": "first"}})
        assert (await host.response(1, 60))["result"]["content"][0]["text"] == "first"
        with trio.fail_after(20):
            while not status_of("dual")["legacy_lane"]:
                await trio.sleep(0.2)
        table = subprocess.run([WARDEN, "status"], capture_output=True, text=True, timeout=30, check=True).stdout
        assert any(line.split()[:3] == ["dual", "running", "modern+legacy"] for line in table.splitlines()), table
        await host.request(2, "tools/call", {"name": "dual__echo", "arguments": {"text": "second"}})
        assert (await host.response(2, 60))["result"]["content"][0]["text"] == "second"
        with trio.fail_after(20):
            while (dual := status_of("dual"))["restarts"] != 1:
                await trio.sleep(0.2)
        assert "(the legacy session for legacy hosts)" in dual["last_error"]
        assert (dual["era"], dual["legacy_lane"]) == ("modern", False)
        await host.request(3, "tools/call", {"name": "dual__echo", "arguments": {"text": "again"}})
        assert (await host.response(3, 60))["result"]["content"][0]["text"] == "again"
        assert await host.close() == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            host.process.kill()


def status_of(name: str) -> dict[str, object]:
    """``name``'s entry in the one running serve's ``warden status --json``."""
    shown = subprocess.run([WARDEN, "status", "--json"], capture_output=True, text=True, timeout=30, check=True)
    servers = json.loads(shown.stdout)["serving"][0]["servers"]
    found: dict[str, object] = next(s for s in servers if s["name"] == name)
    return found


async def test_a_legacy_session_that_keeps_ending_is_not_started_again(trusting: Path) -> None:
    """Found in review: the legacy session of a dual-era server that dies at every request was started again for
    every legacy request, a fresh sandbox each time, and never counted against ``--max-restarts``. Now, past
    that many quick ends in a row, legacy hosts are translated onto the server's 2026 session instead: the next
    call is answered with no new legacy session launched."""
    argv = [*RAWSERVER[1:], "--era", "dual", "--exit-after", "1"]
    trusting.write_text(trusting.read_text() + f"\n[servers.dual]\ncommand = {json.dumps(PYTHON)}\n"
                                               f"args = {json.dumps(argv)}\n")
    host = await RawHost.start([WARDEN, "serve", "--max-restarts", "1"], env=os.environ)
    try:
        await host.initialize()
        for n in range(1, 4):
            await host.request(n, "tools/call", {"name": "dual__echo", "arguments": {"text": f"call {n}"}})
            assert (await host.response(n, 60))["result"]["content"][0]["text"] == f"call {n}"
            with trio.fail_after(20):
                while status_of("dual")["restarts"] != n:  # each call ends its process: the lane, then the main
                    await trio.sleep(0.2)
        assert await host.close() == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            host.process.kill()
    lanes = [r for r in audit_records("server.launched") if "legacy session for legacy hosts" in r.get("target", "")]
    assert len(lanes) == 2, lanes


@pytest.mark.skipif(os.geteuid() != 0, reason="a root-owned write dir is refused only when warden runs as root")
async def test_reload_refuses_what_policy_check_refuses_and_starts_a_failed_server_again(trusting: Path,
                                                                                        tmp_path: Path) -> None:
    """Found by a new user: a reload took a ``write_dirs`` entry that does not exist (``warden policy check``
    refuses it) and replaced a working server by a refused one; and a server refused at start (its write dir
    belonged to root) stayed failed after the cause was fixed and SIGHUP sent ("nothing changed"). Now a reload
    refuses what ``policy check`` refuses, the old server keeps answering, and a reload starts a failed server
    again."""
    from warden.sandbox._uids import SANDBOX_GID

    owned_by_root = tmp_path / "rootdir"
    owned_by_root.mkdir()
    good = (table("fine") + table("blocked")
            + f"[servers.blocked.sandbox]\nwrite_dirs = [{json.dumps(str(owned_by_root))}]\n")
    with trusting.open("a") as config:
        config.write(good)
    base = trusting.read_text()
    host = await RawHost.start([WARDEN, "serve", "--eager"], env=os.environ)
    try:
        await host.initialize()
        blocked = await host.call(1, "blocked__echo", {"text": "x"}, timeout=60)
        assert "belongs to root" in json.dumps(blocked), blocked
        trusting.write_text(base + f"[servers.fine.sandbox]\nwrite_dirs = [{json.dumps(str(tmp_path / 'nope'))}]\n")
        with trio.fail_after(30):
            while not audit_records("config.reloaded"):
                await trio.sleep(0.2)
        refused = audit_records("config.reloaded")[-1]
        assert refused["error"].startswith("fine: "), refused
        assert "does not exist" in refused["error"]
        assert (await host.call(2, "fine__echo", {"text": "still"}))["result"]["content"][0]["text"] == "still"

        os.chown(owned_by_root, -1, SANDBOX_GID)  # the fix the refusal names
        owned_by_root.chmod(0o2775)
        trusting.write_text(base)
        os.kill(host.process.pid, signal.SIGHUP)
        with trio.fail_after(30):
            while len(audit_records("config.reloaded")) < 2:
                await trio.sleep(0.2)
        assert audit_records("config.reloaded")[-1]["reason"] == "failed before, started again: blocked"
        answer = await host.call(3, "blocked__echo", {"text": "back"}, timeout=60)
        assert answer["result"]["content"][0]["text"] == "back", answer
        assert await host.close() == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            host.process.kill()


async def test_status_with_two_serves_running_says_which_serve_each_row_is_of(trusting: Path) -> None:
    """Found by a new user: with a stdio and another serve running at once, ``warden status`` listed both
    serves' rows mixed (the same server twice), with nothing telling them apart. Now each row names its serve's
    pid when more than one runs; with one, the table is as before."""
    with trusting.open("a") as config:
        config.write(table("solo"))
    hosts = [await RawHost.start([WARDEN, "serve"], env=os.environ)]
    try:
        await hosts[0].initialize()
        with trio.fail_after(20):
            while not json.loads(subprocess.run([WARDEN, "status", "--json"], capture_output=True, text=True,
                                                timeout=30).stdout)["serving"]:
                await trio.sleep(0.2)
        one = subprocess.run([WARDEN, "status"], capture_output=True, text=True, timeout=30, check=True).stdout
        assert one.splitlines()[0].split()[:2] == ["SERVER", "STATE"], one
        hosts.append(await RawHost.start([WARDEN, "serve"], env=os.environ))
        await hosts[1].initialize()
        with trio.fail_after(20):
            while len(json.loads(subprocess.run([WARDEN, "status", "--json"], capture_output=True, text=True,
                                                timeout=30).stdout)["serving"]) < 2:
                await trio.sleep(0.2)
        two = subprocess.run([WARDEN, "status"], capture_output=True, text=True, timeout=30, check=True).stdout
        lines = two.splitlines()
        assert lines[0].split()[:4] == ["SERVER", "SERVE", "PID", "STATE"], two
        pids = {line.split()[1] for line in lines[1:] if line.startswith("solo ")}
        assert pids == {str(h.process.pid) for h in hosts}, two
        for host in hosts:
            assert await host.close() == 0
    finally:
        for host in hosts:
            with contextlib.suppress(ProcessLookupError):
                host.process.kill()
