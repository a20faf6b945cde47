"""The async streaming client: the only code that speaks OpenAI-compatible HTTP to a lane.

It sends one completion or chat request with `stream=true`, parses the SSE
stream as it arrives, and returns a `StreamOutcome` with every arrival time
the client saw. Every failure (no connection, an HTTP error, a malformed
event, a stream that ends without `[DONE]`, an error event mid-stream, a
missing usage chunk) becomes an `error` string on the outcome; nothing here
raises for a bad server.

Events are parsed once the body has ended (see `_BodyTap`), so a malformed
or error event is reported when the stream ends or stalls, not the moment it
arrives.

Event times: every SSE event that carries `choices` keeps its own arrival
time (`event_times_s`), the time of the transport read that completed it.
Events that came in one read share that instant but stay separate events, so
the inter-token latency rebuilt from them is vLLM's definition exactly (one
gap per content event after the first, as `vllm bench serve` stamps each
line), not a gap per read.

Token attribution: a chunk may carry several tokens (a speculative verify
step emits all its accepted tokens at once). With per-chunk cumulative usage
(`continuous_usage_stats`) each chunk's token count is exact, and all of the
chunk's tokens are assigned the chunk's arrival time, so the inter-token gap
is charged to the first token of the chunk and the rest get zero gaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import socket
import struct
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from pydantic import ValidationError

from gb300lane.bench.models import EngineTiming, RequestSpecDecode, TokenAttribution
from gb300lane.bench.quality import ToolCall
from gb300lane.models import format_validation_error
from gb300lane.runtime import ssh

#: Body pieces (about one SSE event each) parsed between yields to the event loop once a stream has ended.
_PARSE_SLICE = 4
#: Upper bound on an error body kept in a record.
_ERROR_BODY_CHARS = 300


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while timing: collect first, pause it, restore it after.

    A full collection over a window's live objects (every record, every
    outcome's lists) holds the event loop for tens of milliseconds at a time,
    and every arrival that comes in meanwhile is read late; with a thousand
    streams that dominates the client's timing error. Cycles made meanwhile
    are collected when the block ends (between cells), as timeit does.
    """
    enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


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
                lines = [line[5:].lstrip(b" ") for line in buf[start:end].split(b"\n") if line.startswith(b"data:")]
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
    """What one streamed request produced, on the client's wall clock (seconds since send).

    `event_times_s` has the arrival of every event with `choices` (vLLM's
    chunks); `sent_s` is when the request's head went out on a connection
    (later than the send when the client waited for a free connection;
    None without the window's trace, see `request_sent_trace`); `started_at`
    is the send's `time.perf_counter()`, the origin of every other time.
    """

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
    event_times_s: list[float] = field(default_factory=list)
    sent_s: float | None = None
    started_at: float = 0.0
    content: str = ""  # completion text or chat content, without tool-call arguments
    tool_calls: list[ToolCall] = field(default_factory=list)  # chat: the calls, their streamed pieces joined
    finish_reason: str | None = None
    # vLLM's return_token_ids: the prompt's ids (first chunk) and every chunk's generated ids, joined; None: not sent
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None


def _chunk_parts(chunk: dict[str, Any]) -> tuple[str, list[tuple[int, str | None, str]]]:
    """(completion text or chat content, [(tool call index, name if sent, argument piece)]) of one chunk: the
    text a chunk adds is both, the arguments after the content."""
    parts: list[str] = []
    calls: list[tuple[int, str | None, str]] = []
    for choice in chunk.get("choices") or []:
        if "text" in choice and choice["text"]:
            parts.append(choice["text"])
        delta = choice.get("delta") or {}
        if delta.get("content"):
            parts.append(delta["content"])
        for pos, call in enumerate(delta.get("tool_calls") or []):
            fn = call.get("function") or {}
            index = call.get("index")
            name = fn.get("name")
            calls.append(
                (
                    index if isinstance(index, int) else pos,
                    name if isinstance(name, str) else None,
                    fn.get("arguments") or "",
                )
            )
    return "".join(parts), calls


