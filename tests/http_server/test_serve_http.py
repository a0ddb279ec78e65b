"""``warden serve --http`` (issue 14 items 1 and 4): every configured server behind one Streamable HTTP endpoint,
real processes in their sandboxes, real HTTP on 127.0.0.1.

The Python SDK client (both eras) sees every namespaced tool and calls them, a call's ``Mcp-Param-*`` headers
checked against the definition behind the shown name; and two principals (named tokens) share one warden without
reaching each other: a legacy session, a question asked in one's call, a request state issued to one, are the
other's to neither see nor use, every record names who was authenticated, and a revoked token is refused at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.conformance.test_fixture_server import answer_elicitation, answer_roots, answer_sampling, text_of
from tests.http_server.test_face import FIXTURE, EventReader, legacy_call, recording
from tests.http_server.test_principals import add_token, as_, decided, modern, request_state_is_bound, warden
from tests.http_server.warden_http import WardenHttp, warden_http
from tests.support import RAWSERVER, WARDEN, audit_records, server_pids


def serving(trusting: Path, tmp_path: Path) -> None:
    """Two servers in the config: the conformance fixture (``conf``) and the recording server (``rec``)."""
    with trusting.open("a") as config:
        for name, argv in (("conf", FIXTURE), ("rec", recording(tmp_path / "upstream.log"))):
            config.write(f"\n[servers.{name}]\ncommand = {json.dumps(argv[0])}\nargs = {json.dumps(argv[1:])}\n")


async def legacy_session(w: WardenHttp, token: str, capabilities: dict[str, Any] | None = None) -> str:
    opened = await w.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities or {},
        "clientInfo": {"name": "t", "version": "1"}}}, as_(w, token))
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    done = await w.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                        as_(w, token, mcp_session_id=session))
    assert done.status_code == 202
    return session


async def test_sdk_client_both_eras_sees_every_namespaced_tool_through_serve_http(trusting: Path,
                                                                               tmp_path: Path) -> None:
    serving(trusting, tmp_path)
    async with warden_http([], cwd=tmp_path) as w:
        for mode, version in (("legacy", "2025-11-25"), ("auto", "2026-07-28")):
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {w.token}"})
            async with http, Client(streamable_http_client(w.url, http_client=http), mode=mode,
                                    elicitation_callback=answer_elicitation, sampling_callback=answer_sampling,
                                    list_roots_callback=answer_roots) as client:
                assert client.protocol_version == version
                names = {t.name for t in (await client.list_tools()).tools}
                assert {"conf__test_simple_text", "conf__test_x_mcp_header", "rec__echo", "rec__ask"} <= names
                assert all(n.startswith(("conf__", "rec__")) for n in names)
                assert text_of(await client.call_tool("conf__test_simple_text", {})) \
                    == "This is a simple text response for testing."
                echoed = await client.call_tool("rec__echo", {"text": f"via {mode}"})
                assert f"via {mode}" in text_of(echoed)
                # the SDK mirrors the x-mcp-header annotation into Mcp-Param-Region (2026); warden checks it
                # against the definition behind conf__test_x_mcp_header, as it would behind test_x_mcp_header
                header = await client.call_tool("conf__test_x_mcp_header", {"region": "Hello, 世界"})
                assert text_of(header) == "region=Hello, 世界"
    assert w.process.returncode == 0


async def test_a_mcp_param_header_that_disagrees_with_the_call_is_refused_behind_the_hub(trusting: Path,
                                                                                        tmp_path: Path) -> None:
    """The hub hands the HTTP face the definition behind a shown name, so a 2026 call whose ``Mcp-Param-Region``
    disagrees with its arguments is refused (400 ``-32020``) before it reaches any server."""
    serving(trusting, tmp_path)
    async with warden_http([], cwd=tmp_path) as w:
        listed = await w.modern(1, "tools/list")
        assert listed.status_code == 200, listed.text
        call = {"name": "conf__test_x_mcp_header", "arguments": {"region": "eu"}}
        agreed = await w.modern(2, "tools/call", call, mcp_param_region="eu")
        assert agreed.status_code == 200, agreed.text
        refused = await w.modern(3, "tools/call", call, mcp_param_region="us")
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == -32020


async def test_two_principals_behind_serve_http_reach_nothing_of_each_other(trusting: Path,
                                                                           tmp_path: Path) -> None:
    serving(trusting, tmp_path)
    alice, bob = add_token("alice"), add_token("bob")
    async with warden_http([], cwd=tmp_path) as w:
        # a legacy session is its opener's alone: another principal's credential finds no such session
        session = await legacy_session(w, alice, {"elicitation": {"form": {}}})
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        assert (await w.post(listing, as_(w, bob, mcp_session_id=session))).status_code == 404
        assert (await w.client.get(w.url, headers=as_(w, bob, mcp_session_id=session))).status_code == 404
        assert (await w.client.delete(w.url, headers=as_(w, bob, mcp_session_id=session))).status_code == 404

        # a question one server asks in alice's call: bob's answer to its id settles nothing; alice's does
        bobs = await legacy_session(w, bob, {"elicitation": {"form": {}}})
        mine = as_(w, alice, mcp_session_id=session)
        body = json.dumps(legacy_call(7, "rec__ask", {"message": "name?"})).encode()
        async with w.client.stream("POST", w.url, headers=mine, content=body) as response:
            events = EventReader(response)
            question = await events.message()
            assert question["method"] == "elicitation/create"
            forged = {"jsonrpc": "2.0", "id": question["id"],
                      "result": {"action": "accept", "content": {"answer": "Mallory"}}}
            assert (await w.post(forged, as_(w, bob, mcp_session_id=bobs))).status_code == 202
            assert (await w.post(forged, as_(w, bob, mcp_session_id=session))).status_code == 404
            await trio.sleep(0.3)  # had bob's answer settled it, the result would be on its way now
            answer = {**forged, "result": {"action": "accept", "content": {"answer": "Grace"}}}
            assert (await w.post(answer, mine)).status_code == 202
            result = await events.message()
        assert result["id"] == 7
        assert result["result"]["content"][0]["text"] == 'answer={"answer": "Grace"}'

        # a request state issued to alice (a 2026 question, MRTR) is refused to bob and good for alice
        await request_state_is_bound(w, alice, bob, "rec__ask", 10)

        # every record names who was authenticated, and the audit log filters by it
        answered = await modern(w, bob, 13, "tools/call", {"name": "conf__test_simple_text", "arguments": {}})
        assert "error" not in answered.json(), answered.text
        records = decided()
        assert {(r["server_name"], r.get("principal")) for r in records} >= {
            ("rec", "token:alice"), ("conf", "token:bob")}
        assert all(r.get("principal") in ("token:alice", "token:bob") for r in records)
        assert {r["server_name"] for r in decided("--principal", "token:bob")} == {"conf"}

        # a revoked token is refused at once, on every era, and the other principal goes on
        assert warden("tokens", "revoke", "bob").returncode == 0
        assert (await modern(w, bob, 14, "tools/list", {})).status_code == 401
        assert (await w.post(listing, as_(w, bob, mcp_session_id=bobs))).status_code == 401
        assert (await modern(w, alice, 15, "tools/list", {})).status_code == 200
    assert alice not in "\n".join(w.stderr)
    assert bob not in "\n".join(w.stderr)


async def test_status_names_the_http_endpoint_of_a_running_serve(trusting: Path, tmp_path: Path) -> None:
    serving(trusting, tmp_path)
    async with warden_http([], cwd=tmp_path) as w:
        assert (await w.modern(1, "tools/list")).status_code == 200
        with trio.fail_after(20):
            while True:
                shown = await trio.run_process([WARDEN, "status", "--json"], capture_stdout=True)
                serves = json.loads(shown.stdout)["serving"]
                if serves and serves[0].get("endpoint"):
                    break
                await trio.sleep(0.2)
        assert serves[0]["endpoint"] == w.url
        assert {s["name"] for s in serves[0]["servers"]} == {"conf", "rec"}
        table = await trio.run_process([WARDEN, "status"], capture_stdout=True)
        assert f"serving HTTP at {w.url}".encode() in table.stdout


def test_http_only_flags_without_http_and_stdio_with_http_are_refused(trusting: Path, tmp_path: Path) -> None:
    serving(trusting, tmp_path)
    for args, says in ((("--no-auth",), "only go with --http"),
                       (("--token-file", str(tmp_path / "t")), "only go with --http"),
                       (("--require-scope", "mcp"), "only go with --http: --require-scope"),
                       (("--stdio", "--http", "127.0.0.1:0"), "--stdio and --http exclude each other"),
                       (("--http", "127.0.0.1:0", "--no-auth", "--token-file", str(tmp_path / "t")),
                        "--no-auth and --token-file exclude each other")):
        refused = warden("serve", *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert says in refused.stderr
    assert not (tmp_path / "upstream.log").exists()  # nothing started


def test_a_token_file_others_can_read_is_refused_before_any_server_starts(trusting: Path, tmp_path: Path) -> None:
    serving(trusting, tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text("a" * 43 + "\n")
    token_file.chmod(0o644)
    refused = warden("serve", "--http", "127.0.0.1:0", "--token-file", str(token_file))
    assert refused.returncode == 2, refused.stderr
    assert "has mode 0644; it must be 0600: other users could read the token" in refused.stderr
    assert not (tmp_path / "upstream.log").exists()


def test_no_auth_off_loopback_is_refused_before_any_server_starts(trusting: Path, tmp_path: Path) -> None:
    serving(trusting, tmp_path)
    refused = warden("serve", "--http", "0.0.0.0:0", "--no-auth")
    assert refused.returncode == 2, refused.stderr
    assert "--no-auth" in refused.stderr
    assert not (tmp_path / "upstream.log").exists()


def rawservers_below(serve_pid: int) -> set[int]:
    """The sandboxed rawserver processes below ``serve_pid`` (not their bwrap)."""
    return set(server_pids(serve_pid, "rawserver.py"))


async def test_shared_false_runs_one_process_per_principal_and_shared_one_for_all(trusting: Path,
                                                                                 tmp_path: Path) -> None:
    """``shared = false``: each principal that uses the server gets a process of its own (so nothing the server
    keeps in memory reaches another principal); a shared server is one process for all. ``warden status`` names
    whose processes run, and each one's records name its principal."""
    with trusting.open("a") as config:
        for name, extra in (("solo", "shared = false\n"), ("pool", "")):
            config.write(f"\n[servers.{name}]\ncommand = {json.dumps(RAWSERVER[0])}\n"
                         f"args = {json.dumps(RAWSERVER[1:])}\n{extra}")
    alice, bob = add_token("alice"), add_token("bob")
    async with warden_http([], cwd=tmp_path) as w:
        for token in (alice, bob, alice):
            for server in ("solo", "pool"):
                called = await modern(w, token, 1, "tools/call", {"name": f"{server}__echo",
                                                                  "arguments": {"text": "hi"}})
                assert called.json()["result"]["content"][0]["text"] == "hi", called.text
        processes = rawservers_below(w.process.pid)
        assert len(processes) == 3, processes  # solo: alice's and bob's; pool: one for both
        with trio.fail_after(20):
            while True:
                shown = await trio.run_process([WARDEN, "status", "--json"], capture_stdout=True)
                servers = {s["name"]: s for s in json.loads(shown.stdout)["serving"][0]["servers"]}
                if servers["solo"]["calls"] == 3:
                    break
                await trio.sleep(0.2)
        assert servers["solo"]["shared"] is False
        assert servers["solo"]["principals"] == ["token:alice", "token:bob"]
        assert servers["solo"]["state"] == "running"
        assert "principals" not in servers["pool"]
        assert servers["pool"]["calls"] == 3
        launched = [r for r in audit_records("server.launched") if r["server_name"] == "solo"]
        assert len(launched) == 2
        calls = {(r["server_name"], r["principal"]) for r in decided()}
        assert calls == {(s, p) for s in ("solo", "pool") for p in ("token:alice", "token:bob")}
    assert not rawservers_below(w.process.pid)


