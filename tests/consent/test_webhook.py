"""Issue 17 item 4: headless approvals through a signed webhook, against a real receiver on 127.0.0.1 -- approve,
deny, a replayed answer, an expired answer, a wrong signature, the receiver down (and the other ways an answer is
refused), then the same through ``warden run``."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import PYTHON, WARDEN, RawHost, through_warden, write_config
from warden.consent import ANSWER_DOMAIN, REQUEST_DOMAIN, ApprovalRequest, WebhookApprovals, sign_approval
from warden.policy.pins import arguments_digest

KEY = b"k" * 32
ARGS = {"to": "boss@example.com", "body": "quarterly numbers"}
REQUEST = ApprovalRequest("mail", "send_email", arguments_digest(ARGS), "needs a human", "user c.toml:3 (x)",
                          "host-1")

Answer = Callable[[dict[str, Any], bytes, str], tuple[int, bytes, str | None]]


def answer_for(doc: dict[str, Any], decision: str = "approve", *, key: bytes = KEY,
               **changes: Any) -> tuple[int, bytes, str | None]:
    body = json.dumps({"type": "warden.approval.answer", "version": 1, "id": doc["id"], "decision": decision,
                       "arguments_digest": doc["arguments_digest"], "expires_at": doc["expires_at"],
                       "by": "alice", **changes}).encode()
    return 200, body, sign_approval(key, ANSWER_DOMAIN, body)


class Receiver:
    """A chat bot's side, on 127.0.0.1: checks warden's signature, records what came, answers as told."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.seen: list[dict[str, Any]] = []
        self.bad_signatures = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                signature = self.headers.get("X-Warden-Signature", "")
                if not hmac.compare_digest(signature, sign_approval(KEY, REQUEST_DOMAIN, body)):
                    receiver.bad_signatures += 1
                doc = json.loads(body)
                receiver.seen.append(doc)
                status, out, out_sig = receiver.answer(doc, body, signature)
                self.send_response(status)
                if out_sig is not None:
                    self.send_header("X-Warden-Signature", out_sig)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/warden"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def receiver() -> Iterator[Callable[[Answer], Receiver]]:
    made: list[Receiver] = []

    def make(answer: Answer) -> Receiver:
        made.append(Receiver(answer))
        return made[-1]

    yield make
    for r in made:
        r.close()


async def test_approve(receiver: Callable[[Answer], Receiver]) -> None:
    r = receiver(lambda doc, body, sig: answer_for(doc))
    verdict = await WebhookApprovals(r.url, KEY, timeout=10).ask(REQUEST)
    assert verdict.approved
    assert verdict.by == "alice"
    assert r.bad_signatures == 0
    sent = r.seen[0]
    assert sent["arguments_digest"] == arguments_digest(ARGS)  # the exact arguments, by digest
    assert "boss@example.com" not in json.dumps(sent)  # never the values
    assert (sent["type"], sent["version"], sent["server"], sent["tool"]) == ("warden.approval.request", 1, "mail",
                                                                             "send_email")
    assert len(sent["id"]) == 32
    assert sent["expires_at"] == sent["issued_at"] + 10


async def test_deny(receiver: Callable[[Answer], Receiver]) -> None:
    r = receiver(lambda doc, body, sig: answer_for(doc, "deny"))
    verdict = await WebhookApprovals(r.url, KEY, timeout=10).ask(REQUEST)
    assert not verdict.approved
    assert verdict.reason == "a human denied it through the approval webhook"


async def test_a_replayed_answer_is_refused(receiver: Callable[[Answer], Receiver]) -> None:
    captured: list[tuple[int, bytes, str | None]] = []

    def answer(doc: dict[str, Any], body: bytes, sig: str) -> tuple[int, bytes, str | None]:
        if not captured:
            captured.append(answer_for(doc))
        return captured[0]  # the first answer, validly signed, replayed for every later request

    r = receiver(answer)
    channel = WebhookApprovals(r.url, KEY, timeout=10)
    assert (await channel.ask(REQUEST)).approved
    replayed = await channel.ask(REQUEST)
    assert not replayed.approved
    assert replayed.reason == "the answer is for another request (a replayed answer)"
    assert r.seen[0]["id"] != r.seen[1]["id"]


async def test_an_expired_answer_is_refused(receiver: Callable[[Answer], Receiver]) -> None:
    r = receiver(lambda doc, body, sig: answer_for(doc, expires_at=int(time.time()) - 5))
    verdict = await WebhookApprovals(r.url, KEY, timeout=10).ask(REQUEST)
    assert not verdict.approved
    assert verdict.reason == "the answer has expired"
    # an answer arriving after the request's own expiry (warden's clock says so) is refused too
    late = receiver(lambda doc, body, sig: answer_for(doc))
    times = iter([1000.0, 1000.0 + 11])
    verdict = await WebhookApprovals(late.url, KEY, timeout=10, clock=lambda: next(times)).ask(REQUEST)
    assert not verdict.approved
    assert verdict.reason == "the answer has expired"