class _StreamState:
    """Folds parsed SSE events into a StreamOutcome."""

    def __init__(self) -> None:
        self.out = StreamOutcome()
        self.done = False
        self.usage_tokens_seen = 0
        self.per_chunk_usage = True
        self.chunk_times: list[tuple[float, int | None]] = []  # (arrival, tokens if known)
        self.call_parts: list[list[str]] = []  # per tool call index: [name, arguments so far]

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
        if isinstance(chunk.get("prompt_token_ids"), list):
            self.out.prompt_token_ids = chunk["prompt_token_ids"]  # a chat's, on its first chunk's body
        if choices:
            self._token_ids(choices)
            self.out.event_times_s.append(now)
            content, calls = _chunk_parts(chunk)
            text = content + "".join(args for _, _, args in calls)
            self.out.content += content
            self._calls(calls)
            for choice in choices:
                if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                    self.out.finish_reason = choice["finish_reason"]
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
                self.out.spec_decode = RequestSpecDecode.model_validate(request_spec_fields(sd))
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

    def _token_ids(self, choices: list[Any]) -> None:
        """Collect return_token_ids' pieces: a completion's prompt ids on its first choice, each chunk's ids."""
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if isinstance(choice.get("prompt_token_ids"), list):
                self.out.prompt_token_ids = choice["prompt_token_ids"]
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                if self.out.token_ids is None:
                    self.out.token_ids = []
                self.out.token_ids.extend(ids)  # in place: a copy per chunk would cost the square of the length

    def _calls(self, pieces: list[tuple[int, str | None, str]]) -> None:
        """Join streamed tool-call pieces by index: the name comes once, the arguments in pieces."""
        for index, name, args in pieces:
            while len(self.call_parts) <= index:
                self.call_parts.append(["", ""])
            if name:
                self.call_parts[index][0] = name
            self.call_parts[index][1] += args
        if pieces:
            self.out.tool_calls = [ToolCall(name=n, arguments=a) for n, a in self.call_parts]

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


#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS): the kernel stamps each received packet (CLOCK_REALTIME, ns).
_SO_TIMESTAMPNS = 35
_ANCILLARY = socket.CMSG_SPACE(16)
_TIMESPEC = struct.Struct("qq")


class _StampingSocket:
    """A connection's socket whose reads also return the kernel's receive time of the bytes read.

    asyncio's transport reads with `recv`; here that read is a `recvmsg`
    that also takes the SO_TIMESTAMPNS stamp the kernel put on the packet
    when it arrived, converted to `time.perf_counter()`'s clock. A busy or
    descheduled client reads late, but the stamp is when the bytes came, so
    its arrival times are not late with it. For a read that took several
    packets the kernel gives the last one's stamp: never earlier than the
    truth, and never later than the read. Everything else is the socket's.
    """

    __slots__ = ("_sock", "stamp")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.stamp: float | None = None

    def recv(self, size: int) -> bytes:
        data, ancillary, _flags, _addr = self._sock.recvmsg(size, _ANCILLARY)
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(raw)
                # The wall clock first, then perf_counter: a pause between the two reads makes the stamp late,
                # never early (read the other way round, a descheduled read put arrivals before their writes).
                wall = time.clock_gettime(time.CLOCK_REALTIME)
                now = time.perf_counter()
                at = sec + nsec * 1e-9 - (wall - now)
                self.stamp = at if at <= now else now
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _kernel_stamps(protocol: Any) -> _StampingSocket | None:
    """The connection's socket switched to kernel receive stamps (once per connection); None where not possible."""
    return kernel_stamps(getattr(protocol, "transport", None))


def kernel_stamps(transport: Any) -> _StampingSocket | None:
    """`transport`'s socket switched to kernel receive stamps (`.stamp` after each read); None where not possible."""
    sock = getattr(transport, "_sock", None)
    if isinstance(sock, _StampingSocket):
        return sock
    if not sys.platform.startswith("linux") or not isinstance(sock, socket.socket):
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        stamping = _StampingSocket(sock)
        transport._sock = stamping
    except (OSError, AttributeError):
        return None
    return stamping


#: vLLM 0.32's names for a request's spec-decode counters (0.33 renamed them): 0.33 name -> 0.32 name.
_SPEC_FIELDS_0_32 = {
    "num_drafts": "num_spec_steps",
    "num_draft_tokens": "num_draft_tokens",
    "num_accepted_tokens": "num_accepted_draft_tokens",
}


def request_spec_fields(sd: Mapping[str, object]) -> dict[str, object]:
    """A response's `metrics.speculative_decoding` as RequestSpecDecode's fields, from 0.33's names or 0.32's."""
    if "num_drafts" in sd or "num_spec_steps" not in sd:
        return {k: sd.get(k) for k in _SPEC_FIELDS_0_32}
    return {k: sd.get(old) for k, old in _SPEC_FIELDS_0_32.items()}


class _StreamFault(Exception):
    """A protocol fault inside one stream; becomes the outcome's error."""


