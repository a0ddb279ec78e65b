"""Issue 10 item 5, with several hosts at once (real ``warden run`` processes, the Python SDK client): while the
rug-pull fixture's entries wait, every connected host is told the command that reviews them, in a
``notifications/message`` and in its instructions; an approval made by another host, in band, reaches *every*
connected host as ``notifications/tools/list_changed`` without their asking, and their next list shows the tool."""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import mcp.types as t
import trio
from mcp import Client, StdioServerParameters

from tests.e2e.test_pins_through_warden import ISOLATION, control
from tests.support import FIXTURES, PYTHON, WARDEN

__all__ = ["control"]  # the rug-pull server's control file (a fixture)

NOTICE = "run `warden pins review rug` in a terminal"


def params(control: Path) -> StdioServerParameters:
    argv = [WARDEN, "run", "--name", "rug", "--", PYTHON, str(FIXTURES / "rugpull_server.py"), str(control)]
    return StdioServerParameters(command=argv[0], args=argv[1:],
                                 env={k: os.environ[k] for k in ISOLATION if k in os.environ})


async def test_an_in_band_approval_by_one_host_reaches_every_connected_host(control: Path) -> None:
    changed = [trio.Event(), trio.Event()]
    logged: list[list[Any]] = [[], []]

    def handlers(i: int) -> dict[str, Any]:
        async def on_message(message: Any) -> None:
            if isinstance(message, t.ToolListChangedNotification):
                changed[i].set()

        async def on_log(p: t.LoggingMessageNotificationParams) -> None:
            logged[i].append(p.data)

        return {"message_handler": on_message, "logging_callback": on_log}

    async def approve(context: Any, p: t.ElicitRequestParams) -> t.ElicitResult:
        return t.ElicitResult(action="accept", content={"approve": True})

    async with AsyncExitStack() as stack:
        watchers = [await stack.enter_async_context(Client(params(control), mode="legacy", **handlers(i)))
                    for i in range(2)]
        for watcher in watchers:
            assert (await watcher.list_tools()).tools == []
        for i in range(2):
            assert any(NOTICE in str(data) for data in logged[i]), logged[i]
        late = await stack.enter_async_context(Client(params(control), mode="legacy"))
        assert NOTICE in (late.instructions or "")  # a host that connects while entries wait reads it there too
        async with Client(params(control), mode="legacy", elicitation_callback=approve) as approver:
            assert [tool.name for tool in (await approver.list_tools()).tools] == ["add"]
        with trio.fail_after(30):
            for event in changed:
                await event.wait()  # nobody asked: the approval itself reached both hosts
        for watcher in watchers:
            assert [tool.name for tool in (await watcher.list_tools()).tools] == ["add"]
