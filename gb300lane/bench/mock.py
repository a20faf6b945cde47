"""A streaming completions server with known timing: what the client self-test measures the client against.

Every `POST` answers one SSE stream in the shape of `/v1/completions` with
`stream_options.continuous_usage_stats`: the first event `ttft` after the
request was read, then one every `itl`, `events` in all (a request's
`max_tokens` asks for another count), then a usage chunk and `[DONE]`. With
`events_per_write` above 1, that many events go out in one write (one TCP
segment), each when the last of them is due, as a server that flushes
several steps at once sends them.

The server tells the truth about its own timing in the text it streams:
each event's text is the `time.perf_counter()` at which its write was made
(`<seconds>;`), and the first event's text starts with the time the request
had been read (`<seconds>@`). `perf_counter` is CLOCK_MONOTONIC on Linux,
shared by every process on the host, so a client in another process can
subtract it from its own arrival stamps: what is left is the client's error,
not the server's lateness. The read time is the kernel's receive stamp of
the request's packet where the platform gives one.

HTTP/1.1 with keep-alive and chunked bodies, on asyncio streams: no
framework, so the server's own cost per event is one write.
Run it as `python -m gb300lane.bench.mock --port 0` (it prints `port N` once
it listens), or in process with `start_mock`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import threading
import time
from dataclasses import dataclass

from gb300lane.bench.client import kernel_stamps

#: Open files wanted for a thousand streams (sockets on both ends of one host).
OPEN_FILES = 8192


@dataclass(frozen=True)
class MockTiming:
    """What every stream of the mock does: first event after `ttft_s`, then one every `itl_s`."""

    ttft_s: float = 0.02
    itl_s: float = 0.002
    events: int = 32
    events_per_write: int = 1


def raise_open_files(want: int = OPEN_FILES) -> int:
    """Lift this process's soft limit on open files towards `want` (never above the hard limit); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(want, hard) if hard != resource.RLIM_INFINITY else want
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(text: str, done: int) -> bytes:
    body = {
        "id": "cmpl-mock",
        "object": "text_completion",
        "model": "mock",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}],
        "usage": {"prompt_tokens": 1, "completion_tokens": done, "total_tokens": done + 1},
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)


async def _stream(writer: asyncio.StreamWriter, timing: MockTiming, events: int, received: float) -> None:
    writer.write(_HEAD)
    group = max(1, timing.events_per_write)
    done = 0
    while done < events:
        last = min(done + group, events) - 1
        due = received + timing.ttft_s + last * timing.itl_s
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sent = time.perf_counter()
        parts = []
        for i in range(done, last + 1):
            text = (f"{received:.7f}@" if i == 0 else "") + f"{sent:.7f};"
            parts.append(_event(text, i + 1))
        writer.write(_chunk(b"".join(parts)))
        done = last + 1
    tail = {
        "id": "cmpl-mock",
        "object": "text_completion",
        "model": "mock",
        "choices": [],
        "usage": {"prompt_tokens": 1, "completion_tokens": events, "total_tokens": events + 1},
    }
    writer.write(_chunk(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timing: MockTiming) -> None:
    # The request's arrival is the kernel's receive stamp of its packet: a mock that reads it late must not
    # shorten the TTFT it reports (and so lengthen the client's error).
    stamps = kernel_stamps(writer.transport)
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            received = time.perf_counter()
            if stamps is not None and stamps.stamp is not None:
                received, stamps.stamp = min(received, stamps.stamp), None
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b""
            events = timing.events
            if body:
                try:
                    asked = json.loads(body).get("max_tokens")
                except (ValueError, AttributeError):
                    asked = None
                if isinstance(asked, int) and asked > 0:
                    events = asked
            if head.startswith(b"GET"):
                ok = b"{}"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n" + ok)
                continue
            await _stream(writer, timing, events, received)
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def start_mock(timing: MockTiming, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
    """A listening mock on (host, port); port 0 picks a free one (read it from `server.sockets`)."""
    return await asyncio.start_server(lambda r, w: _serve_connection(r, w, timing), host, port, backlog=4096)


async def _main(args: argparse.Namespace) -> None:
    timing = MockTiming(
        ttft_s=args.ttft_ms / 1e3, itl_s=args.itl_ms / 1e3, events=args.events, events_per_write=args.events_per_write
    )
    server = await start_mock(timing, args.host, args.port)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def _end_with_parent(parent: int) -> None:
    """Exit when the process that started this one is gone: an orphan is re-parented, so the parent pid changes."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="A streaming completions server with known timing.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=2.0)
    ap.add_argument("--events", type=int, default=32)
    ap.add_argument("--events-per-write", type=int, default=1)
    ap.add_argument(
        "--parent",
        type=int,
        default=None,
        help="Exit once this pid is no longer the parent (the starter was killed, even with SIGKILL).",
    )
    args = ap.parse_args(argv)
    raise_open_files()
    if args.parent is not None:
        _end_with_parent(args.parent)
    try:
        asyncio.run(_main(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
