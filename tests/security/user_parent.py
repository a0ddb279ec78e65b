"""Run one server through warden's production launcher, as whatever user this process is. For the tests that
need an *unprivileged* warden on a root machine (the harness starts it with setpriv under /usr/bin/python3,
because the project's venv interpreter lives under /root, which that user cannot reach).

Input (stdin, or the file named by the first argument; JSON): {"settings": {...}, "argv": [...],
"env": {...}, "cwd": str|null, "state_dir": str, "stdin": str, "timeout": float, "host_env": {...}}.
Output (stdout, JSON): {"rc", "stdout", "stderr", "timed_out", "stop_reason"}, or
{"error": {"type", "message", "hint"}} when warden refused to start the server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from warden.errors import WardenError
from warden.launcher import LaunchSpec
from warden.sandbox import SandboxSettings, make_launcher

_CAP = 4 * 1024 * 1024


async def _drain(stream: trio.abc.ReceiveStream, sink: bytearray) -> None:
    while chunk := await stream.receive_some(65536):
        if len(sink) < _CAP:
            sink += chunk


async def main(job: dict) -> dict:
    launcher = make_launcher(SandboxSettings.model_validate(job["settings"]), state_dir=Path(job["state_dir"]),
                             host_env=job.get("host_env"))
    spec = LaunchSpec(argv=tuple(job["argv"]), env=job.get("env", {}), cwd=job.get("cwd"))
    try:
        child = await launcher.launch(spec)
    except WardenError as exc:
        return {"error": {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}}
    out, err = bytearray(), bytearray()
    timed_out = False
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_drain, child.stdout, out)
        nursery.start_soon(_drain, child.stderr, err)
        await child.stdin.send_all(job.get("stdin", "").encode())
        await child.stdin.aclose()
        with trio.move_on_after(job.get("timeout", 60)) as scope:
            rc = await child.wait()
        if scope.cancelled_caught:
            timed_out = True
            child.kill()
            rc = await child.wait()
    return {"rc": rc, "stdout": out.decode("utf-8", "replace"), "stderr": err.decode("utf-8", "replace"),
            "timed_out": timed_out, "stop_reason": child.stop_reason}


if __name__ == "__main__":
    text = Path(sys.argv[1]).read_text() if len(sys.argv) > 1 else sys.stdin.read()
    result = trio.run(main, json.loads(text))
    sys.stdout.write(json.dumps(result) + "\n")
