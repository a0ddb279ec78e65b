"""The one redaction registry at each output channel (invariant 10): properties of the Redactor over every wire
spelling and framing, and each channel's redaction point on its own (log lines, server stderr, the audit log as any
process writes it, the pin store, the HTTP face, what a launch hands a server)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warden import logs
from warden.audit import Event, Record, open_audit_log
from warden.errors import LaunchError
from warden.gateway.http import _redacting
from warden.policy.pins import PinStore, digest
from warden.secrets import REDACTED, Redactor, SecretStore, hand_to_server, load_redactor, redactable
from warden.upstream.stderr import StderrTail

CANARY = "canary-Zq8vX2mP"
# Values a hypothesis run may register: quotes, backslashes, slashes, controls, non-ASCII and astral characters,
# each of which JSON spells in more than one way.
secrets_ = (st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=8, max_size=20)
            | st.builds(lambda a, b: a + b, st.sampled_from(['p"w\\/', "é/ü\\", "😀\u2028x", "\x1b]8;;"]),
                        st.text(min_size=5, max_size=12))).filter(redactable)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8)


def _plant(value: object, secrets: list[str], at: int = 0) -> object:
    secret = secrets[at % len(secrets)]
    if isinstance(value, str):
        return value + secret
    if isinstance(value, list):
        return [_plant(v, secrets, at + i) for i, v in enumerate(value)] + [secret]
    if isinstance(value, dict):
        return {k + secret: _plant(v, secrets, at + 1) for k, v in value.items()} | {"s": secret}
    return [value, secret]


def _upper_escapes(raw: bytes) -> bytes:
    return re.sub(rb"\\u([0-9a-f]{4})", lambda m: b"\\u" + m.group(1).upper(), raw)


ENCODINGS = {
    "msgspec": msgspec.json.encode,
    "ascii": lambda v: json.dumps(v).encode(),
    "ascii-upper": lambda v: _upper_escapes(json.dumps(v).encode()),
    "slash": lambda v: json.dumps(v).replace("/", "\\/").encode(),
    "utf8-slash": lambda v: json.dumps(v, ensure_ascii=False).replace("/", "\\/").encode("utf-8", "surrogatepass"),
}


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _clean(value: Any, secrets: list[str]) -> bool:
    return not any(secret in text for text in _strings(value) for secret in secrets)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=150)
@given(secrets=st.lists(secrets_, min_size=1, max_size=3), value=json_values,
       encoding=st.sampled_from(sorted(ENCODINGS)))
def test_wire_never_leaves_a_registered_value_in_any_json_spelling(secrets: list[str], value: object,
                                                                   encoding: str) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "result": _plant(value, secrets)}
    out = Redactor(secrets).wire(ENCODINGS[encoding](message))
    assert _clean(msgspec.json.decode(out), secrets)  # still one valid JSON value, and nothing registered in it


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=100)
@given(secrets=st.lists(secrets_, min_size=1, max_size=2), values=st.lists(json_values, min_size=1, max_size=3),
       sse=st.booleans())
def test_wire_redacts_framed_messages_line_by_line(secrets: list[str], values: list[object], sse: bool) -> None:
    """An SSE event (``id:`` and ``data:`` lines) or NDJSON: every line that holds JSON keeps it valid."""
    lines = [json.dumps({"jsonrpc": "2.0", "method": "m", "params": _plant(v, secrets)}) for v in values]
    framed = "".join(f"id: 1-{i}\ndata: {line}\n\n" for i, line in enumerate(lines)) if sse else "\n".join(lines)
    out = Redactor(secrets).wire(framed.encode())
    for line in out.decode().split("\n"):
        body = line.removeprefix("data: ")
        if body.startswith("{"):
            assert _clean(json.loads(body), secrets)
        else:
            assert not any(s in line for s in secrets)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(secrets=st.lists(secrets_, min_size=1, max_size=3), parts=st.lists(
    st.text(max_size=12) | st.sampled_from(["[REDACTED", "D]", "[", "REDACTED]"]), max_size=6))
def test_text_leaves_nothing_registered_even_next_to_the_marker(secrets: list[str], parts: list[str]) -> None:
    """Replacing a value can make a new one appear beside ``[REDACTED]``; redaction repeats until none is left."""
    text = "".join(p + secrets[i % len(secrets)] for i, p in enumerate(parts)) + "".join(secrets)
    out = Redactor(secrets).text(text)
    assert not any(secret in out for secret in secrets)


def test_a_value_made_by_the_replacement_is_cut_too() -> None:
    red = Redactor(["D]abcdefg"])
    assert red.text("XD]abcdefgabcdefg") == f"X[REDACTE{REDACTED}"  # the second pass found the new one


def test_values_inside_the_marker_cannot_be_registered(state_dir: Path) -> None:
    assert not redactable("REDACTED")
    assert not redactable("[REDACTE")
    assert redactable("REDACTED!")
    with pytest.raises(Exception, match="part of the redaction marker"):
        SecretStore(state_dir, keyring=None).set("X_TOKEN", "REDACTED]")


def test_text_keeps_the_same_object_when_nothing_matches() -> None:
    text = "nothing secret here, ünïcode and \ud800 a lone surrogate"
    assert Redactor([CANARY]).text(text) is text


# -- warden's log -------------------------------------------------------------------------------------------------


def test_log_lines_are_redacted_before_they_are_escaped_and_cut() -> None:
    stream = io.StringIO()
    logs.configure(logging.INFO, stream)
    try:
        logs.use_redactor(Redactor([CANARY]))
        cut_through = "x" * (logs.MAX_LINE - len("warden: WARNING: ") - 4) + CANARY
        logging.getLogger("warden.test").warning("%s", f"token {CANARY}\x1b[2K\nwarden: INFO: forged\u202e")
        logging.getLogger("warden.test").warning("%s", cut_through)
        try:
            raise ValueError(f"boom {CANARY}\x1b]8;;")
        except ValueError:
            logging.getLogger("warden.test").exception("failed")
    finally:
        logs.shutdown()
        logs.use_redactor(Redactor())
    out = stream.getvalue()
    assert CANARY not in out
    assert CANARY[:4] + "\n" not in out
    first, second, *_rest = out.splitlines()
    assert first == "warden: WARNING: token [REDACTED]\\x1b[2K\\nwarden: INFO: forged<U+202E>"
    assert second == "warden: WARNING: " + cut_through.removesuffix(CANARY) + "[RED…"  # not the canary's start
    assert "\x1b" not in out
    assert "ValueError: boom [REDACTED]\\x1b]8;;" in out


async def test_server_stderr_is_redacted_before_any_cut() -> None:
    tail = StderrTail("srv", Redactor([CANARY]))
    send, receive = trio.testing.memory_stream_one_way_pair()
    long_line = "y" * (logs.MAX_LINE - 3) + CANARY  # the secret straddles the cut
    await send.send_all(f"start {CANARY[:6]}".encode())
    await send.send_all(f"{CANARY[6:]} \x1b[2K\n{long_line}\n".encode())
    await send.aclose()
    await tail.drain(receive)
    first, second = tail.tail()
    assert first == "start [REDACTED] \\x1b[2K"
    assert CANARY[:3] not in second[logs.MAX_LINE - 10:]
    assert second.endswith("…")


# -- what a launch hands a server ---------------------------------------------------------------------------------


def test_a_short_secret_looking_value_refuses_the_launch(state_dir: Path) -> None:
    with pytest.raises(LaunchError, match=r"API_KEY for server 'srv' holds a value shorter than 8 characters.*"
                                          r"\[secrets: minimum length\]") as refused:
        hand_to_server(state_dir, "srv", {"API_KEY": "abc123", "DEBUG": "1"})
    assert "abc123" not in str(refused.value) + (refused.value.hint or "")


def test_short_settings_are_named_in_the_log_not_passed_silently(state_dir: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        redactor = hand_to_server(state_dir, "srv", {"DEBUG": "1", "PORT": "8080", "GITHUB_TOKEN": CANARY})
    assert "srv: env DEBUG, PORT handed to the server not redacted: shorter than 8 characters" in caplog.text
    assert redactor.values == (CANARY,)


def test_handed_values_are_readable_by_a_process_that_never_saw_them(state_dir: Path) -> None:
    hand_to_server(state_dir, "srv", {"GITHUB_TOKEN": CANARY})
    before = os.stat(state_dir / "secrets.json").st_mtime_ns
    hand_to_server(state_dir, "srv", {"GITHUB_TOKEN": CANARY})  # a relaunch writes nothing
    assert os.stat(state_dir / "secrets.json").st_mtime_ns == before
    assert load_redactor(state_dir).text(f"x{CANARY}") == f"x{REDACTED}"


# -- the audit log, whoever writes ------------------------------------------------------------------------------


async def test_any_writer_redacts_with_the_state_dir_registry(state_dir: Path) -> None:
    """``warden pins approve`` opens the log without knowing any value: the state dir's registry is enough."""
    SecretStore(state_dir, keyring=None).record_handed("srv", {"GITHUB_TOKEN": CANARY})
    async with open_audit_log(state_dir) as log:
        await log.append(Record(event=Event.PIN_APPROVED, server_name="srv", method="resource",
                                target=f"mem://{CANARY}", reason=f"because {CANARY}"))
    raw = (state_dir / "audit" / "entries.log").read_bytes()
    assert CANARY.encode() not in raw
    assert raw.count(b"[REDACTED]") == 2


