"""The floor for warden's overhead: a bare trio relay written for the bench. It starts ``argv`` and copies bytes both
ways (``receive_some`` -> ``send_all``) with no framing, parsing or policy. Whatever warden adds beyond this row is
warden's own cost; this row's cost over direct is what any trio process in the middle pays.

    python bench/servers/trio_relay.py CMD ARGS...
"""

from __future__ import annotations

import subprocess
import sys

import trio


async def pump(source: trio.abc.ReceiveStream, sink: trio.abc.SendStream) -> None:
    while data := await source.receive_some(256 * 1024):
        await sink.send_all(data)
    await sink.aclose()


async def main(argv: list[str]) -> None:
    stdin = trio.lowlevel.FdStream(sys.stdin.fileno())
    stdout = trio.lowlevel.FdStream(sys.stdout.fileno())
    async with trio.open_nursery() as nursery:
        process = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert process.stdin is not None
        assert process.stdout is not None
        nursery.start_soon(pump, stdin, process.stdin)
        await pump(process.stdout, stdout)
        nursery.cancel_scope.cancel()
    await process.wait()


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
