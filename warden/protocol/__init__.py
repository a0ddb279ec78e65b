"""Sans-IO MCP/JSON-RPC: framing, message classes, eras and the probe state machine, header encoding and
validation. No trio, no sockets, no clock, no environment: bytes in, events and decisions out."""

__all__: list[str] = []  # nothing is re-exported here: import the module that does the job
