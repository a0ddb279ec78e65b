"""Open a page in Debian's headless ``chromium`` and watch it through the DevTools protocol over a pipe.

``--remote-debugging-pipe`` makes Chromium read DevTools commands from fd 3 and write answers and events to fd 4
(JSON messages ended by a NUL byte), so no port and no WebSocket library is needed. What the tests read from it:

* every request the page makes (``Network.requestWillBeSent``): a self-contained report makes exactly one, for
  itself;
* every console error, uncaught exception and browser log error (CSP violations land there);
* the rendered text (``document.body.innerText``), what the DOM holds, and a PNG screenshot of the whole page.

Chromium itself also phones home (network time, component updates, sign-in) whatever the flags say, so it runs
with a proxy on 127.0.0.1 that answers nothing and a resolver that resolves nothing: not one of its connections
leaves the machine. Those are the browser's requests, not the page's, and DevTools tells them apart.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-bypass-list=<-loopback>"]


@dataclass
class PageVisit:
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    text: str = ""
    scripts: int = 0
    screenshot: bytes = b""
    proxy_connections: int = 0
    value: Any = None
    """What the ``evaluate`` expression gave, on the loaded page."""


class _Sink:
    """A proxy that accepts connections, counts them, and closes them: nothing gets through it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()


class _DevTools:
    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.w, self.r = write_fd, read_fd
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer over DevTools")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self.buffer += chunk
        raw, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(raw)  # type: ignore[no-any-return]

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 60) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"DevTools {method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 60) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event


def visit(url: str, profile: Path, *, width: int = 1280, height: int = 1600, evaluate: str | None = None) -> PageVisit:
    """Load ``url`` in a fresh headless Chromium (``profile`` is its new user-data-dir) and report what happened
    (``evaluate``: a JavaScript expression run on the loaded page, such as where an element was laid out)."""
    assert CHROMIUM is not None
    sink = _Sink()
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()
    argv = [CHROMIUM, *FLAGS, f"--proxy-server=http://127.0.0.1:{sink.port}", f"--user-data-dir={profile}",
            f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"]

    def child_fds() -> None:  # the pipe protocol wants them as fd 3 (commands in) and fd 4 (answers out)
        os.dup2(to_chrome_r, 3)
        os.dup2(from_chrome_w, 4)
        os.closerange(5, 1024)  # nothing else of ours reaches the browser

    # close_fds would run after preexec_fn and close 3 and 4 again; the child closes the rest itself
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            close_fds=False, preexec_fn=child_fds)
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    dev = _DevTools(to_chrome_w, from_chrome_r)
    out = PageVisit()
    try:
        targets = dev.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        session = dev.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            dev.call(f"{domain}.enable", session=session)
        dev.events.clear()  # what about:blank did is not the page's
        dev.call("Page.navigate", {"url": url}, session=session)
        dev.wait_event("Page.loadEventFired")
        text = dev.call("Runtime.evaluate", {"expression": "document.body.innerText", "returnByValue": True},
                        session=session)
        out.text = text["result"]["value"]
        scripts = dev.call("Runtime.evaluate", {"expression": "document.querySelectorAll('script').length",
                                                "returnByValue": True}, session=session)
        out.scripts = scripts["result"]["value"]
        if evaluate is not None:
            out.value = dev.call("Runtime.evaluate", {"expression": evaluate, "returnByValue": True},
                                 session=session)["result"].get("value")
        shot = dev.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                        session=session)
        out.screenshot = base64.b64decode(shot["data"])
        time.sleep(0.5)  # let late console or network events arrive
        dev.call("Runtime.evaluate", {"expression": "1"}, session=session)
        for event in dev.events:
            method, params = event.get("method"), event.get("params", {})
            if event.get("sessionId") != session:
                continue
            if method == "Network.requestWillBeSent":
                out.requests.append(params["request"]["url"])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                out.errors.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                         for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                out.errors.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:300])
            elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
                out.errors.append(f"log: {params['entry'].get('text')}")
        with contextlib.suppress(EOFError, TimeoutError, RuntimeError):
            dev.call("Browser.close", timeout=10)
    finally:
        os.close(to_chrome_w)
        os.close(from_chrome_r)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        sink.close()
    out.proxy_connections = sink.connections
    return out