async def solo_status() -> dict[str, Any]:
    shown = await trio.run_process([WARDEN, "status", "--json"], capture_stdout=True)
    servers = {s["name"]: s for s in json.loads(shown.stdout)["serving"][0]["servers"]}
    return servers["solo"]


async def test_a_principals_own_process_is_stopped_once_idle_never_mid_call_and_comes_back(trusting: Path,
                                                                                          tmp_path: Path) -> None:
    """Each principal's own process of a ``shared = false`` server stayed up until serve stopped: 64 principals
    held 64 sandboxes for good. Now one unused for ``--idle-stop`` seconds is stopped, never while it answers a
    call (a call longer than the idle time completes), its calls stay counted, and the principal's next request
    starts it again as a new process."""
    with trusting.open("a") as config:
        config.write(f"\n[servers.solo]\ncommand = {json.dumps(RAWSERVER[0])}\n"
                     f"args = {json.dumps(RAWSERVER[1:])}\nshared = false\n")
    alice = add_token("alice")
    async with warden_http([], "--idle-stop", "1", cwd=tmp_path) as w:
        slow = await modern(w, alice, 1, "tools/call", {"name": "solo__slow", "arguments": {"seconds": 3}})
        assert slow.json()["result"]["content"][0]["text"] == "slow done", slow.text
        first = rawservers_below(w.process.pid)
        assert len(first) == 1, first
        with trio.fail_after(20):
            while rawservers_below(w.process.pid):
                await trio.sleep(0.2)
            while (status := await solo_status())["principals"]:
                await trio.sleep(0.2)
        assert status["calls"] == 1
        again = await modern(w, alice, 2, "tools/call", {"name": "solo__echo", "arguments": {"text": "back"}})
        assert again.json()["result"]["content"][0]["text"] == "back", again.text
        second = rawservers_below(w.process.pid)
        assert len(second) == 1, second
        assert not second & first, (first, second)
        with trio.fail_after(20):
            while (status := await solo_status())["calls"] != 2:
                await trio.sleep(0.2)
        # Its own process again (or, on a slow machine, already stopped again after another idle second):
        assert status["principals"] in (["token:alice"], [])
        assert len([r for r in audit_records("server.launched") if r["server_name"] == "solo"]) == 2


