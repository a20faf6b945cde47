"""The async streaming client: the only code that speaks OpenAI-compatible HTTP to a lane.

It sends one completion or chat request with `stream=true`, parses the SSE
stream as it arrives, and returns a `StreamOutcome` with every arrival time
the client saw. Every failure (no connection, an HTTP error, a malformed
event, a stream that ends without `[DONE]`, an error event mid-stream, a
missing usage chunk) becomes an `error` string on the outcome; nothing here
raises for a bad server.

Token attribution: a chunk may carry several tokens (a speculative verify
step emits all its accepted tokens at once). With per-chunk cumulative usage
(`continuous_usage_stats`) each chunk's token count is exact, and all of the
chunk's tokens are assigned the chunk's arrival time, so the inter-token gap
is charged to the first token of the chunk and the rest get zero gaps.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from pydantic import ValidationError

from gb300lane.bench.models import EngineTiming, RequestSpecDecode, TokenAttribution
from gb300lane.models import format_validation_error
from gb300lane.runtime import ssh

#: Upper bound on an error body kept in a record.
_ERROR_BODY_CHARS = 300


class SSEParser:
    """Incremental Server-Sent Events parser: bytes in, complete `data` payloads out.

    Events end at a blank line; `data:` lines of one event are joined by a
    newline; comment lines (starting with ':') and other fields are ignored.
    Lines may end in LF or CRLF, and a read may end anywhere: inside a line,
    inside `data:`, between the CR and LF of a CRLF, inside a UTF-8
    character (payloads are decoded only once their event is complete).
    """

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[str]:
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            # A CR that ends the read may be the first half of a CRLF; keep it raw until the LF comes.
            held = buf.endswith(b"\r")
            buf = (buf[:-1] if held else buf).replace(b"\r\n", b"\n") + (b"\r" if held else b"")
        events: list[str] = []
        start = 0
        find = buf.find
        while True:
            end = find(b"\n\n", start)
            if end < 0:
                break
            if buf.startswith(b"data:", start) and find(b"\n", start, end) < 0:
                # One `data:` line: what every OpenAI-compatible server sends, parsed without splitting.
                events.append(buf[start + 5 : end].lstrip(b" ").decode("utf-8", errors="replace"))
            else:
                lines = [
                    line[5:].lstrip(b" ") for line in buf[start:end].split(b"\n") if line.startswith(b"data:")
                ]
                if lines:
                    events.append(b"\n".join(lines).decode("utf-8", errors="replace"))
            start = end + 2
        self._buf = buf[start:] if start else buf
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event that has not been terminated yet."""
        return self._buf


@dataclass
class StreamOutcome:
    """What one streamed request produced, on the client's wall clock (seconds since send)."""

    ok: bool = False
    error: str | None = None
    http_status: int | None = None
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    chunks: int = 0
    token_attribution: TokenAttribution = "chunks_only"
    ttft_s: float | None = None
    e2e_s: float | None = None
    done_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    engine: EngineTiming | None = None
    text: str = ""
    spec_decode: RequestSpecDecode | None = None


def _chunk_text(chunk: dict[str, Any]) -> str:
    """The text a chunk adds: completion text, chat content, or tool-call arguments."""
    parts: list[str] = []
    for choice in chunk.get("choices") or []:
        if "text" in choice and choice["text"]:
            parts.append(choice["text"])
        delta = choice.get("delta") or {}
        if delta.get("content"):
            parts.append(delta["content"])
        for call in delta.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("arguments"):
                parts.append(fn["arguments"])
    return "".join(parts)


