"""warden: run MCP servers untrusted.

Hosts talk to warden as if it were the MCP server; warden is the MCP client of every real server, which it starts
inside a sandbox, pins by hash, checks per request and records in a tamper-evident audit log.

The package is split by job (see DESIGN.md): ``protocol`` is sans-IO, ``transport`` does the I/O, ``upstream`` is
one connection to a real server, ``gateway`` is the face shown to hosts, and ``policy``, ``consent``, ``sandbox`` and
``audit`` enforce and record.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
