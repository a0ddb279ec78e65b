"""Sans-IO MCP/JSON-RPC: framing, message classes, eras and the probe state machine, header encoding and
validation. No trio, no sockets, no clock, no environment: bytes in, events and decisions out."""
