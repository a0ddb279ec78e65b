"""trio I/O towards servers and hosts, without protocol decisions: a message channel over byte streams (a child's
pipes, warden's own stdin/stdout), and the HTTP upstream client (``http_config`` checks its settings,
``http_exchange`` makes each bounded exchange with the server's origin, ``http_client`` carries the session over
Streamable HTTP and the 2024-11-05 HTTP+SSE transport).

The faces hosts talk to (``warden.gateway.stdio``, ``warden.gateway.http``) are not here: each one drives the
gateway per request (its own session engine, request tasks, the HTTP face's sessions and streams), so they live
with the gateway, and use this package's channel and ``warden.protocol`` for bytes and framing."""

__all__: list[str] = []  # nothing is re-exported here: import the module that does the job
