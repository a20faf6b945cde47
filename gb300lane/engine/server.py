"""The embedded engine's HTTP server: vLLM's OpenAI-compatible API over the engine core.

Owns the event loop side of the engine: the boot task (modelled boot, then
the sidecar readiness wait), the step loop (continuous batching, pacing wall
time to modelled time x --time-scale, delivering tokens to waiting
responses), the periodic stats log, and the handlers for /health,
/v1/models, /version, /metrics, /v1/completions, /v1/chat/completions,
/tokenize and /detokenize.
/health is 503 until the boot finished and a configured sidecar answered.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import time
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gb300lane.engine.api import (
    ApiError,
    ChatDeltas,
    GenerateRequest,
    Scores,
    chunk,
    final_body,
    parse_detokenize,
    parse_request,
    parse_tokenize,
    spec_metrics,
    timing_extension,
    usage,
)
from gb300lane.engine.args import EngineArgs
from gb300lane.engine.config import SpecConfig
from gb300lane.engine.core import EngineCore, Sequence, StepOutcome
from gb300lane.engine.faults import parse_faults
from gb300lane.engine.grammar import Grammar, GrammarError, compile_constraint
from gb300lane.engine.logprobs import (
    chat_logprobs_json,
    completion_logprobs_json,
    processed,
    prompt_logprobs_json,
    score_positions,
)
from gb300lane.engine.model import BuiltinModel, builtin_config, load_model, model_hash
from gb300lane.engine.modelled_boot import VLLM_VERSION, VllmLog, checkpoint_identity, plan_boot, run_boot
from gb300lane.engine.responses import chat_body, response_body
from gb300lane.engine.served_metrics import EngineMetrics
from gb300lane.engine.sidecar import HEALTH_RETRY_S, SidecarClient
from gb300lane.errors import EngineError

if TYPE_CHECKING:
    from pydantic import JsonValue

    from gb300lane.engine.tokenizer import Tokenizer

ENGINE_NAME = "gb300lane-embedded"
#: Seconds a connection may take to send a whole request head (from connect, or from the end of
#: its last response); also how long an idle keep-alive connection stays open. A client that
#: trickles its headers is closed, as uvicorn's keep-alive timeout closes vLLM's.
HEADER_READ_TIMEOUT_S = 15.0
#: Seconds a request body may take to arrive once its head has; past it the answer is 408.
BODY_READ_TIMEOUT_S = 60.0
#: The largest request body, as vLLM's server accepts (bytes).
MAX_BODY_BYTES = 64 * 2**20
#: Bodies up to this many bytes are parsed, and prompts up to this many characters tokenized, on the
#: event loop (about 0.1 ms and 1 ms at most, against a worker thread's hand-off); larger ones in a worker
#: thread, so a long prompt never holds the steps or /health.
INLINE_BODY_BYTES = 64 * 2**10
INLINE_PROMPT_CHARS = 4096


class _Stream:
    """Per-request delivery: text so far, stop strings, and what the handler has yet to send.

    The step loop appends (text, token count) pieces; the handler takes everything
    pending at once, so a handler that fell behind sends one merged chunk instead
    of a backlog (as vLLM's output collector merges deltas a slow consumer has not
    taken). Token counts travel with their text so per-chunk usage is exact.
    """

    def __init__(self, seq: Sequence, stop: list[str]) -> None:
        self.seq = seq
        self.stop = stop
        self.text = ""
        self.closed = False  # finished or failed: the step loop adds nothing more
        self.error: str | None = None
        self._text: list[str] = []
        self._tokens = 0
        self.wake = asyncio.Event()
        # Set by the handler while it waits with nothing pending: the step loop writes the step's
        # chunk itself (`_Stream.deliver`), without waking the handler; None means push and wake.
        self.writer: Callable[[str, int], bool] | None = None

    def deliver(self, text: str, tokens: int) -> None:
        """A step's text and token count: written at once where the handler armed a writer, else pushed."""
        writer = self.writer
        if writer is not None and not self.closed:
            if writer(text, tokens):
                return
            self.writer = None  # the socket is backed up (or going): the handler writes, draining, from here
        self.push(text, tokens)

    def push(self, text: str, tokens: int) -> None:
        self._text.append(text)
        self._tokens += tokens
        self.wake.set()

    @property
    def pending(self) -> bool:
        """Whether a step's text or tokens wait for the handler."""
        return bool(self._text)

    def take(self) -> tuple[str, int, bool]:
        """(pending text, pending tokens, whether the stream is closed), clearing what was pending."""
        text, tokens = "".join(self._text), self._tokens
        self._text, self._tokens = [], 0
        self.wake.clear()
        return text, tokens, self.closed


