"""An upstream warden stops for good (``warden serve`` retiring a server on reload) leaves nothing waiting on it:
a request that was waiting for a process, and any later one, ends at once with the reason, in virtual time
(``MockClock``), not after its timeout."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from tests.gateway_harness import MemoryConnector, ScriptedServer
from warden.errors import UpstreamClosed
from warden.upstream.connection import Upstream, UpstreamOptions


class _NoHandler:
    """What the upstream tells its gateway, ignored: nothing here is about the gateway."""

    async def on_notification(self, method: str, params: bytes | None) -> None: ...

    async def on_server_request(self, method: str, params: object) -> object: ...

    async def on_lifecycle(self, event: str, detail: str) -> None: ...


async def crashes_at_once(server: ScriptedServer) -> None:
    """A server that ends before it says anything, every time: no process ever becomes ready."""


async def test_a_request_waiting_on_an_upstream_stopped_for_good_ends_at_once(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    upstream = Upstream(name="gone", connector=MemoryConnector(crashes_at_once),
                        handler=_NoHandler(),  # type: ignore[arg-type]
                        options=UpstreamOptions(request_timeout=600.0, restart_backoff=30.0))
    ended: list[tuple[float, str]] = []

    async def ask() -> None:
        started = trio.current_time()
        with pytest.raises(UpstreamClosed) as raised:
            await upstream.request("tools/list", {})
        ended.append((trio.current_time() - started, raised.value.message))

    retired = trio.CancelScope()

    async def run() -> None:
        with retired:
            await upstream.run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        nursery.start_soon(run)
        await trio.sleep(5)  # the request waits for a process; the server keeps ending
        retired.cancel()
    [(waited, message)] = ended
    assert waited == pytest.approx(5.0)  # from the request to the server's retirement, not to its timeout
    assert message == "the server 'gone' was stopped by warden"
    with pytest.raises(UpstreamClosed):
        await upstream.request("tools/list", {})


async def test_a_server_that_ends_before_answering_initialize_is_restarted_until_it_is_marked_failed(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    """``command = "/bin/false"`` behind ``warden serve`` was marked failed at once, "initialize failed: the
    server exited" (warden's own answer to a request the dead process left, taken for the server refusing the
    protocol): a server that crashes once while starting was never started again. Now an end before the answer
    is a crash like any other: restarted with backoff, marked failed only past ``max_restarts`` quick ends."""
    upstream = Upstream(name="false", connector=MemoryConnector(crashes_at_once),
                        handler=_NoHandler(),  # type: ignore[arg-type]
                        options=UpstreamOptions(max_restarts=2, restart_backoff=1.0))
    upstream.set_legacy_capabilities({})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(upstream.run)
        with trio.fail_after(300):
            while upstream.state != "failed":
                await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    assert upstream.restarts == 2
    assert upstream.last_error is not None
    assert "ended 3 times in a row" in upstream.last_error