def test_idle_stop_below_zero_is_refused(trusting: Path, tmp_path: Path) -> None:
    refused = warden("serve", "--http", "127.0.0.1:0", "--idle-stop", "-1")
    assert refused.returncode == 2, refused.stderr
    assert "--idle-stop -1: the seconds must be 0 (never) or more" in refused.stderr


async def test_only_the_local_users_principals_are_asked_to_approve_pins_in_band(trusting: Path,
                                                                                tmp_path: Path) -> None:
    """A pin approval holds for everyone, so a named token's host is never asked for one (its approval would
    reach principals who never gave it): its call is refused with the command that approves. The face's own
    token (the local user's) is asked, and its approval then serves every principal."""
    with trusting.open("a") as config:
        config.write(f'\n[servers.gate]\ncommand = {json.dumps(RAWSERVER[0])}\nargs = {json.dumps(RAWSERVER[1:])}\n'
                     'on_new = "ask"\n')
    alice = add_token("alice")
    async with warden_http([], cwd=tmp_path) as w:
        assert w.token is not None
        call = json.dumps(legacy_call(5, "gate__echo", {"text": "hi"})).encode()
        hers = await legacy_session(w, alice, {"elicitation": {"form": {}}})
        async with w.client.stream("POST", w.url, headers=as_(w, alice, mcp_session_id=hers),
                                   content=call) as response:
            first = await EventReader(response).message()
        assert first.get("id") == 5, first  # the answer, not a question
        assert "not approved" in first["error"]["message"], first
        assert "warden pins review" in first["error"]["data"]["hint"], first

        own = await legacy_session(w, w.token, {"elicitation": {"form": {}}})
        mine = as_(w, w.token, mcp_session_id=own)
        async with w.client.stream("POST", w.url, headers=mine, content=call) as response:
            events = EventReader(response)
            question = await events.message()
            assert question["method"] == "elicitation/create", question
            assert "gate" in question["params"]["message"]
            answer = {"jsonrpc": "2.0", "id": question["id"],
                      "result": {"action": "accept", "content": {"approve": True}}}
            assert (await w.post(answer, mine)).status_code == 202
            done = await events.message()
        assert done["result"]["content"][0]["text"] == "hi", done

        again = await w.post(json.loads(call), as_(w, alice, mcp_session_id=hers))
        assert '"text":"hi"' in again.text.replace(" ", ""), again.text


