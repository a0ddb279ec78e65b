"""The smallest legacy MCP server that answers tools/call: to show warden's own ceiling, not a server's.

It parses each line with the stdlib and answers at once; ``server/discover`` gets -32601, like most legacy servers.
"""

import json
import sys

TOOLS = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}


def main() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        mid = msg.get("id")
        if mid is None:
            continue
        method = msg.get("method")
        if method == "tools/call":
            text = msg["params"].get("arguments", {}).get("text", "")
            reply = {"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}}
        elif method == "initialize":
            reply = {"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw-echo", "version": "1"}}}
        elif method == "tools/list":
            reply = {"jsonrpc": "2.0", "id": mid, "result": TOOLS}
        else:
            reply = {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
