"""The same trivial tool on the official Python SDK (mcp 2.3.0), over Streamable HTTP on 127.0.0.1:PORT/mcp."""

import sys

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("py-echo-http")


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


if __name__ == "__main__":
    mcp.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
