"""Run inside an egress sandbox (``python3 -I -c``, stdlib only): what a hostile server would try, as JSON.

argv: SERVER_IP PORT. Each attempt records the errno it got (or what came back).
"""

import json
import os
import socket
import sys


def attempt(fn):  # type: ignore[no-untyped-def]
    try:
        return {"ok": fn()}
    except OSError as exc:
        return {"errno": exc.errno}


def tcp(address, port):  # type: ignore[no-untyped-def]
    with socket.create_connection((address, port), timeout=5):
        return "connected"


def udp(address, port):  # type: ignore[no-untyped-def]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        return sock.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03web\x04test\x00\x00\x01\x00\x01",
                           (address, port))


def resolve(name):  # type: ignore[no-untyped-def]
    try:
        return {"ok": socket.getaddrinfo(name, 80)[0][4][0]}
    except socket.gaierror as exc:
        return {"gaierror": exc.errno}


def proxy(request):  # type: ignore[no-untyped-def]
    with socket.create_connection(("127.0.0.1", 3128), timeout=30) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out.split(b"\r\n", 1)[0].decode()


def unix():  # type: ignore[no-untyped-def]
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    return "created"


server, port = sys.argv[1], int(sys.argv[2])
print(json.dumps({
    "env": {k: v for k, v in os.environ.items() if "proxy" in k.lower()},
    "tcp": attempt(lambda: tcp(server, port)),
    "udp": attempt(lambda: udp(server, 53)),
    "udp_gateway": attempt(lambda: udp(server.rsplit(".", 1)[0] + ".1", 53)),
    "dns": resolve("web.test"),
    "unix": attempt(unix),
    "ipv6": attempt(lambda: tcp("2001:db8::1", 443)),
    "via_proxy": attempt(lambda: proxy(f"GET http://web.test:{port}/small HTTP/1.1\r\n\r\n".encode())),
    "connect_own_port": attempt(lambda: proxy(b"CONNECT 127.0.0.1:3128 HTTP/1.1\r\n\r\n")),
    "connect_by_name": attempt(lambda: proxy(b"CONNECT localhost:3128 HTTP/1.1\r\n\r\n")),
}))
