"""Whether a host (a name or an address, IPv6 bracketed or not) is this machine's loopback.

One answer for every place that asks: the HTTP face (``--no-auth`` is allowed only on loopback, and loopback
``Host`` names are accepted without ``--allow-host``) and the HTTP client (credentials may cross plain ``http://``
only to loopback). ``localhost`` counts with or without its trailing root dot; any other name does not, since
what it resolves to is not this function's to know.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` / ``localhost.`` and any loopback address (``127.0.0.0/8``, ``::1``)."""
    name = host.strip("[]").lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
