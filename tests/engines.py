"""The embedded engine for tests: one way to run it in this process, on a free port, with the engine's own runner.

`running_engine(flags)` serves `EngineServer` from an event loop in a thread of its own (no interpreter to start,
the model already loaded in this process) and waits for /health; tests that are about the process boundary
(`python -m gb300lane.engine serve`, SIGTERM, the lane's runtimes) start it as a process instead.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from aiohttp import web

from gb300lane.engine.args import parse_serve_args
from gb300lane.engine.modelled_boot import VllmLog
from gb300lane.engine.server import BODY_READ_TIMEOUT_S, HEADER_READ_TIMEOUT_S, EngineServer
from gb300lane.testing.free_ports import free_port


@dataclass(frozen=True)
class RunningEngine:
    url: str
    port: int
    server: EngineServer
    log: io.StringIO


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@contextmanager
def running_engine(
    flags: Sequence[str],
    *,
    wait_ready: bool = True,
    header_read_timeout_s: float = HEADER_READ_TIMEOUT_S,
    body_read_timeout_s: float = BODY_READ_TIMEOUT_S,
    ready_timeout_s: float = 30.0,
) -> Iterator[RunningEngine]:
    """`vllm serve`-style `flags` (without --port: a free one is added) served until the block ends."""
    port = free_port()
    args = parse_serve_args([*flags, "--port", str(port)])
    log = io.StringIO()
    server = EngineServer(args, log=VllmLog(log), body_read_timeout_s=body_read_timeout_s)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = server.runner(header_read_timeout_s=header_read_timeout_s)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    url = f"http://127.0.0.1:{port}"
    try:
        if wait_ready:
            deadline = time.monotonic() + ready_timeout_s
            while _health(url) != 200:
                assert time.monotonic() < deadline, (
                    f"the engine on {url} was not ready in {ready_timeout_s} s:\n{log.getvalue()[-2000:]}"
                )
                time.sleep(0.05)
        yield RunningEngine(url=url, port=port, server=server, log=log)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def http_get(url: str) -> tuple[int, bytes]:
    """GET `url`: (status, body); an HTTP error is its own status and body, a refused connection is (0, b"")."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def http_post(url: str, body: object) -> tuple[int, dict]:
    """POST `body` (bytes as given, anything else as JSON) to `url`: (status, the JSON answer), errors included."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
