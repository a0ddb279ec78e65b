"""The demo's MCP server (on the official Python SDK): a real tool, and a tool that reports what the server can see
of the machine it runs on — which, behind warden, is the inside of its sandbox."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("warden-demo")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
def look_around(port: int = 0, secret: str = "") -> dict[str, object]:
    """Report the uid, environment, network reach, home directory and a host file this server sees."""
    reach = "not tried"
    if port:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                reach = f"connected to 127.0.0.1:{port}"
        except OSError as exc:
            reach = f"cannot connect to 127.0.0.1:{port}: {exc.strerror or exc}"
    home = Path(os.environ.get("HOME", "/"))
    try:
        seen_secret = f"read {Path(secret).read_text()!r}"
    except OSError as exc:
        seen_secret = f"cannot read {secret}: {exc.strerror or exc}"
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "env": sorted(os.environ),
        "network": reach,
        "home": str(home),
        "home_entries": sorted(p.name for p in home.iterdir())[:20] if home.is_dir() else [],
        "secret_file": seen_secret,
        "python": sys.executable,
    }


if __name__ == "__main__":
    mcp.run()
