"""`make demo`: warden's main job on a built-in default.

A real MCP server (scripts/demo_server.py) runs behind `warden run`; the official Python SDK client lists its tools,
calls one, and asks the server what it can see of the machine.
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
console = Console(width=120)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="warden-demo-") as tmp:
        state = Path(tmp) / "state"
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        server = [str(BIN / "python"), str(ROOT / "scripts" / "demo_server.py")]
        warden = [str(BIN / "warden"), "--state-dir", str(state), "run", "--name", "demo", "--", *server]
        console.rule("[bold]warden demo")
        console.print(f"host command: [cyan]{' '.join(warden)}[/cyan]")
        async with Client(StdioServerParameters(command=warden[0], args=warden[1:]), mode="auto") as client:
            console.print(f"negotiated with warden: protocol {client.protocol_version}")
            tools = await client.list_tools()
            console.print("tools:", ", ".join(t.name for t in tools.tools))
            result = await client.call_tool("add", {"a": 2, "b": 3})
            console.print(f"add(2, 3) -> [bold green]{result.content[0].text}[/bold green]")  # type: ignore[union-attr]
            seen = await client.call_tool("look_around", {"port": port})
            report = seen.structured_content or json.loads(seen.content[0].text)  # type: ignore[union-attr]
        listener.close()
        table = Table(title="what the server could see")
        table.add_column("probe")
        table.add_column("inside warden's sandbox")
        for key, value in report.items():
            table.add_row(key, json.dumps(value) if not isinstance(value, str) else value)
        console.print(table)


if __name__ == "__main__":
    anyio.run(main, backend="trio")
