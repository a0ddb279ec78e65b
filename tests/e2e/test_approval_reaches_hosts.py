"""Issue 10 item 5, gateway side, through a real ``warden run`` and the Python SDK client: while entries wait, the
host is told which command approves them (a ``notifications/message`` and a line in the instructions); an approval
made by another process (``warden pins approve``) reaches the connected host as ``notifications/tools/list_changed``
without the host asking, and its next list shows the tool."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mcp.types as t
import trio
from mcp import Client, StdioServerParameters

from tests.e2e import test_pins_through_warden as pins_e2e
from tests.support import FIXTURES, PYTHON, WARDEN

control = pins_e2e.control  # the rug-pull server's control file (a fixture)
BASE_TOOL, ISOLATION, pins, set_control = pins_e2e.BASE_TOOL, pins_e2e.ISOLATION, pins_e2e.pins, pins_e2e.set_control


async def test_waiting_entries_are_announced_and_an_approval_elsewhere_sends_list_changed(control: Path) -> None:
    """covers: MS27 (a host hears of list changes) — here the change is an approval made in another process."""
    set_control(control, tools=[BASE_TOOL])
    changed = trio.Event()
    logged: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, t.ToolListChangedNotification):
            changed.set()

    async def on_log(params: t.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)

    argv = [WARDEN, "run", "--name", "rug", "--", PYTHON, str(FIXTURES / "rugpull_server.py"), str(control)]
    env = {k: os.environ[k] for k in ISOLATION if k in os.environ}
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:], env=env), mode="legacy",
                      message_handler=on_message, logging_callback=on_log) as client:
        assert (await client.list_tools()).tools == []
        notice = "run `warden pins review rug` in a terminal"
        assert any(notice in str(data) for data in logged), logged
        approved = await trio.to_thread.run_sync(lambda: pins("approve", "rug", "--yes"))
        assert approved.returncode == 0, approved.stderr
        with trio.fail_after(30):
            await changed.wait()  # nobody asked: the approval itself reached the host
        assert [tool.name for tool in (await client.list_tools()).tools] == ["add"]
    # A second host that connects while nothing waits sees no notice in its instructions.
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:], env=env), mode="legacy") as client:
        assert "warden pins review" not in (client.instructions or "")


async def test_instructions_name_the_review_command_while_entries_wait(control: Path) -> None:
    argv = [WARDEN, "run", "--name", "rug", "--", PYTHON, str(FIXTURES / "rugpull_server.py"), str(control)]
    env = {k: os.environ[k] for k in ISOLATION if k in os.environ}
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:], env=env), mode="legacy") as client:
        await client.list_tools()  # the tool is now pending in the store
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:], env=env), mode="legacy") as client:
        assert "warden pins review rug" in (client.instructions or "")