class _BodyTap:
    """Takes one response body's bytes from inside the connection's `data_received`, stamping each read.

    A coroutine that reads a chunk when it resumes is late by everything the
    event loop ran first: with many streams, every other stream's chunk of
    the same engine step, each with a task wake-up and a parse. Here the
    connection protocol's `data_received` is wrapped: right after aiohttp has
    decoded a socket read into the body's `StreamReader`, the tap stamps it
    and takes the new bytes with the public `read_nowait()`, nothing more.
    On Linux the stamp is the kernel's receive time of the packet
    (`_StampingSocket`), so a client that reads late still stamps when the
    bytes came. The request's coroutine waits only for the body's end (`wait_eof()`) and
    then parses the stamped pieces, so while a stream runs a chunk costs no
    task wake-up and no parse, and the reader's buffer never fills (aiohttp
    never pauses reading). The wrapper stays on the connection (keep-alive
    reuses it) and feeds whichever body `target` names; between requests it
    does nothing.
    """

    __slots__ = ("inner", "target", "sock")

    def __init__(self, inner: Any, sock: _StampingSocket | None = None) -> None:
        self.inner = inner
        self.target: _Body | None = None
        self.sock = sock

    def __call__(self, data: bytes) -> None:
        t = time.perf_counter()
        sock = self.sock
        if sock is not None and sock.stamp is not None:
            # The kernel's receive time of these bytes (the transport read them just before this call).
            t, sock.stamp = sock.stamp, None
        self.inner(data)
        target = self.target
        if target is not None:
            target.take(t)


class _Body:
    """One response body: its bytes as (piece, arrival) pairs, then SSE events folded into the stream state."""

    __slots__ = ("reader", "state", "parser", "t0", "pieces", "tap", "taking", "last")

    def __init__(self, reader: aiohttp.StreamReader, protocol: Any, state: _StreamState, t0: float) -> None:
        self.reader = reader
        self.state = state
        self.parser = SSEParser()
        self.t0 = t0
        self.pieces: list[tuple[bytes, float]] = []
        self.taking = False
        self.last = t0  # perf_counter of the newest piece
        tap = getattr(protocol, "data_received", None)
        if protocol is not None and not isinstance(tap, _BodyTap):
            try:
                tap = _BodyTap(protocol.data_received, _kernel_stamps(protocol))
                protocol.data_received = tap
            except AttributeError:
                tap = None  # a protocol that cannot be wrapped: the coroutine reads and stamps (see consume)
        self.tap = tap if isinstance(tap, _BodyTap) else None

    def feed(self, data: bytes, at: float) -> None:
        """Parse `data` that arrived at perf_counter `at`; a protocol fault raises _StreamFault."""
        for event in self.parser.feed(data):
            self.state.event(event, at - self.t0)

    def take(self, at: float) -> None:
        """Keep what the reader holds now, stamped `at` (never raises into aiohttp's protocol).

        Taking bytes can make aiohttp resume reading and hand over bytes it
        held back, re-entering the tap: the nested call returns at once and
        this loop takes them next.
        """
        if self.taking:
            return
        self.taking = True
        try:
            while True:
                try:
                    data = self.reader.read_nowait()
                except Exception:  # noqa: BLE001 - the reader's own error; the waiting coroutine raises it
                    return
                if not data:
                    return
                self.pieces.append((data, at))
                self.last = at
        finally:
            self.taking = False

    async def consume(self, idle_limit_s: float) -> None:
        """Until the body ends: through the tap where there is one, else by reading in this coroutine.

        No data for `idle_limit_s` raises asyncio.TimeoutError. The tap path
        checks that with one timer per `idle_limit_s`, where aiohttp's
        `sock_read` would re-arm a timer on every socket read.
        """
        reader = self.reader
        if self.tap is None:
            while data := await asyncio.wait_for(reader.readany(), idle_limit_s):
                self.feed(data, time.perf_counter())
            return
        self.tap.target = self
        self.last = time.perf_counter()
        self.take(self.last)  # bytes buffered before the tap watched arrived no later than now
        if (exc := reader.exception()) is not None:
            raise exc  # already failed: no one would wake wait_eof()
        eof = asyncio.ensure_future(reader.wait_eof())
        try:
            while not eof.done():
                idle = time.perf_counter() - self.last
                if idle >= idle_limit_s:
                    raise TimeoutError
                await asyncio.wait((eof,), timeout=idle_limit_s - idle)
            eof.result()
        except BaseException as exc:
            eof.cancel()
            # A stall or a cut still leaves what did arrive on the record; a malformed or error event
            # in it is the better reason (the server may have gone quiet after sending it).
            self.close()
            try:
                self._parse_pieces()
            except _StreamFault as fault:
                if not isinstance(exc, asyncio.CancelledError):
                    raise fault from None
            raise
        self.close()
        self.take(time.perf_counter())
        # Parsed a few pieces at a time, letting the loop run in between: one stream's whole body parsed
        # at once would hold up every other stream's reads (and so their stamps) for that long.
        pieces, self.pieces = self.pieces, []
        for i in range(0, len(pieces), _PARSE_SLICE):
            if i:
                await asyncio.sleep(0)
            for data, at in pieces[i : i + _PARSE_SLICE]:
                self.feed(data, at)
        await asyncio.sleep(
            0
        )  # the caller's own work on the outcome (a record, the next request) in a slice of its own

    def _parse_pieces(self) -> None:
        pieces, self.pieces = self.pieces, []
        for data, at in pieces:
            self.feed(data, at)

    def close(self) -> None:
        if self.tap is not None and self.tap.target is self:
            self.tap.target = None


