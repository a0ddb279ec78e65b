"""trio I/O: stdio child pipes, the stdio server face, Streamable HTTP client and server."""