# -- the pin store ----------------------------------------------------------------------------------------------


def test_the_pin_store_stores_redacted_and_digests_the_real_definition(state_dir: Path) -> None:
    store = PinStore(state_dir, redactor=Redactor([CANARY]))
    tool = {"name": "say", "description": f"debug {CANARY}", "inputSchema": {"type": "object"}}
    seen = store.observe_list("srv", "tool", [tool, {"name": f"get_{CANARY}", "inputSchema": {}}], on_new="ask")
    assert seen.digests == {"say": digest(tool)}
    assert seen.rejected == (f"get_{CANARY}",)
    store.approve("srv", "tool", "say")
    entry = store.get("srv", "tool", "say")
    assert entry is not None
    assert entry.redacted
    assert entry.digest == digest(tool)
    assert entry.approved_definition["description"] == "debug [REDACTED]"
    assert store.is_approved("srv", "tool", "say", digest(tool))
    assert CANARY not in store.path.read_text()


def test_the_pin_store_reads_the_state_dir_registry_by_default(state_dir: Path) -> None:
    SecretStore(state_dir, keyring=None).set("KNOWN_TOKEN", CANARY)
    store = PinStore(state_dir)
    store.observe_list("srv", "resource", [{"uri": f"mem://{CANARY}"}, {"uri": "mem://plain"}], on_new="ask")
    assert [e.key for e in store.entries("srv")] == ["mem://plain"]