async def test_a_wrong_or_missing_signature_is_refused(receiver: Callable[[Answer], Receiver]) -> None:
    r = receiver(lambda doc, body, sig: answer_for(doc, key=b"x" * 32))
    assert (await WebhookApprovals(r.url, KEY, timeout=10).ask(REQUEST)).reason == \
        "the answer's signature is not valid"
    unsigned = receiver(lambda doc, body, sig: (200, answer_for(doc)[1], None))
    assert not (await WebhookApprovals(unsigned.url, KEY, timeout=10).ask(REQUEST)).approved
    # the request echoed back with its own (valid, request-direction) signature is not an answer
    echo = receiver(lambda doc, body, sig: (200, body, sig))
    assert (await WebhookApprovals(echo.url, KEY, timeout=10).ask(REQUEST)).reason == \
        "the answer's signature is not valid"


async def test_the_receiver_down_is_a_refusal() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connection refused
        verdict = await WebhookApprovals(f"http://127.0.0.1:{port}/x", KEY, timeout=10).ask(REQUEST)
    assert not verdict.approved
    assert verdict.reason == "the approval webhook could not be reached (ConnectError)"


async def test_every_other_failure_is_a_refusal(receiver: Callable[[Answer], Receiver]) -> None:
    cases: list[tuple[Answer, str]] = [
        (lambda doc, body, sig: (500, b"oops", None), "the approval webhook answered HTTP 500"),
        (lambda doc, body, sig: answer_for(doc, arguments_digest="sha256:" + "0" * 64),
         "the answer approves other arguments than this call's"),
        (lambda doc, body, sig: answer_for(doc, type="warden.approval.request"),
         "the answer is not a warden.approval.answer (version 1)"),
        (lambda doc, body, sig: (200, b"not json", sign_approval(KEY, ANSWER_DOMAIN, b"not json")),
         "the answer is not JSON"),
        (lambda doc, body, sig: (200, b"x" * 70_000, None), "the answer is larger than 65536 bytes"),
    ]
    for answer, why in cases:
        r = receiver(answer)
        verdict = await WebhookApprovals(r.url, KEY, timeout=10).ask(REQUEST)
        assert (verdict.approved, verdict.reason) == (False, why)


async def test_no_answer_in_time_is_a_refusal(receiver: Callable[[Answer], Receiver]) -> None:
    def slow(doc: dict[str, Any], body: bytes, sig: str) -> tuple[int, bytes, str | None]:
        time.sleep(3)
        return answer_for(doc)

    r = receiver(slow)
    verdict = await WebhookApprovals(r.url, KEY, timeout=0.5).ask(REQUEST)
    assert not verdict.approved
    assert verdict.reason in ("no answer within 0.5 s", "the approval webhook could not be reached (ReadTimeout)")


def test_the_key_is_never_shown_and_must_be_long() -> None:
    assert "k" * 32 not in repr(WebhookApprovals("https://x.example/", KEY))
    with pytest.raises(ValueError, match="at least 16 bytes"):
        WebhookApprovals("https://x.example/", b"short")


# -- through warden run ------------------------------------------------------------------------------------------

FLOW_SERVER = [PYTHON, str(Path(__file__).parent.parent / "fixtures" / "flow_server.py")]


def approvals(url: str) -> str:
    return f'\n[approvals]\nwebhook = "{url}"\nsecret = "${{secret:APPROVALS_KEY}}"\ntimeout_seconds = 30\n'


def set_key() -> None:
    out = subprocess.run([WARDEN, "secrets", "set", "APPROVALS_KEY"], input=KEY.decode(), capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHON_KEYRING_BACKEND":
                                                     "keyring.backends.fail.Keyring"})
    assert out.returncode == 0, out.stderr


