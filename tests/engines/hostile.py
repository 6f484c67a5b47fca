"""A misbehaving HTTP server on 127.0.0.1 for hardening tests: each mode is one way an engine can go wrong.

Modes: `hang` (accepts, reads the request, never answers), `trickle` (headers, then one body byte a second),
`endless` (a body that never ends, as fast as it can), `html` (a 502 page), `close` (headers promising a body,
then the connection closed), `rank500` (vLLM's rank error as a 500), `date` (503 with Retry-After as an HTTP
date, then 200), `stall` (accepts, never reads or speaks). Every connection is counted.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from email.utils import formatdate


class HostileServer:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.connections = 0
        self.requests: list[bytes] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._stop = threading.Event()
        self._open: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._serve, daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def stop(self) -> None:
        """Stop listening for good. close() alone would not: the acceptor thread blocked in accept() keeps the
        listening socket alive, and the port with it, and would answer the next connection that reaches it
        (a later test's). shutdown() wakes it first."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._acceptor.join(timeout=5)
        for conn in [self._sock, *self._open]:
            with contextlib.suppress(OSError):
                conn.close()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            rest += chunk
        self.requests.append(head + b"\r\n\r\n" + rest)
        return data

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self.mode == "stall":
                self._stop.wait(60)
                return
            self._read_request(conn)
            getattr(self, "_" + self.mode)(conn)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()

    def _hang(self, conn: socket.socket) -> None:
        self._stop.wait(60)

    def _trickle(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
        while not self._stop.is_set():
            conn.sendall(b" ")
            time.sleep(0.2)

    def _headdrip(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")  # the headers never end: one byte at a time
        while not self._stop.is_set():
            conn.sendall(b"x")
            time.sleep(0.2)

    def _endless(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        block = b"x" * 65536
        chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
        while not self._stop.is_set():
            conn.sendall(chunk)

    def _html(self, conn: socket.socket) -> None:
        body = b"<html><body><h1>502 Bad Gateway</h1>\n<hr>nginx</body></html>"
        conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body))
        conn.sendall(body)

    def _close(self, conn: socket.socket) -> None:
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"data": [')

    def _rank500(self, conn: socket.socket) -> None:
        body = b'{"error": {"message": "LoRA rank 64 is greater than max_lora_rank 16.", "type": "x", "code": 500}}'
        conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    def _date(self, conn: socket.socket) -> None:
        if len(self.requests) == 1:
            when = formatdate(time.time() + 1, usegmt=True)
            head = f"HTTP/1.1 503 Service Unavailable\r\nRetry-After: {when}\r\nContent-Length: 4\r\n\r\nbusy"
            conn.sendall(head.encode())
            return
        body = b'{"object": "list", "data": [{"id": "m", "parent": null}]}'
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        conn.sendall(body)