async def test_pins_approved_for_one_principal_serve_that_principal_only(trusting: Path, tmp_path: Path) -> None:
    """``warden pins approve --principal``: what is approved for alice is listed and callable for alice, and to
    bob (and to the face's own token) still waits for approval; approving for bob adds him, approving without
    ``--principal`` makes it everyone's. Each approval's record says whom it is for."""
    with trusting.open("a") as config:
        config.write(f'\n[servers.gate]\ncommand = {json.dumps(RAWSERVER[0])}\nargs = {json.dumps(RAWSERVER[1:])}\n'
                     'on_new = "ask"\n')
    alice, bob = add_token("alice"), add_token("bob")

    async def sees(w: WardenHttp, token: str) -> bool:
        listed = await modern(w, token, 1, "tools/list", {})
        names = {t["name"] for t in listed.json()["result"]["tools"]}
        called = await modern(w, token, 2, "tools/call", {"name": "gate__echo", "arguments": {"text": "hi"}})
        assert ("gate__echo" in names) == ("result" in called.json()), (names, called.text)
        if "error" in called.json():
            assert "not approved" in called.json()["error"]["message"], called.text
        return "gate__echo" in names

    async with warden_http([], cwd=tmp_path) as w:
        assert w.token is not None
        assert [await sees(w, t) for t in (alice, bob, w.token)] == [False, False, False]
        for_alice = warden("pins", "approve", "gate", "--yes", "--principal", "token:alice")
        assert for_alice.returncode == 0, for_alice.stderr
        assert "(for token:alice only)" in for_alice.stdout
        assert [await sees(w, t) for t in (alice, bob, w.token)] == [True, False, False]
        listed = warden("pins", "list", "gate").stdout
        assert "echo (for token:alice only)" in listed
        assert warden("pins", "approve", "gate", "--yes", "--principal", "token:bob").returncode == 0
        assert [await sees(w, t) for t in (alice, bob, w.token)] == [True, True, False]
        assert "(for token:alice, token:bob only)" in warden("pins", "list", "gate").stdout
        everyone = warden("pins", "approve", "gate", "--yes")
        assert everyone.returncode == 0, everyone.stderr
        assert [await sees(w, t) for t in (alice, bob, w.token)] == [True, True, True]
        assert " only)" not in warden("pins", "list", "gate").stdout
    reasons = [r.get("reason") for r in audit_records("pin.approved") if r.get("target") == "echo"]
    assert reasons == ["for token:alice only", "for token:alice, token:bob only", None]
    for bad, says in (("Alice", "is not a principal"), ("token:Alice", "is not a token name"),
                      ("oauth:", "is not a principal")):
        refused = warden("pins", "approve", "gate", "--yes", "--principal", bad)
        assert refused.returncode == 2, refused.stderr
        assert says in refused.stderr


