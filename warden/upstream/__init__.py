"""One connection to a real MCP server: era probe, handshake, paging, timeouts, cancellation, restart."""