def _headers_sent(_session: Any, ctx: Any, _params: Any) -> Any:
    out = ctx.trace_request_ctx
    if isinstance(out, StreamOutcome):
        out.sent_s = time.perf_counter() - out.started_at
    return _DONE


class _Done:
    """An awaitable that is already complete: the trace callback must return one, and a coroutine per request costs more."""

    __slots__ = ()

    def __await__(self) -> Any:
        return iter(())


_DONE = _Done()


def request_sent_trace() -> aiohttp.TraceConfig:
    """A trace that stamps each request's `sent_s`: when its head was written on a connection.

    A request that waits in the session's pool for a free connection (a
    connector limit below the concurrency) is not in flight at the server
    while it waits; its send time says it was, its `sent_s` says when it was.
    """
    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(_headers_sent)
    return trace


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    payload: Mapping[str, object],
    *,
    read_timeout_s: float = 120.0,
) -> StreamOutcome:
    """POST `payload` to `url` and consume its SSE stream; never raises for server faults.

    Each event is timed by the socket read that completed it (see
    `_BodyTap`), not by when this coroutine got to parse it.
    """
    state = _StreamState()
    out = state.out
    body: _Body | None = None
    t0 = time.perf_counter()
    out.started_at = t0
    try:
        # The response's head within read_timeout_s; the body's idle limit is the body's own (see _Body.consume).
        async with asyncio.timeout(read_timeout_s):
            resp = await session.post(
                ssh.reach(url),
                json=payload,
                trace_request_ctx=out,
                timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            )
        async with resp:
            out.http_status = resp.status
            if resp.status != 200:
                body_text = (await resp.text(errors="replace"))[:_ERROR_BODY_CHARS]
                out.error = f"HTTP {resp.status} from {url}: {body_text.strip()}"
                return out
            conn = resp.connection
            body = _Body(resp.content, conn.protocol if conn is not None else None, state, t0)
            await body.consume(read_timeout_s)
            parser = body.parser
            # The stream ended when its last bytes arrived (the tap's stamp), which is also when aiohttp
            # handed the connection back to the pool, before this coroutine resumed.
            out.done_s = (body.last if body.tap is not None else time.perf_counter()) - t0
            tail = parser.pending.decode("utf-8", errors="replace").strip()
            if tail and not state.done:
                # A final event without its blank line still counts when it is complete.
                try:
                    state.event(tail.removeprefix("data:").strip(), out.done_s)
                except _StreamFault:
                    raise _StreamFault(f"truncated stream: ended inside an event: {tail[:80]!r}") from None
    except _StreamFault as exc:
        out.error = str(exc)
    except TimeoutError:
        out.error = f"no data from {url} for {read_timeout_s:g} s (stream stalled)"
    except aiohttp.ClientConnectorError as exc:
        out.error = f"cannot connect to {url}: {exc.os_error or exc}"
    except aiohttp.ClientPayloadError as exc:
        out.error = f"truncated stream from {url}: {exc}"
    except aiohttp.ClientError as exc:
        out.error = f"{type(exc).__name__} talking to {url}: {exc}"
    finally:
        if body is not None:
            body.close()
    state.finish()
    if out.error is None:
        if not state.done:
            out.error = "truncated stream: ended without data: [DONE]"
        elif out.output_tokens is None:
            out.error = "no usage chunk in the stream (stream_options.include_usage ignored?)"
    out.ok = out.error is None
    return out


async def post_json(
    session: aiohttp.ClientSession,
    url: str,
    payload: Mapping[str, object],
    *,
    timeout_s: float = 300.0,
) -> tuple[Any, str | None]:
    """POST `payload` to `url` and read one JSON answer (the referee's /tokenize and prompt_logprobs calls):
    (the body, None), or (None, what went wrong); never raises for a bad server."""
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(ssh.reach(url), json=payload) as resp:
                text = await resp.text(errors="replace")
                if resp.status != 200:
                    return None, f"HTTP {resp.status} from {url}: {text[:_ERROR_BODY_CHARS].strip()}"
        return json.loads(text), None
    except TimeoutError:
        return None, f"no answer from {url} within {timeout_s:g} s"
    except json.JSONDecodeError as exc:
        return None, f"{url} answered with a body that is not JSON ({exc})"
    except aiohttp.ClientConnectorError as exc:
        return None, f"cannot connect to {url}: {exc.os_error or exc}"
    except aiohttp.ClientError as exc:
        return None, f"{type(exc).__name__} talking to {url}: {exc}"