# -- the HTTP face ----------------------------------------------------------------------------------------------


async def test_http_bodies_are_redacted_and_content_length_stays_true() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    wrapped = _redacting(send, Redactor([CANARY]))
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"t": CANARY}}).encode()
    await wrapped({"type": "http.response.start", "status": 200,
                   "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
    await wrapped({"type": "http.response.body", "body": body})
    start, done = sent
    assert json.loads(done["body"]) == {"jsonrpc": "2.0", "id": 1, "result": {"t": REDACTED}}
    assert dict(start["headers"])[b"content-length"] == b"%d" % len(done["body"])
    sent.clear()
    await wrapped({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await wrapped({"type": "http.response.body", "body": f'id: 1-1\ndata: {{"x":"{CANARY}"}}\n\n'.encode(),
                   "more_body": True})
    assert sent[1]["body"] == b'id: 1-1\ndata: {"x":"[REDACTED]"}\n\n'


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture], max_examples=60,
          deadline=None)
@given(secrets=st.lists(secrets_, min_size=1, max_size=3), values=st.lists(json_values, min_size=1, max_size=4),
       encoding=st.sampled_from(sorted(ENCODINGS)))
def test_the_host_channel_never_writes_a_registered_value(secrets: list[str], values: list[object],
                                                          encoding: str) -> None:
    """Through a real :class:`MessageChannel` over a pipe: what the host reads back holds no registered value."""
    from warden.transport.channel import MessageChannel

    async def main() -> bytes:
        read_fd, write_fd = os.pipe()
        out = trio.lowlevel.FdStream(write_fd)
        reader = trio.lowlevel.FdStream(read_fd)
        _, nothing_in = trio.testing.memory_stream_one_way_pair()
        channel = MessageChannel(nothing_in, out, name="host", redactor=Redactor(secrets))
        got = b""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.serve_writer)
            for i, value in enumerate(values):
                await channel.send(ENCODINGS[encoding]({"jsonrpc": "2.0", "id": i, "result": _plant(value, secrets)}))
            channel.close_outbox()
            while got.count(b"\n") < len(values):
                got += await reader.receive_some(1 << 20)
        await out.aclose()
        await reader.aclose()
        return got

    for line in trio.run(main).splitlines():
        assert _clean(msgspec.json.decode(line), secrets)