async def test_an_approval_for_one_principal_tells_that_principals_sessions_only(trusting: Path,
                                                                                tmp_path: Path) -> None:
    """What an approval changed was worked out for the local user alone, so one made ``--principal token:alice``
    told no session (alice listed her tools again only when she happened to). Now each principal's sessions
    hear ``list_changed`` when their own lists change: alice's for her approval, bob's not until one that
    holds for him. (Found with it: behind serve, a session's GET stream opened after its first request got no
    server's notifications at all; each server's link now writes to the session's stream as it is now.)"""
    with trusting.open("a") as config:
        config.write(f'\n[servers.gate]\ncommand = {json.dumps(RAWSERVER[0])}\nargs = {json.dumps(RAWSERVER[1:])}\n'
                     'on_new = "ask"\n')
    alice, bob = add_token("alice"), add_token("bob")
    async with warden_http([], cwd=tmp_path) as w:
        sessions = {token: await legacy_session(w, token) for token in (alice, bob)}
        for token, session in sessions.items():
            listed = await w.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                  as_(w, token, mcp_session_id=session))
            assert listed.json()["result"]["tools"] == [], listed.text  # everything waits for approval
        get = {token: {**as_(w, token, mcp_session_id=session), "accept": "text/event-stream"}
               for token, session in sessions.items()}
        heard: dict[str, list[str]] = {alice: [], bob: []}

        async def hear(token: str, task_status: trio.TaskStatus[None]) -> None:
            async with w.client.stream("GET", w.url, headers=get[token]) as stream:
                events = EventReader(stream)
                assert (await events.next()).data == ""  # priming
                task_status.started()
                while True:
                    heard[token].append((await events.message()).get("method", ""))

        async def changed(token: str) -> bool:
            with trio.move_on_after(3):
                while "notifications/tools/list_changed" not in heard[token]:
                    await trio.sleep(0.05)
            told = "notifications/tools/list_changed" in heard[token]
            heard[token].clear()
            return told

        async with trio.open_nursery() as nursery:
            for token in (alice, bob):
                await nursery.start(hear, token)
            assert warden("pins", "approve", "gate", "--yes", "--principal", "token:alice").returncode == 0
            assert await changed(alice)
            assert not await changed(bob)
            assert warden("pins", "approve", "gate", "--yes").returncode == 0
            assert await changed(bob)
            nursery.cancel_scope.cancel()