class _StreamState:
    """Folds parsed SSE events into a StreamOutcome."""

    def __init__(self) -> None:
        self.out = StreamOutcome()
        self.done = False
        self.usage_tokens_seen = 0
        self.per_chunk_usage = True
        self.chunk_times: list[tuple[float, int | None]] = []  # (arrival, tokens if known)

    def event(self, data: str, now: float) -> None:
        if self.done:
            return
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            raise _StreamFault(f"malformed SSE event (not JSON: {exc.msg}): {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise _StreamFault(f"malformed SSE event (not an object): {data[:80]!r}")
        if "error" in chunk:
            err = chunk["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            raise _StreamFault(f"server error event mid-stream: {msg}")
        usage = chunk.get("usage")
        choices = chunk.get("choices") or []
        if choices:
            text = _chunk_text(chunk)
            n: int | None = None
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                n = usage["completion_tokens"] - self.usage_tokens_seen
                self.usage_tokens_seen = usage["completion_tokens"]
            elif text:
                # Only a chunk that carries text but no usage breaks exact attribution;
                # role-only and finish_reason-only chunks carry no tokens.
                self.per_chunk_usage = False
            if text or (n or 0) > 0:
                self.out.text += text
                self.out.chunks += 1
                self.chunk_times.append((now, n))
        if isinstance(usage, dict) and not choices:
            self.out.output_tokens = usage.get("completion_tokens")
            self.out.prompt_tokens = usage.get("prompt_tokens")
        metrics = chunk.get("metrics")
        sd = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if isinstance(sd, dict):
            try:
                self.out.spec_decode = RequestSpecDecode.model_validate(
                    {k: sd.get(k) for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")})
            except ValidationError as exc:
                raise _StreamFault(
                    f"malformed metrics.speculative_decoding: {format_validation_error(exc, first_only=True)}"
                ) from None
        ext = chunk.get("gb300lane")
        if isinstance(ext, dict):
            try:
                self.out.engine = EngineTiming.model_validate(ext)
            except ValidationError as exc:
                raise _StreamFault(
                    f"malformed gb300lane timing extension: {format_validation_error(exc, first_only=True)}"
                ) from None

    def finish(self) -> None:
        """Turn chunk arrivals into per-token times once the total is known."""
        out = self.out
        total = out.output_tokens
        if self.chunk_times and self.per_chunk_usage and all(n is not None for _, n in self.chunk_times):
            out.token_attribution = "usage"
            times = [t for t, n in self.chunk_times for _ in range(max(n or 0, 0))]
        elif total is not None and total == len(self.chunk_times):
            out.token_attribution = "one_per_chunk"
            times = [t for t, _ in self.chunk_times]
        else:
            out.token_attribution = "chunks_only"
            times = [t for t, _ in self.chunk_times]
        out.token_times_s = times
        if times:
            out.ttft_s = times[0]
            out.e2e_s = times[-1]


class _StreamFault(Exception):
    """A protocol fault inside one stream; becomes the outcome's error."""


class _ReceiptHook:
    """Wraps a connection protocol's `data_received` to stamp each socket read before it is parsed.

    A coroutine that stamps a chunk when it resumes is late by everything the
    event loop ran first: with many streams, every other stream's chunk of the
    same engine step. The transport calls `data_received` as soon as the
    socket is read, so the stamp taken here is the bytes' arrival. It stays on
    the connection (keep-alive reuses it) and records for whichever body
    `target` watches; between requests it records nothing.
    """

    __slots__ = ("inner", "target")

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.target: _Receipts | None = None

    def __call__(self, data: bytes) -> None:
        t = time.perf_counter()
        self.inner(data)
        target = self.target
        if target is not None:
            n = target.reader.total_bytes
            if n != target.marks[-1][0]:
                target.marks.append((n, t))


class _Receipts:
    """When each byte of one response body arrived: marks of (body bytes received so far, perf_counter)."""

    __slots__ = ("reader", "marks", "hook")

    def __init__(self, reader: aiohttp.StreamReader, protocol: Any) -> None:
        self.reader = reader
        # Bytes buffered before the hook watched this body arrived no later than now.
        self.marks: deque[tuple[int, float]] = deque([(reader.total_bytes, time.perf_counter())])
        hook = getattr(protocol, "data_received", None)
        if protocol is not None and not isinstance(hook, _ReceiptHook):
            try:
                hook = _ReceiptHook(protocol.data_received)
                protocol.data_received = hook
            except AttributeError:
                # A protocol that cannot be wrapped: every read is stamped when the coroutine sees it.
                hook = None
        self.hook = hook if isinstance(hook, _ReceiptHook) else None
        if self.hook is not None:
            self.hook.target = self

    def close(self) -> None:
        if self.hook is not None and self.hook.target is self:
            self.hook.target = None


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any],
    *,
    read_timeout_s: float = 120.0,
) -> StreamOutcome:
    """POST `payload` to `url` and consume its SSE stream; never raises for server faults.

    Each event is timed by the socket read that completed it (see
    `_ReceiptHook`), not by when this coroutine got to parse it.
    """
    state = _StreamState()
    out = state.out
    parser = SSEParser()
    receipts: _Receipts | None = None
    t0 = time.perf_counter()
    try:
        async with session.post(
            ssh.reach(url), json=payload, timeout=aiohttp.ClientTimeout(total=None, sock_read=read_timeout_s)
        ) as resp:
            out.http_status = resp.status
            if resp.status != 200:
                body = (await resp.text(errors="replace"))[:_ERROR_BODY_CHARS]
                out.error = f"HTTP {resp.status} from {url}: {body.strip()}"
                return out
            conn = resp.connection
            receipts = _Receipts(resp.content, conn.protocol if conn is not None else None)
            marks = receipts.marks
            consumed = 0  # body bytes handed to the parser
            content = resp.content
            while True:
                # readany() directly: iter_any() adds a coroutine frame per read and nothing else.
                data = await content.readany()
                if not data:
                    break
                size = len(data)
                pos = 0
                while pos < size:
                    while marks and marks[0][0] <= consumed:
                        marks.popleft()
                    if marks:
                        # The slice one read delivered, timed by that read.
                        upto, at = marks[0]
                        take = min(upto - consumed, size - pos)
                        now = at - t0
                    else:
                        take = size - pos
                        now = time.perf_counter() - t0
                    piece = data if take == size else data[pos : pos + take]
                    for event in parser.feed(piece):
                        state.event(event, now)
                    pos += take
                    consumed += take
            out.done_s = time.perf_counter() - t0
            tail = parser.pending.decode("utf-8", errors="replace").strip()
            if tail and not state.done:
                # A final event without its blank line still counts when it is complete.
                try:
                    state.event(tail.removeprefix("data:").strip(), out.done_s)
                except _StreamFault:
                    raise _StreamFault(f"truncated stream: ended inside an event: {tail[:80]!r}") from None
    except _StreamFault as exc:
        out.error = str(exc)
    except asyncio.TimeoutError:
        out.error = f"no data from {url} for {read_timeout_s:g} s (stream stalled)"
    except aiohttp.ClientConnectorError as exc:
        out.error = f"cannot connect to {url}: {exc.os_error or exc}"
    except aiohttp.ClientPayloadError as exc:
        out.error = f"truncated stream from {url}: {exc}"
    except aiohttp.ClientError as exc:
        out.error = f"{type(exc).__name__} talking to {url}: {exc}"
    finally:
        if receipts is not None:
            receipts.close()
    state.finish()
    if out.error is None:
        if not state.done:
            out.error = "truncated stream: ended without data: [DONE]"
        elif out.output_tokens is None:
            out.error = "no usage chunk in the stream (stream_options.include_usage ignored?)"
    out.ok = out.error is None
    return out
