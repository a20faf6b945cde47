"""Free TCP ports for tests and benchmarks that start servers.

A port is taken from below Linux's default ephemeral range (32768-60999), so an
outgoing connection cannot be handed it between the check and the server's
bind; each pytest-xdist worker draws from its own block, and one process never
hands out the same port twice, so parallel tests do not collide.
"""

from __future__ import annotations

import os
import random
import socket

_LOW, _HIGH = 20000, 32000
#: The shipped recipes' own ports (v*: 30006/30007, local-*: 30106/30107) and their neighbours: never handed out,
#: so a test on free ports cannot take a port a test of the default lane (the README walkthrough) needs.
_RESERVED = range(30000, 30200)
_BLOCKS = 8
_handed: set[int] = set()


def _block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (_HIGH - _LOW) // _BLOCKS
    start = _LOW + (index % _BLOCKS) * size
    return range(start, start + size)


def _bindable(port: int) -> bool:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "0.0.0.0")):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def free_port() -> int:
    """A port nothing listens on now and that this process has not handed out before."""
    block = _block()
    offset = random.randrange(len(block))
    for i in range(len(block)):
        port = block[(offset + i) % len(block)]
        if port not in _handed and port not in _RESERVED and _bindable(port):
            _handed.add(port)
            return port
    raise RuntimeError(f"no free TCP port in {block.start}-{block.stop - 1}")