def audit_json() -> list[dict[str, Any]]:
    out = subprocess.run([WARDEN, "audit", "show", "--json"], capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


async def call_through_warden(tmp_path: Path, extra: str, calls: list[tuple[str, dict[str, Any]]],
                              log: Path) -> list[dict[str, Any]]:
    write_config(tmp_path, extra=extra)
    set_key()
    host = await RawHost.start(through_warden([*FLOW_SERVER, "--log", str(log)], "--name", "mail"))
    await host.initialize()  # no elicitation: nobody can be asked in-band
    await host.request(1, "tools/list")
    await host.response(1)
    answers = [await host.call(i + 2, tool, args) for i, (tool, args) in enumerate(calls)]
    assert await host.close() == 0
    return answers  # type: ignore[return-value]


async def test_through_warden_a_confirm_rule_goes_to_the_webhook(tmp_path: Path,
                                                                  receiver: Callable[[Answer], Receiver]) -> None:
    decisions = iter(["approve", "deny"])
    r = receiver(lambda doc, body, sig: answer_for(doc, next(decisions)))
    log = tmp_path / "sent.jsonl"
    extra = '[servers.mail.tools]\nconfirm = ["send_email"]\n' + approvals(r.url)
    approved, denied = await call_through_warden(tmp_path, extra, [("send_email", ARGS), ("send_email", ARGS)], log)
    assert approved["result"]["content"][0]["text"] == "sent"
    assert "was not approved: a human denied it through the approval webhook" in denied["error"]["message"]
    assert len(log.read_text().splitlines()) == 1  # the denied call never reached the server
    assert r.seen[0]["arguments_digest"] == arguments_digest(ARGS)
    assert r.bad_signatures == 0
    decided = [d for d in audit_json() if d["event"] == "call.decided"]
    assert [(d["decision"], d.get("consent")) for d in decided] == [("allow", "webhook"), ("deny", None)]


async def test_through_warden_a_flow_violation_asks_the_webhook_naming_the_source(
        tmp_path: Path, receiver: Callable[[Answer], Receiver]) -> None:
    r = receiver(lambda doc, body, sig: answer_for(doc))
    log = tmp_path / "sent.jsonl"
    extra = '[defaults.flow]\nsources = ["fetch"]\nsinks = ["send_email"]\non_violation = "confirm"\n' + \
        approvals(r.url)
    _, sent = await call_through_warden(tmp_path, extra, [("fetch", {"url": "https://e.example/"}),
                                                          ("send_email", ARGS)], log)
    assert sent["result"]["content"][0]["text"] == "sent"
    assert "mail/fetch (audit record #" in r.seen[0]["reason"]
    decided = [d for d in audit_json() if d["event"] == "call.decided"]
    fetch, email = decided
    assert email["consent"] == "webhook"
    assert email["evidence_index"] == fetch["index"]


async def test_through_warden_a_missing_key_refuses_to_run(tmp_path: Path) -> None:
    write_config(tmp_path, extra=approvals("http://127.0.0.1:9/x"))
    out = subprocess.run(through_warden([*FLOW_SERVER]), capture_output=True, text=True, timeout=60, input="")
    assert out.returncode != 0
    assert "there is no secret 'APPROVALS_KEY'" in out.stderr
    assert "warden secrets set APPROVALS_KEY" in out.stderr


def test_the_config_names_the_key_never_holds_it(tmp_path: Path) -> None:
    from tests.policy.helpers import write
    from warden.errors import ConfigError
    from warden.policy import load_policy_file
    bad = write(tmp_path / "c.toml", '[approvals]\nwebhook = "http://example.com/x"\nsecret = "literal-key-123"\n')
    with pytest.raises(ConfigError) as err:
        load_policy_file(bad)
    assert f"{bad}:2: approvals.webhook" in err.value.message
    assert "http on loopback only" in err.value.message
    assert f"{bad}:3: approvals.secret" in err.value.message
    assert "never written here" in err.value.message
    assert "literal-key-123" not in err.value.message


def test_the_signature_is_hmac_sha256_over_domain_and_body() -> None:
    body = b'{"a":1}'
    expected = hmac.new(KEY, b"warden-approval-answer\n" + body, hashlib.sha256).hexdigest()
    assert sign_approval(KEY, ANSWER_DOMAIN, body) == f"v1={expected}"
    assert sign_approval(KEY, REQUEST_DOMAIN, body) != sign_approval(KEY, ANSWER_DOMAIN, body)


# -- the answer parser, on anything a receiver can send (no sockets: httpx's MockTransport carries the bytes) -----

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                      max_size=4), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(status=st.sampled_from([200, 200, 201, 302, 400, 500]), fields=st.dictionaries(
    st.sampled_from(["type", "version", "id", "decision", "arguments_digest", "expires_at", "by"]), json_values),
    keep=st.sets(st.sampled_from(["type", "version", "id", "digest", "expiry", "decision"])),
    signed=st.sampled_from(["right", "wrong", "none", "request"]), raw=st.none() | st.binary(max_size=64))
async def test_only_a_signed_answer_to_this_request_approves(status: int, fields: dict[str, Any], keep: set[str],
                                                             signed: str, raw: bytes | None) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        doc = json.loads(request.content)
        answer: dict[str, Any] = dict(fields)
        truth = {"type": ("type", "warden.approval.answer"), "version": ("version", 1), "id": ("id", doc["id"]),
                 "digest": ("arguments_digest", doc["arguments_digest"]),
                 "expiry": ("expires_at", doc["expires_at"]), "decision": ("decision", "approve")}
        for name in keep:
            key, value = truth[name]
            answer[key] = value
        body = raw if raw is not None else json.dumps(answer).encode()
        sig = {"right": sign_approval(KEY, ANSWER_DOMAIN, body), "wrong": sign_approval(b"y" * 32, ANSWER_DOMAIN,
                                                                                         body),
               "request": sign_approval(KEY, REQUEST_DOMAIN, body), "none": None}[signed]
        return httpx.Response(status, content=body, headers={"X-Warden-Signature": sig} if sig else {})

    channel = WebhookApprovals("http://127.0.0.1:1/x", KEY, timeout=10, transport=httpx.MockTransport(handler))
    verdict = await channel.ask(REQUEST)
    should = status == 200 and signed == "right" and raw is None and keep == {"type", "version", "id", "digest",
                                                                                "expiry", "decision"}
    assert verdict.approved == should
