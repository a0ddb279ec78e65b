"""`make demo`: warden's main job on a built-in default.

A real MCP server (scripts/demo_server.py, on the official Python SDK) runs behind `warden run`, inside warden's
bubblewrap sandbox. The official Python SDK client plays the host:

1. first contact: the server is new, so warden shows none of its tools (they wait for a human);
2. `warden pins approve demo` (what a user runs in a terminal after reviewing `warden pins diff demo`);
3. the host lists the tools, calls one, and asks the server what it can see of the machine;
4. `warden audit verify` checks the tamper-evident log of all of it, and the signed checkpoint is printed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
WARDEN = str(BIN / "warden")
console = Console(width=120, highlight=False)


def warden(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([WARDEN, *args], capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        console.print(done.stdout, done.stderr)
        raise SystemExit(f"warden {' '.join(args)} failed with status {done.returncode}")
    return done.stdout


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="warden-demo-") as tmp:
        env = dict(os.environ, WARDEN_STATE_DIR=str(Path(tmp) / "state"),
                   WARDEN_CONFIG=str(Path(tmp) / "no-config.toml"))
        secret = Path(tmp) / "secret.txt"
        secret.write_text("the host's secret")
        os.environ["DEMO_SECRET_TOKEN"] = "sk-not-for-the-server"  # noqa: S105 - a stand-in the server must not see
        env["DEMO_SECRET_TOKEN"] = os.environ["DEMO_SECRET_TOKEN"]
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        server = [str(BIN / "python"), str(ROOT / "scripts" / "demo_server.py")]
        command = [WARDEN, "run", "--name", "demo", "--", *server]
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)

        console.rule("[bold]warden demo")
        console.print(f"The host starts: [cyan]{' '.join(command)}[/cyan]\n")

        console.rule("1. first contact")
        async with Client(params, mode="auto") as client:
            tools = await client.list_tools()
            console.print(f"protocol {client.protocol_version}; tools the host sees: {[t.name for t in tools.tools]}")
        console.print("The server is new: its tools wait for a human. What warden pinned:\n")
        console.print(warden("pins", "list", "demo", env=env))

        console.rule("2. a human approves")
        console.print("$ warden pins approve demo --yes")
        console.print(warden("pins", "approve", "demo", "--yes", env=env))

        console.rule("3. the host uses the server, sandboxed")
        async with Client(params, mode="auto") as client:
            tools = await client.list_tools()
            console.print("tools:", ", ".join(t.name for t in tools.tools))
            result = await client.call_tool("add", {"a": 2, "b": 3})
            console.print(f"add(2, 3) -> [bold green]{result.content[0].text}[/bold green]")  # type: ignore[union-attr]
            seen = await client.call_tool("look_around", {"port": port, "secret": str(secret)})
            report = seen.structured_content or json.loads(seen.content[0].text)  # type: ignore[union-attr]
        listener.close()
        table = Table(title="what the server could see of this machine")
        table.add_column("probe")
        table.add_column(f"warden (uid {os.getuid()}) outside", overflow="fold")
        table.add_column("the server inside its sandbox", overflow="fold")
        outside = {"uid": os.getuid(), "env": f"{len(os.environ)} variables, DEMO_SECRET_TOKEN among them",
                   "network": f"a listener on 127.0.0.1:{port}", "secret_file": f"{secret} holds the host's secret"}
        for key, value in report.items():
            table.add_row(key, str(outside.get(key, "")), json.dumps(value) if not isinstance(value, str) else value)
        console.print(table)

        console.rule("4. the audit log")
        console.print("$ warden audit show")
        console.print(warden("audit", "show", env=env))
        console.print("$ warden audit verify")
        console.print(warden("audit", "verify", env=env))
        console.print("$ warden audit checkpoint   (hand this to a witness, or keep it elsewhere)")
        console.print(warden("audit", "checkpoint", env=env))


if __name__ == "__main__":
    anyio.run(main, backend="trio")
