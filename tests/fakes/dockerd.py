"""A stand-in Docker engine on a unix socket: it answers `GET /_ping` with 200 and anything else with 404.

Enough for the SDK-free ping (`gb300lane.runtime.dockerhost`); the SDK itself gets no usable answer from it.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    requests: list[str]


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        line = self.rfile.readline()
        self.server.requests.append(line.decode())
        ok = line.startswith(b"GET /_ping ")
        self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nOK" if ok else
                         b"HTTP/1.0 404 Not Found\r\nContent-Length: 2\r\n\r\nno")  # fmt: skip


@contextmanager
def ping_only_engine(sock: Path) -> Iterator[list[str]]:
    """Serve on `sock` until the block ends; yields the request lines received, in order."""
    server = _Server(str(sock), _Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.requests
    finally:
        server.shutdown()
        server.server_close()
