"""A trivial tool on the official Python SDK (mcp 2.3.0), over stdio."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("py-echo")


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


if __name__ == "__main__":
    mcp.run()