class EngineServer:
    """One engine: core, metrics, tasks and the aiohttp app."""

    def __init__(
        self,
        args: EngineArgs,
        *,
        log: VllmLog | None = None,
        model: BuiltinModel | None = None,
        body_read_timeout_s: float = BODY_READ_TIMEOUT_S,
    ) -> None:
        self.args = args
        self.body_read_timeout_s = body_read_timeout_s
        self.log = log or VllmLog()
        self.model = model or load_model()
        self.tokenizer = self.model.tokenizer
        self.core = EngineCore(
            self.model,
            args.spec,
            max_num_seqs=args.max_num_seqs,
            seed=args.seed,
            boot_seed=args.boot_seed,
            numerics_jitter=args.numerics_jitter,
            faults=parse_faults([args.faults]),
        )
        self.log.info("engine.py:1", reproducibility_line(args.spec, self.core.boot_seed, self.core.numerics_jitter))
        if args.faults:
            self.log.warning(
                "engine.py:1",
                f"FAULTS ON: {args.faults}: this engine's verifier is lossy on purpose "
                "(--fault / GB300LANE_FAULT); its outputs do not follow the target's distribution",
            )
        self.metrics = EngineMetrics(args.served_model_name)
        self.sidecar = SidecarClient(args.expert_sidecar_url, self.metrics.sidecar) if args.expert_sidecar_url else None
        self.booted = False
        self.ready = False
        self.boot_modelled_s: float | None = None
        self._streams: dict[str, _Stream] = {}
        self._work = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = time.time()
        self._last_prompt = 0
        #: Why the boot failed (a forced cache load that did not load): the server exits 1 with it.
        self.fatal: str | None = None
        self.fatal_event = asyncio.Event()
        self._checkpoint = checkpoint_identity(model_hash(), self.tokenizer.pieces, builtin_config())

    # ---- lifecycle -------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors_middleware], client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ping", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.metrics_handler)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    def runner(self, *, header_read_timeout_s: float = HEADER_READ_TIMEOUT_S) -> web.AppRunner:
        """The app's runner with the engine's connection limits (see HEADER_READ_TIMEOUT_S)."""
        return web.AppRunner(self.app(), access_log=None, handle_signals=False, keepalive_timeout=header_read_timeout_s)

    async def _on_startup(self, _: web.Application) -> None:
        self._tasks = [
            asyncio.create_task(self._boot()),
            asyncio.create_task(self._loop()),
            asyncio.create_task(self._stats()),
        ]
        if self.sidecar is not None:
            self._tasks.append(asyncio.create_task(self.sidecar.run()))

    async def _on_cleanup(self, _: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.sidecar is not None:
            await self.sidecar.flush()
            await self.sidecar.close()

    async def _boot(self) -> None:
        plan = plan_boot(self.args)
        try:
            self.boot_modelled_s = await run_boot(self.args, plan, self.log)
        except EngineError as exc:
            self.fatal = str(exc)
            self.fatal_event.set()
            return
        self.booted = True
        if self.sidecar is not None:
            attempt = 0
            while True:
                problem = await self.sidecar.healthy()
                if problem is None:
                    self.log.info("expert_sidecar.py:88", f"Expert sidecar at {self.sidecar.base_url} is healthy")
                    break
                attempt += 1
                self.log.warning(
                    "expert_sidecar.py:92",
                    f"Waiting for the expert sidecar at {self.sidecar.base_url}/health (attempt {attempt}: {problem}); "
                    f"not ready until it answers, retrying every {HEALTH_RETRY_S:.0f} s",
                )
                await asyncio.sleep(HEALTH_RETRY_S)
        self.log.info("api_server.py:1971", f"Starting vLLM server on http://{self.args.host}:{self.args.port}")
        self.log.info("on.py:62", "Application startup complete.")
        self.ready = True

    # ---- the step loop ---------------------------------------------------------------------

    async def _loop(self) -> None:
        wall_anchor: float | None = None
        modelled_anchor = 0.0
        while True:
            scale = self.args.time_scale
            if not self.core.has_work:
                self._work.clear()
                wall_anchor = None
                await self._work.wait()
            if wall_anchor is None:
                wall_anchor, modelled_anchor = time.monotonic(), self.core.clock
            try:
                outcome = self.core.step()
            except Exception as exc:  # noqa: BLE001 (a step bug must fail its requests, not hang them)
                self._fail_all(exc)
                continue
            if outcome is None:
                continue
            if scale > 0 and wall_anchor is not None:
                delay = wall_anchor + (self.core.clock - modelled_anchor) * scale - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            self._deliver(outcome)
            # Yield after delivering, before the next step's compute: the handlers woken by this
            # step write (and new requests are read) now, not one step's compute later.
            await asyncio.sleep(0)

    def _deliver(self, outcome: StepOutcome) -> None:
        now = time.monotonic()
        for seq, new in outcome.emitted:
            # Stamp wall time at delivery, after pacing, which is when a client sees the tokens.
            seq.token_wall[-len(new) :] = [now - seq.arrival_wall] * len(new)
            if self.sidecar is not None:
                self.sidecar.note_tokens(new)
            stream = self._streams.get(seq.request_id)
            if stream is None or stream.closed:
                continue
            delta = self.tokenizer.decode(new)
            if stream.stop:
                delta = self._apply_stop(stream, delta)
            else:
                stream.text += delta
            # A step whose text is empty still delivers its tokens: they ride on the next chunk's usage.
            stream.deliver(delta, len(new))
        for seq in outcome.finished:
            self._finish(seq)
        # The Prometheus counters are brought up to the core's when /metrics is read (metrics_handler).

    def _fail_all(self, exc: Exception) -> None:
        self.log.error(
            "core.py:512", f"EngineCore step failed: {type(exc).__name__}: {exc}; failing the requests in flight"
        )
        for seq in list(self.core.running) + list(self.core.waiting):
            self.core.abort(seq)
            stream = self._streams.pop(seq.request_id, None)
            if stream is not None:
                stream.closed = True
                stream.error = f"{type(exc).__name__}: {exc}"
                stream.wake.set()

    def _apply_stop(self, stream: _Stream, delta: str) -> str:
        before = len(stream.text)
        text = stream.text + delta
        window = max(len(s) for s in stream.stop)
        hits = [i for i in (text.find(s, max(0, before - window + 1)) for s in stream.stop) if i >= 0]
        if not hits:
            stream.text = text
            return delta
        cut = min(hits)
        stream.text = text[:cut]
        seq = stream.seq
        seq.finish_reason = "stop"
        self.core.abort(seq)
        self._finish(seq)
        return stream.text[before:]

    def _finish(self, seq: Sequence) -> None:
        stream = self._streams.get(seq.request_id)
        if stream is None or stream.closed:
            return
        stream.closed = True
        stream.error = seq.error
        self.metrics.finished(seq)
        stream.wake.set()
        self._streams.pop(seq.request_id, None)

    async def _stats(self) -> None:
        interval = float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10") or 10)
        last: tuple[int, int, int, int, list[int], float] = (0, 0, 0, 0, [], time.monotonic())
        while True:
            await asyncio.sleep(interval)
            c = self.core.counters
            now = time.monotonic()
            drafts, drafted, accepted, gen, pos, then = last
            prompt = c.prompt_tokens
            elapsed = max(now - then, 1e-9)
            if c.generation_tokens == gen and c.num_drafts == drafts:
                last = (drafts, drafted, accepted, gen, pos, now)
                continue
            self.log.info(
                "loggers.py:257",
                f"Engine 000: Avg prompt throughput: {(prompt - self._last_prompt) / elapsed:.1f} tokens/s, "
                f"Avg generation throughput: {(c.generation_tokens - gen) / elapsed:.1f} tokens/s, "
                f"Running: {len(self.core.running)} reqs, Waiting: {len(self.core.waiting)} reqs, "
                f"GPU KV cache usage: {self._kv_usage():.1f}%, Prefix cache hit rate: 0.0%",
            )
            self._last_prompt = prompt
            d_drafts = c.num_drafts - drafts
            if d_drafts > 0:
                d_acc = c.num_accepted - accepted
                d_draft_tokens = c.num_draft_tokens - drafted
                per_pos = [
                    (now_pos - (pos[i] if i < len(pos) else 0)) / d_drafts
                    for i, now_pos in enumerate(c.accepted_per_pos)
                ]
                self.log.info(
                    "metrics.py:96",
                    f"SpecDecoding metrics: Mean acceptance length: {1 + d_acc / d_drafts:.2f}, "
                    f"Accepted throughput: {d_acc / elapsed:.2f} tokens/s, "
                    f"Drafted throughput: {d_draft_tokens / elapsed:.2f} tokens/s, "
                    f"Accepted: {d_acc} tokens, Drafted: {d_draft_tokens} tokens, "
                    f"Per-position acceptance rate: {', '.join(f'{r:.3f}' for r in per_pos)}, "
                    f"Avg Draft acceptance rate: {100 * d_acc / max(d_draft_tokens, 1):.1f}%",
                )
            last = (
                c.num_drafts,
                c.num_draft_tokens,
                c.num_accepted,
                c.generation_tokens,
                list(c.accepted_per_pos),
                now,
            )

    def _kv_usage(self) -> float:
        used = sum(s.context_len for s in self.core.running)
        return 100.0 * used / self.args.kv_pool_tokens

    # ---- handlers --------------------------------------------------------------------------

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def models(self, _: web.Request) -> web.Response:
        name = self.args.served_model_name
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": int(self._started),
                        "owned_by": "vllm",
                        "root": self.args.model,
                        "parent": None,
                        "max_model_len": self.args.max_model_len,
                        "permission": [],
                    }
                ],
            }
        )

    async def version(self, _: web.Request) -> web.Response:
        body: dict[str, object] = {
            "version": VLLM_VERSION,
            "engine": ENGINE_NAME,
            "time_scale": self.args.time_scale,
            "checkpoint": self._checkpoint,
        }
        if self.args.faults:
            body["faults"] = self.args.faults
        return web.json_response(body)

    async def metrics_handler(self, _: web.Request) -> web.Response:
        self.metrics.sync(self.core.counters, len(self.core.running), len(self.core.waiting))
        return web.Response(
            body=self.metrics.exposition(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's /tokenize: a completion prompt or chat messages, as the generate routes tokenize them."""
        body = await self._read_json(request)
        text, strs = parse_tokenize(body, served_model_name=self.args.served_model_name)
        ids = await asyncio.to_thread(self.tokenizer.encode, text)
        out: dict[str, Any] = {
            "count": len(ids),
            "max_model_len": self.args.max_model_len,
            "tokens": ids,
            "token_strs": [self.tokenizer.pieces[i] for i in ids] if strs else None,
        }
        return web.json_response(out)

    async def detokenize(self, request: web.Request) -> web.Response:
        """vLLM's /detokenize: token ids back to text (special tokens skipped, as vLLM's default)."""
        body = await self._read_json(request)
        ids = parse_detokenize(
            body, served_model_name=self.args.served_model_name, vocab_size=self.tokenizer.vocab_size
        )
        return web.json_response({"prompt": self.tokenizer.decode(ids)})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """vLLM's /v1/responses for text: the chat turn it is, answered as a `response` object (responses.py)."""
        body = await self._read_json(request)
        answer = await self._generate(request, chat=True, body=chat_body(body))
        if not isinstance(answer, web.Response) or answer.status != 200 or answer.body is None:
            return answer
        chat = json.loads(bytes(answer.body))  # type: ignore[arg-type]
        return web.json_response(response_body(body, chat))

    def _prepare(self, req: GenerateRequest, ids: list[int] | int) -> Sequence:
        """The request's Sequence; `ids` is the prompt's ids, or only their count when it is over the limit."""
        vocab = self.tokenizer.vocab_size
        if isinstance(ids, int):
            count, max_tokens = ids, req.params.max_tokens or 1
            raise ApiError(
                f"This model's maximum context length is {self.args.max_model_len} tokens. However, you requested "
                f"{count + max_tokens} tokens ({count} in the messages, {max_tokens} in the completion). Please "
                "reduce the length of the messages or completion.",
                param="max_tokens",
            )
        if not ids:
            raise ApiError("the prompt is empty; send at least one token", param="prompt")
        if req.prompt_ids is not None and (min(ids) < 0 or max(ids) >= vocab):
            raise ApiError(f"prompt token ids must lie in [0, {vocab})", param="prompt")
        limit = self.args.max_model_len
        params = req.params
        if params.max_tokens == 0:
            params.max_tokens = max(1, limit - len(ids))
        if len(ids) + params.max_tokens > limit:
            raise ApiError(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{len(ids) + params.max_tokens} tokens ({len(ids)} in the messages, {params.max_tokens} in the "
                "completion). Please reduce the length of the messages or completion.",
                param="max_tokens",
            )
        return Sequence(request_id=req.request_id, prompt_ids=list(ids), params=params)

    async def _read_json(self, request: web.Request) -> Any:
        """The request body as JSON: read within the body timeout, parsed off the event loop."""
        try:
            raw = await asyncio.wait_for(request.read(), self.body_read_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(
                f"the request body is larger than {MAX_BODY_BYTES // 2**20} MiB; send a shorter prompt", status=413
            ) from None
        except TimeoutError:
            raise ApiError(
                f"the request body did not arrive within {self.body_read_timeout_s:g} s; send the whole body at once",
                status=408,
            ) from None
        if len(raw) <= INLINE_BODY_BYTES:
            return parse_json_body(raw)
        return await asyncio.to_thread(parse_json_body, raw)

    async def _generate(self, request: web.Request, *, chat: bool, body: Any = None) -> web.StreamResponse:
        if not self.ready:
            raise ApiError("the engine is still starting; retry when /health answers 200", status=503)
        if body is None:
            body = await self._read_json(request)
        req = parse_request(
            body,
            chat=chat,
            served_model_name=self.args.served_model_name,
            max_logprobs=self.args.max_logprobs,
            vocab_size=self.tokenizer.vocab_size,
        )
        # A long prompt is tokenized in a worker thread, so /health and other requests keep answering.
        text = req.prompt_text or ""
        if req.prompt_ids is not None:
            ids: list[int] | int = req.prompt_ids
        elif len(text) <= INLINE_PROMPT_CHARS:
            ids = encode_within(self.tokenizer, text, self.args.max_model_len)
        else:
            ids = await asyncio.to_thread(encode_within, self.tokenizer, text, self.args.max_model_len)
        seq = self._prepare(req, ids)
        seq.grammar = await self._grammar(req)
        stream = _Stream(seq, req.stop)
        try:
            self.core.add(seq)
        except EngineError as exc:
            raise ApiError(str(exc)) from None
        self._streams[seq.request_id] = stream
        self._work.set()
        try:
            if req.stream:
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
                try:
                    await resp.prepare(request)
                    await self._stream_response(resp, req, stream, request)
                except ConnectionResetError:
                    # The client went away mid-stream: abort its request (finally below), one line, no traceback.
                    self.log.info(
                        "serving_chat.py:1401" if req.chat else "serving_completion.py:402",
                        f"Request {seq.request_id} aborted: the client disconnected after {len(seq.output_ids)} tokens",
                    )
                return resp

            def quiet(text: str, tokens: int) -> bool:
                # A whole answer is written once, at the end (stream.text holds the text): the step loop
                # wakes this handler only when the client has gone, or (_finish) when the answer is done.
                transport = request.transport
                return transport is not None and not transport.is_closing()

            while not stream.closed:
                stream.writer = quiet
                await stream.wake.wait()
                stream.writer = None
                stream.wake.clear()
                if request.transport is None or request.transport.is_closing():
                    # Gone before its answer: stop generating for it (finally below), as vLLM aborts it.
                    self.log.info(
                        "serving_chat.py:1401" if req.chat else "serving_completion.py:402",
                        f"Request {seq.request_id} aborted: the client disconnected after {len(seq.output_ids)} tokens",
                    )
                    return web.Response(status=499)
            if stream.error is not None:
                return web.json_response(
                    {
                        "error": {
                            "message": f"engine step failed: {stream.error}",
                            "type": "InternalServerError",
                            "param": None,
                            "code": 500,
                        }
                    },
                    status=500,
                )
            scores = (
                await asyncio.to_thread(self._scores, req, seq)
                if req.logprobs is not None or req.prompt_logprobs is not None or req.echo
                else None
            )
            return web.json_response(
                final_body(
                    req,
                    self.args.served_model_name,
                    seq,
                    stream.text,
                    self.args.per_request_spec_decode_metrics,
                    scores=scores,
                    faults=self.args.faults,
                )
            )
        finally:
            if not seq.finished:
                self.core.abort(seq)
            self._streams.pop(seq.request_id, None)

    def _scores(self, req: GenerateRequest, seq: Sequence) -> Scores:
        """A finished answer's logprobs, prompt logprobs and echo (logprobs.py says what the numbers are)."""
        tok = self.tokenizer
        params = processed(seq.params) if self.args.logprobs_mode == "processed_logprobs" else None
        ids = seq.prompt_ids + seq.output_ids
        n_prompt = len(seq.prompt_ids)

        def score(start: int, end: int, k: int):
            return score_positions(self.model, self.core.numerics, seq.cls, ids, start, end, k, params=params)

        prompt = score(1, n_prompt, req.prompt_logprobs) if req.prompt_logprobs is not None else None
        logprobs: dict[str, Any] | None = None
        if req.logprobs is not None:
            out = score(n_prompt, len(ids), req.logprobs)
            if req.chat:
                logprobs = chat_logprobs_json(tok, out, req.logprobs)
            elif req.echo and prompt is not None:
                logprobs = completion_logprobs_json(tok, ids, [None, *prompt, *out], req.logprobs)
            else:
                logprobs = completion_logprobs_json(tok, seq.output_ids, list(out), req.logprobs)
        echo = (req.prompt_text if req.prompt_text is not None else tok.decode(seq.prompt_ids)) if req.echo else ""
        return Scores(
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs_json(tok, prompt) if prompt is not None else None,
            echo_text=echo,
        )

    async def _grammar(self, req: GenerateRequest) -> Grammar | None:
        """The request's grammar (forced tool call or response_format), after vLLM's tool flag checks."""
        mode = req.tools.mode
        if mode == "auto" and not (self.args.enable_auto_tool_choice and self.args.tool_call_parser):
            raise ApiError('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
        if mode in ("required", "named") and not self.args.tool_call_parser:
            shown = "required" if mode == "required" else {"type": "function", "function": {"name": req.tools.name}}
            raise ApiError(f'tool_choice="{shown}" requires --tool-call-parser to be set')
        constraint = req.decoding_constraint
        if constraint is None:
            return None
        try:
            text = await asyncio.to_thread(compile_constraint, self.tokenizer, constraint.kind, constraint.value)
            return Grammar(self.tokenizer, text)
        except GrammarError as exc:
            raise ApiError(
                f"the {constraint.kind} constraint in {constraint.source} cannot be used for structured output: {exc}",
                param=constraint.source,
            ) from None

    @web.middleware
    async def _errors_middleware(self, request: web.Request, handler):
        try:
            return await handler(request)
        except ApiError as exc:
            return web.json_response(exc.body(), status=exc.status)
        except web.HTTPException:
            raise
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 (a bug answers as vLLM's server does: JSON, 500, one log line)
            self.log.error("api_server.py:1102", f"{request.method} {request.path} failed: {type(exc).__name__}: {exc}")
            body = {
                "error": {
                    "message": f"{type(exc).__name__}: {exc}",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            }
            return web.json_response(body, status=500)

    async def _stream_response(
        self,
        resp: web.StreamResponse,
        req: GenerateRequest,
        stream: _Stream,
        request: web.Request,
    ) -> None:
        """Write the SSE stream; each token's reported wall time is when its chunk is written.

        `sent` counts the tokens whose chunks have been written: per-chunk usage
        reports it, and a step with no text adds its tokens to the next chunk.
        A plain text stream (a completion, or a chat without tools), once its
        first chunk is out, arms `stream.writer`: the step loop then writes each
        step's chunk itself, the chunk's bytes built from a template of this
        stream's chunk (`SseChunk`, the same bytes `json.dumps` gives), one
        encode and one socket write per stream per step, no handler wake-up.
        The handler writes again (and drains) whenever the socket's buffer is
        backed up, and for the first chunk, the tool-call deltas and the end.
        """
        name = self.args.served_model_name
        seq = stream.seq
        continuous = req.include_usage and req.continuous_usage
        sent = 0

        def encode(obj: dict[str, Any], tokens: int = 0) -> bytes:
            nonlocal sent
            data = b"data: " + json.dumps(obj).encode() + b"\n\n"
            if tokens:
                # The send time, not the step's: what a client's arrival times are measured against.
                seq.token_wall[sent : sent + tokens] = [time.monotonic() - seq.arrival_wall] * tokens
                sent += tokens
            return data

        async def send(obj: dict[str, Any], tokens: int = 0) -> None:
            await resp.write(encode(obj, tokens))

        prompt_ids_sent = False

        def with_usage(obj: dict[str, Any], tokens: int) -> dict[str, Any]:
            nonlocal prompt_ids_sent
            if continuous:
                obj["usage"] = usage(seq, sent + tokens)
            if req.return_token_ids and obj["choices"]:
                # vLLM's return_token_ids: each chunk's choice carries the ids of the tokens it delivers
                obj["choices"][0]["token_ids"] = seq.output_ids[sent : sent + tokens]
                if not prompt_ids_sent:
                    # ... and the prompt's ids come once: on the first chunk's choice of a completion, on the
                    # first chunk's body of a chat
                    (obj if req.chat else obj["choices"][0])["prompt_token_ids"] = list(seq.prompt_ids)
                    prompt_ids_sent = True
            return obj

        first = True
        if req.chat:
            await send(with_usage(chunk(req, name, "", None, first=True), 0))
            first = False
        deltas = ChatDeltas(req) if req.chat else None
        carry = 0

        async def emit(text: str, fields: list[dict[str, Any]] | None) -> None:
            # Held-back steps' tokens ride on the next chunk sent (exact per-chunk usage).
            nonlocal first, carry
            if fields is None:
                if text:
                    await send(with_usage(chunk(req, name, text, None, first=first), carry), carry)
                    first, carry = False, 0
                return
            if not fields and text and continuous:
                # Text the tool parser holds back (a call still being written): its tokens go out now in
                # a chunk with an empty delta, so per-chunk usage keeps each token's arrival time.
                fields = [{}]
            for part in fields:
                await send(with_usage(chunk(req, name, None, None, fields=part), carry), carry)
                carry = 0

        # Token ids ride on each chunk when asked for, which the template's bytes do not hold: such a stream is
        # written by the handler, chunk by chunk.
        plain = req.tools.mode == "none" and not req.return_token_ids
        template = SseChunk(req, name, len(seq.prompt_ids), continuous) if plain else None

        def direct(text: str, tokens: int) -> bool:
            # The step loop's write (see the docstring): what `emit` sends for plain text, written now.
            nonlocal sent, carry
            transport = request.transport
            if transport is None or transport.is_closing() or transport.get_write_buffer_size() > SSE_DIRECT_LIMIT:
                return False
            carry += tokens
            if not text:
                return True
            data = template.render(text, int(time.time()), sent + carry)  # type: ignore[union-attr]
            if carry:
                seq.token_wall[sent : sent + carry] = [time.monotonic() - seq.arrival_wall] * carry
                sent, carry = sent + carry, 0
            transport.write(b"%x\r\n%b\r\n" % (len(data), data))
            return True

        while True:
            if template is not None and not first and not stream.pending:
                stream.writer = direct
            await stream.wake.wait()
            stream.writer = None
            text, tokens, closed = stream.take()
            carry += tokens
            if stream.error is not None:
                await send(
                    {
                        "error": {
                            "message": f"engine step failed: {stream.error}",
                            "type": "InternalServerError",
                            "code": 500,
                        }
                    }
                )
                await resp.write(b"data: [DONE]\n\n")
                await resp.write_eof()
                return
            await emit(text, deltas.feed(text) if deltas is not None else None)
            if closed:
                break
        finish = seq.finish_reason
        if deltas is not None:
            await emit("", deltas.finish())
            finish = deltas.finish_reason(finish)
        # Tokens of steps that decoded to no text arrive with the finish chunk.
        last = with_usage(chunk(req, name, "" if not req.chat else None, finish), carry)
        mode = self.args.per_request_spec_decode_metrics
        # The stream's last chunks, [DONE] and the end of the body go out in one write.
        ending: list[bytes] = []
        if req.include_usage:
            ending.append(encode(last, carry))
            carry = 0
            tail: dict[str, Any] = {k: v for k, v in last.items() if k not in ("choices", "usage")}
            tail["choices"] = []
            tail["usage"] = usage(seq)
            last = tail
        elif carry:
            # The extension below reports these tokens' times, so stamp them before it is built.
            seq.token_wall[sent : sent + carry] = [time.monotonic() - seq.arrival_wall] * carry
            sent, carry = sent + carry, 0
        ext = timing_extension(seq)
        # The per-token time lists are written once per run of equal stamps (see `float_list_json`) and put
        # in place of markers: the bytes `json.dumps` writes for the same chunk.
        lists = [(key, float_list_json(ext[key])) for key in _TIME_LISTS]
        for key, _ in lists:
            ext[key] = _TIME_MARKS[key]
        last["gb300lane"] = ext
        metrics = spec_metrics(seq, mode)
        if metrics is not None:
            last["metrics"] = {"speculative_decoding": metrics}
        data = encode(last)
        for key, listed in reversed(lists):
            head, _, rest = data.rpartition(_TIME_MARK_BYTES[key])
            body = listed if listed is not None else json.dumps(timing_extension(seq)[key])
            data = head + body.encode() + rest
        ending.append(data)
        ending.append(b"data: [DONE]\n\n")
        await resp.write_eof(b"".join(ending))


#: The timing extension's per-token lists, and the markers a stream's last chunk holds in their place.
_TIME_LISTS = ("modelled_token_times_s", "wall_token_times_s")
_TIME_MARKS = {key: f"\x00{key}\x00" for key in _TIME_LISTS}
_TIME_MARK_BYTES = {key: json.dumps(mark).encode() for key, mark in _TIME_MARKS.items()}


def float_list_json(values: object) -> str | None:
    """`json.dumps(values)` for a list of finite floats, each run of the same float object formatted once
    (a step's tokens share one stamp object); None where `values` is not a list or a value not a finite float."""
    if not isinstance(values, list):
        return None
    parts: list[str] = []
    last: object = None
    text = ""
    for v in values:
        if v is not last:
            if not isinstance(v, float) or not math.isfinite(v):
                return None
            text, last = float.__repr__(v), v
        parts.append(text)
    return "[" + ", ".join(parts) + "]"


#: Bytes a stream's socket may hold unsent before the step loop stops writing its chunks itself and
#: hands them to the handler, which drains (aiohttp's own write limit).
SSE_DIRECT_LIMIT = 0x10000


class SseChunk:
    """One stream's text chunk as SSE bytes: `json.dumps` of `chunk(...)` (with its usage), filled in.

    The chunk's JSON is rendered once with markers where the text, the
    `created` second and the usage counts go, and cut there; a chunk is then
    the text's JSON string and three integers put between fixed pieces, the
    bytes `json.dumps` writes for the same chunk.
    """

    _MARKS = {"created": "\x00created\x00", "text": "\x00text\x00", "done": "\x00done\x00", "total": "\x00total\x00"}

    def __init__(self, req: GenerateRequest, model: str, prompt_tokens: int, continuous: bool) -> None:
        marks = self._MARKS
        obj = (
            chunk(req, model, None, None, fields={"content": marks["text"]})
            if req.chat
            else chunk(req, model, marks["text"], None)
        )
        obj["created"] = marks["created"]
        if continuous:
            obj["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": marks["done"],
                "total_tokens": marks["total"],
            }
        text = "data: " + json.dumps(obj).replace("%", "%%") + "\n\n"
        found = sorted((text.index(json.dumps(mark)), name) for name, mark in marks.items() if json.dumps(mark) in text)
        order = tuple(name for _, name in found)
        if order != ("created", "text", "done", "total")[: len(order)] or len(order) not in (2, 4):
            raise ValueError(f"a stream chunk's fields came out in an unexpected order: {order}")
        for name in order:
            text = text.replace(json.dumps(marks[name]), "%s")
        self._format = text
        self._continuous = len(order) == 4
        self._prompt = prompt_tokens

    def render(self, text: str, created: int, completion_tokens: int) -> bytes:
        if self._continuous:
            return (
                self._format
                % (created, encode_basestring_ascii(text), completion_tokens, self._prompt + completion_tokens)
            ).encode()
        return (self._format % (created, encode_basestring_ascii(text))).encode()


#: Characters tokenized per slice of a long prompt (see `encode_within`).
ENCODE_SLICE_CHARS = 1 << 20


def encode_within(tokenizer: Tokenizer, text: str, limit: int) -> list[int] | int:
    """`text`'s token ids, or (for a text longer than one slice) only their count when there are more than `limit`.

    A long text is cut into slices of about ENCODE_SLICE_CHARS at newlines (a
    newline is always a piece of its own, so the ids are the same as for the
    whole text) and only counted once past the limit: a 30 MB prompt never
    becomes a 20-million-element list whose growth would hold the interpreter.
    """
    if len(text) <= ENCODE_SLICE_CHARS:
        return tokenizer.encode(text)
    ids: list[int] = []
    count = 0
    start = 0
    while start < len(text):
        end = _piece_boundary(text, start + ENCODE_SLICE_CHARS)
        part = tokenizer.encode(text[start:end])
        count += len(part)
        if count <= limit:
            ids.extend(part)
        start = end
    return ids if count <= limit else count


#: A place no piece spans: after a newline, or before a space that follows a non-blank and starts a word.
_BOUNDARY_RE = re.compile(r"(?<=\n)|(?<=[^ \t])(?= \S)")


def _piece_boundary(text: str, at: int) -> int:
    """The first index at or after `at` where the tokenizer's pieces are cut (the end of text if none)."""
    if at >= len(text):
        return len(text)
    match = _BOUNDARY_RE.search(text, at, min(len(text), at + ENCODE_SLICE_CHARS))
    return match.start() if match and match.start() > 0 else len(text)


def reproducibility_line(spec: SpecConfig | None, boot_seed: int, numerics_jitter: float) -> str:
    """What a seeded request repeats, exactly (the boot log's line; the README says the same). Without a
    speculative config there is no k, so no schedule either."""
    head = f"boot seed {boot_seed}, numerics jitter {numerics_jitter}: "
    tail = "; pass --boot-seed to repeat this boot's numerics across boots"
    if spec is not None and spec.num_speculative_tokens_per_batch_size:
        return head + (
            "under this batch-size k schedule a seeded request repeats within this boot only when its steps run "
            "at the same k (sent alone and sent beside others it may verify at another k and differ from there "
            "on); greedy requests (temperature 0) repeat whatever the batch" + tail
        )
    return head + "seeded requests repeat within this boot whatever the batch (alone or concurrent)" + tail


def parse_json_body(raw: bytes) -> JsonValue:
    """A request body as JSON, or the 400 vLLM gives a body that is not (too deep nesting included)."""
    try:
        body: JsonValue = json.loads(raw)
        return body
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError("the request body is not valid JSON: nested too deeply; send a flatter object") from None
    except ValueError as exc:  # an integer past Python's 4300-digit conversion limit
        raise ApiError(
            f"the request body holds a number too long to read ({exc}); no parameter takes one so "
            "large: send a number of at most 19 digits"
        ) from None


def log_start(args: EngineArgs, log: VllmLog) -> None:
    """The lines vLLM prints before it starts the engine: version, args, resolved config, ignored flags."""
    log.info("api_server.py:1895", f"vLLM API server version {VLLM_VERSION}")
    log.info("utils.py:326", f"non-default args: {args.non_default}")
    spec = args.spec.as_log_dict() if args.spec else None
    log.info("speculative.py:412", f"Resolved speculative config: {json.dumps(spec, sort_keys=True)}")
    log.info(
        "core.py:93",
        f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model={args.model!r}, "
        f"speculative_config={json.dumps(spec, sort_keys=True)}, dtype={args.dtype}, max_seq_len={args.max_model_len}, "
        f"tensor_parallel_size={args.tensor_parallel_size}, seed={args.seed}, served_model_name={args.served_model_name}, "
        f"compilation_config={json.dumps(args.compilation_config, sort_keys=True)}",
    )
    for warning in args.warnings:
        log.warning("speculative.py:430", warning)
    if args.tool_call_parser:
        enabled = '"auto" tool choice has been enabled; ' if args.enable_auto_tool_choice else ""
        log.info(
            "serving_chat.py:146",
            f"{enabled}tool call parser {args.tool_call_parser}: the builtin model writes "
            'tool calls as {"tool_calls": [...]} JSON, which the engine\'s parser reads',
        )
    for flag in args.ignored:
        log.warning("arg_utils.py:1702", f"{_unsecret(flag)}: accepted and ignored by the embedded engine")
    if args.time_scale > 0:
        log.info(
            "engine.py:1", f"time scale {args.time_scale}: wall seconds track modelled seconds x {args.time_scale}"
        )


_SECRET_FLAG = re.compile(r"^(--[\w-]*(?:key|token|secret|password)[\w-]*)([ =]).*$", re.IGNORECASE)


def _unsecret(flag: str) -> str:
    """An ignored flag as the log shows it: a secret-named flag's value left out (`--api-key <secret>`)."""
    return _SECRET_FLAG.sub(r"\1\2<secret>", flag)


async def _serve(args: EngineArgs, log: VllmLog) -> None:
    server = EngineServer(args, log=log)
    runner = server.runner()
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise EngineError(
            f"--host {args.host} --port {args.port}: cannot bind ({exc.strerror or exc}); "
            "pick a free port or stop what holds it"
        ) from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fatal = asyncio.ensure_future(server.fatal_event.wait())
    await asyncio.wait([asyncio.ensure_future(stop.wait()), fatal], return_when=asyncio.FIRST_COMPLETED)
    log.info("launcher.py:110", "Shutting down FastAPI HTTP server.")
    await runner.cleanup()
    if server.fatal is not None:
        raise EngineError(server.fatal)


def serve(args: EngineArgs, *, log: VllmLog | None = None) -> None:
    """Run the engine until SIGTERM/SIGINT (the `serve` command)."""
    log = log or VllmLog()
    log_start(args, log)
    asyncio.run(_serve(args, log))
