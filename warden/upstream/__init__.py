"""One connection to a real MCP server: era probe, handshake, paging, timeouts, cancellation, restart."""

__all__: list[str] = []  # nothing is re-exported here: import the module that does the job
