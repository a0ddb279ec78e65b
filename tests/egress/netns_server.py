"""A test host for the egress tests, run inside a test network namespace: ``netns_server.py ADDRESS PORT [tls]``
or ``netns_server.py ADDRESS PORT https CERT KEY LOG`` (an HTTPS API host: every request line goes to LOG, every
answer is an empty GitHub-style search result).

Plain HTTP: ``/small`` (a short page), ``/big`` (10 MB), anything else echoes the request line and headers it got
(so a test sees exactly what the proxy forwarded). With ``tls`` it accepts TCP and answers each connection's first
bytes with a line saying how many it got (the proxy's SNI check runs before any byte arrives here). Prints ``ready``
once listening. Stdlib only.
"""

import socket
import sys
import threading

BIG = b"x" * (10 * 1024 * 1024)


def serve_http(conn: socket.socket) -> None:
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0]
        target = head.split(b" ")[1] if b" " in head else b""
        if target.startswith(b"http://"):  # absolute-form from a plain relay (bench/egress.py's bare relay)
            target = b"/" + target[len(b"http://"):].partition(b"/")[2]
        if target == b"/big":
            body, kind = BIG, b"application/octet-stream"
        elif target == b"/small":
            body, kind = b"<html><body><p>hello from the egress test host</p></body></html>", b"text/html"
        else:
            body, kind = b"ECHO\n" + head + b"\n", b"text/plain"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\nConnection: keep-alive\r\n\r\n" + body)


def serve_raw(conn: socket.socket) -> None:
    with conn:
        data = conn.recv(65536)
        conn.sendall(b"GOT %d\n" % len(data))


def https_handler(cert: str, key: str, log: str):  # type: ignore[no-untyped-def]
    import json
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    lock = threading.Lock()

    def serve(conn: socket.socket) -> None:
        try:
            tls = context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        with tls:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = tls.recv(65536)
                if not chunk:
                    return
                data += chunk
            with lock, open(log, "ab") as out:
                out.write(data.split(b"\r\n", 1)[0] + b"\n")
            body = json.dumps({"total_count": 0, "incomplete_results": False, "items": []}).encode()
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: " +
                        str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    return serve


def main() -> None:
    address, port = sys.argv[1], int(sys.argv[2])
    if sys.argv[3:4] == ["https"]:
        handler = https_handler(*sys.argv[4:7])
    else:
        handler = serve_raw if sys.argv[3:4] == ["tls"] else serve_http
    listener = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handler, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
