"""A small real OpenAI-compatible SSE server for the bench client's tests.

It serves /v1/completions, /v1/chat/completions, /v1/models, /version and
/metrics on 127.0.0.1 from a background thread, and can be told to misbehave
the ways a lane does: an HTTP error in the middle of a window, a malformed
SSE event, a stream that ends without [DONE] or is cut mid-event, a short
output, /metrics missing or without spec-decode counters, and foreign traffic
(generation tokens the client never received).

Outputs are deterministic: the text is a hash of (prompt, seed when
temperature > 0), so greedy requests repeat exactly. Each "verify step" emits
`tokens_per_step` tokens in one chunk and counts one draft of `draft_k`
tokens with `tokens_per_step - 1` accepted, so tokens/step is known exactly.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa", "lam", "mu"]


@dataclass
class Behaviour:
    tokens_per_step: int = 1
    # A step takes time, as a lane's does: an instant answer ends each request before the next stream's is sent,
    # and a cell that never held its concurrency is invalid (bench/delivered.py).
    step_sleep_s: float = 0.003
    draft_k: int = 4
    # A k schedule ([start, end, k] by the requests in flight) the lane drafts by, as vLLM does; None: draft_k always.
    schedule: tuple[tuple[int, int, int], ...] | None = None
    continuous_usage: bool = True
    engine_ext: bool = False
    modelled_ttft_s: float = 0.05
    modelled_step_s: float = 0.01
    metrics: str = "ok"  # ok | missing | no_spec
    health: int = 200
    fail_requests: dict[int, int] = field(default_factory=dict)  # request index -> HTTP status
    malformed: set[int] = field(default_factory=set)
    no_done: set[int] = field(default_factory=set)
    cut: set[int] = field(default_factory=set)
    stall: set[int] = field(default_factory=set)  # request index -> goes silent mid-stream
    short: dict[int, int] = field(default_factory=dict)  # request index -> tokens returned
    foreign_tokens_per_request: int = 0
    perturb_greedy: set[str] = field(default_factory=set)  # prompts whose greedy output differs
    words: list[str] | None = None  # token vocabulary instead of WORDS (e.g. multi-byte UTF-8)
    ensure_ascii: bool = True  # False: non-ASCII text goes on the wire as raw UTF-8
    crlf: bool = False  # SSE lines end in CRLF
    # The whole stream's bytes -> the reads to send them as (a short pause between reads).
    split_reads: Callable[[bytes], list[bytes]] | None = None
    gated: bool = False  # each token chunk waits for `FakeLane.open_gate`


class FakeLane:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.requests: list[dict[str, Any]] = []
        self.gen_tokens = 0
        self.prompt_tokens = 0
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.accepted_per_pos: dict[int, int] = {}
        self.drafts_by_length: dict[int, int] = {}
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._gate: asyncio.Semaphore | None = None
        self.chunks_written = 0
        self.in_flight = 0
        self._written = threading.Condition()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle -------------------------------------------------------
    def start(self) -> FakeLane:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    async def _start(self) -> None:
        self._gate = asyncio.Semaphore(0)
        app = web.Application()
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_post("/v1/chat/completions", self._completion)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)  # type: ignore[union-attr]
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)  # type: ignore[union-attr]

    def open_gate(self, chunks: int) -> None:
        """Let `chunks` more gated token chunks be written (callable from any thread)."""
        for _ in range(chunks):
            self._loop.call_soon_threadsafe(self._gate.release)  # type: ignore[union-attr]

    def wait_written(self, chunks: int, timeout_s: float = 5.0) -> None:
        """Block until `chunks` token chunks in all have been handed to the transport."""
        with self._written:
            if not self._written.wait_for(lambda: self.chunks_written >= chunks, timeout_s):
                raise TimeoutError(f"fake lane wrote {self.chunks_written} of {chunks} chunks")

    # --- handlers --------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=self.behaviour.health)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.33.0", "engine": "fake"})

    async def _metrics(self, request: web.Request) -> web.Response:
        b = self.behaviour
        if b.metrics == "missing":
            return web.Response(status=404, text="Not Found")
        lab = 'engine="0",model_name="fake-model"'
        lines = [
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {float(self.gen_tokens)}",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lab}}} {float(self.prompt_tokens)}",
        ]
        if b.metrics == "ok":
            lines += [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(self.drafts)}",
                "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(self.draft_tokens)}",
                "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(self.accepted)}",
                "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
            ]
            for pos in range(b.draft_k):
                v = float(self.accepted_per_pos.get(pos, 0))
                lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{pos}"}} {v}')
            lines.append("# TYPE gb300lane_engine_drafts_by_length_total counter")
            for length, v in sorted(self.drafts_by_length.items()):
                lines.append(f'gb300lane_engine_drafts_by_length_total{{{lab},length="{length}"}} {float(v)}')
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def _tokens(self, body: dict[str, Any], n: int) -> list[str]:
        prompt = body.get("prompt") or json.dumps(body.get("messages"), sort_keys=True)
        key = prompt if not body.get("temperature") else f"{prompt}|{body.get('seed')}|{body.get('temperature')}"
        if not body.get("temperature") and prompt in self.behaviour.perturb_greedy:
            key += "|perturbed"
        out = []
        for i in range(n):
            h = hashlib.sha256(f"{key}:{i}".encode()).digest()[0]
            words = self.behaviour.words or WORDS
            out.append(" " + words[h % len(words)])
        return out

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        try:
            return await self._stream(request)
        finally:
            self.in_flight -= 1

    def _draft_length(self) -> int:
        b = self.behaviour
        for start, end, k in b.schedule or ():
            if start <= self.in_flight <= end:
                return min(k, b.draft_k)
        return b.draft_k

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        b = self.behaviour
        body = await request.json()
        index = len(self.requests)
        self.requests.append(body)
        arrived = time.perf_counter()
        if index in b.fail_requests:
            status = b.fail_requests[index]
            return web.json_response({"error": {"message": f"injected {status}"}}, status=status)
        chat = request.path.endswith("/chat/completions")
        n = b.short.get(index, int(body["max_tokens"]))
        tokens = self._tokens(body, n)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        held: list[bytes] = []

        async def emit(obj: dict[str, Any] | bytes) -> None:
            if not isinstance(obj, bytes):
                obj = f"data: {json.dumps(obj, ensure_ascii=b.ensure_ascii)}\n\n".encode()
            data = obj.replace(b"\n", b"\r\n") if b.crlf else obj
            if b.split_reads is not None:
                held.append(data)
            else:
                await resp.write(data)

        self.prompt_tokens += 10
        self.gen_tokens += b.foreign_tokens_per_request
        if chat:
            # vLLM opens a chat stream with a role-only chunk that carries no tokens and no usage.
            role = {
                "id": f"req-{index}",
                "object": "chunk",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
            }
            await emit(role)
        sent = 0
        step = 0
        wall_times: list[float] = []
        modelled: list[float] = []
        while sent < n:
            take = tokens[sent : sent + b.tokens_per_step]
            if b.tokens_per_step > 1:
                acc = len(take) - 1
                k = self._draft_length()
                self.drafts += 1
                self.draft_tokens += k
                self.accepted += acc
                self.drafts_by_length[k] = self.drafts_by_length.get(k, 0) + 1
                for pos in range(acc):
                    self.accepted_per_pos[pos] = self.accepted_per_pos.get(pos, 0) + 1
            sent += len(take)
            self.gen_tokens += len(take)
            now = time.perf_counter() - arrived
            wall_times += [now] * len(take)
            modelled += [b.modelled_ttft_s + step * b.modelled_step_s] * len(take)
            text = "".join(take)
            choice: dict[str, Any] = (
                {"index": 0, "delta": {"content": text}, "finish_reason": None}
                if chat
                else {"index": 0, "text": text, "finish_reason": None}
            )
            chunk: dict[str, Any] = {"id": f"req-{index}", "object": "chunk", "choices": [choice]}
            if b.continuous_usage:
                chunk["usage"] = {"prompt_tokens": 10, "completion_tokens": sent, "total_tokens": 10 + sent}
            if b.gated:
                await self._gate.acquire()  # type: ignore[union-attr]
            await emit(chunk)
            with self._written:
                self.chunks_written += 1
                self._written.notify_all()
            if index in b.malformed and step == 2:
                await resp.write(b"data: {not json\n\n")
            if index in b.stall and step == 1:
                await asyncio.sleep(1)
            if index in b.cut and step == 3:
                await resp.write(b'data: {"id": "req", "choi')
                request.transport.close()  # type: ignore[union-attr]
                return resp
            step += 1
            await asyncio.sleep(b.step_sleep_s)
        if index in b.no_done:
            await resp.write_eof()
            return resp
        finish = {
            "id": f"req-{index}",
            "object": "chunk",
            "choices": [{"index": 0, "text": "", "delta": {}, "finish_reason": "length"}],
        }
        await emit(finish)
        final: dict[str, Any] = {
            "id": f"req-{index}",
            "object": "chunk",
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n},
        }
        if b.engine_ext:
            final["gb300lane"] = {
                "modelled_ttft_s": modelled[0] if modelled else 0.0,
                "modelled_e2e_s": modelled[-1] if modelled else 0.0,
                "modelled_token_times_s": modelled,
                "wall_token_times_s": wall_times,
            }
        await emit(final)
        await emit(b"data: [DONE]\n\n")
        if b.split_reads is not None:
            for piece in b.split_reads(b"".join(held)):
                await resp.write(piece)
                await asyncio.sleep(0.003)  # long enough for each piece to be its own read
        await resp.write_eof()
        return resp
