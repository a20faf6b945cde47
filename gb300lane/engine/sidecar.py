"""The expert sidecar stand-in and the engine's client for it.

The lane is two containers: the engine, and the expert-sidecar hook that
serves routed-expert lookups from a second GPU. The stand-in keeps that shape
on one host: `POST /v1/routed_experts` with the token ids of verified tokens
returns, per token, the top experts of each MoE layer (a fixed hash of the
token, as a router would be fixed by the weights), with `/health` and its own
`/metrics`.

The engine's client batches: the tokens verified since the last call go out
as one lookup at most every `LOOKUP_INTERVAL_S` of wall time, off the step
path, so the sidecar costs the decode loop nothing per step and the
performance floor holds; calls and failures are counted in the engine's
/metrics.
"""

from __future__ import annotations

import asyncio
import json
from typing import cast

import aiohttp
import numpy as np
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, generate_latest

NUM_EXPERTS = 256
EXPERTS_PER_TOKEN = 8
MOE_LAYERS = 4  # a sample of layers: enough to exercise the lookup, cheap to answer
LOOKUP_INTERVAL_S = 0.25
MAX_TOKENS_PER_LOOKUP = 4096
HEALTH_RETRY_S = 1.0


def routed_experts(tokens: np.ndarray) -> np.ndarray:
    """(N, MOE_LAYERS, EXPERTS_PER_TOKEN) expert ids: a fixed multiplicative hash per token and layer."""
    t = tokens.astype(np.uint64)[:, None, None]
    layer = np.arange(MOE_LAYERS, dtype=np.uint64)[None, :, None]
    slot = np.arange(EXPERTS_PER_TOKEN, dtype=np.uint64)[None, None, :]
    mixed = (t * np.uint64(2654435761) + layer * np.uint64(40503) + slot * np.uint64(97)) % np.uint64(NUM_EXPERTS)
    return cast(np.ndarray, mixed.astype(np.int64))


def build_sidecar_app() -> web.Application:
    registry = CollectorRegistry()
    lookups = Counter("gb300lane_sidecar_lookups", "Routed-expert lookups served.", registry=registry)
    tokens_served = Counter("gb300lane_sidecar_tokens", "Tokens whose experts were looked up.", registry=registry)

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    async def lookup(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            tokens = body["tokens"]
            if not isinstance(tokens, list) or any(
                isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in tokens
            ):
                raise ValueError("tokens must be a list of non-negative integers")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            return web.json_response({"error": {"message": f"bad lookup body: {exc}", "code": 400}}, status=400)
        experts = (
            routed_experts(np.asarray(tokens, dtype=np.int64))
            if tokens
            else np.zeros((0, MOE_LAYERS, EXPERTS_PER_TOKEN))
        )
        lookups.inc()
        tokens_served.inc(len(tokens))
        # The union is what a step would stream from the sidecar: report its size, not the rows.
        return web.json_response(
            {"tokens": len(tokens), "layers": MOE_LAYERS, "unique_experts": int(np.unique(experts).size)}
        )

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/routed_experts", lookup)
    return app


class SidecarClient:
    """The engine side: readiness probe and batched lookups (see the module docstring)."""

    def __init__(self, base_url: str, on_call) -> None:
        self.base_url = base_url
        self.on_call = on_call  # on_call(ok: bool) counts the call in the engine's metrics
        self.pending: list[int] = []
        self._session: aiohttp.ClientSession | None = None

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        return self._session

    async def healthy(self) -> str | None:
        """None when /health answers 200, else what went wrong."""
        try:
            session = await self._get_session()
            async with session.get(f"{self.base_url}/health") as resp:
                return None if resp.status == 200 else f"HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def note_tokens(self, tokens: list[int]) -> None:
        room = MAX_TOKENS_PER_LOOKUP - len(self.pending)
        if room > 0:
            self.pending.extend(tokens[:room])

    async def flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        ok = False
        try:
            session = await self._get_session()
            async with session.post(f"{self.base_url}/v1/routed_experts", json={"tokens": batch}) as resp:
                await resp.read()
                ok = resp.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            ok = False
        self.on_call(ok)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(LOOKUP_INTERVAL_S)
            await self.flush()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _serve_sidecar(host: str, port: int) -> None:
    import signal

    from gb300lane.errors import EngineError

    runner = web.AppRunner(build_sidecar_app(), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise EngineError(
            f"sidecar --host {host} --port {port}: cannot bind ({exc.strerror or exc}); pick a free port"
        ) from exc
    print(f"INFO expert sidecar stand-in serving routed-expert lookups on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def serve_sidecar(host: str, port: int) -> None:
    """Run the sidecar stand-in until SIGTERM/SIGINT (the `sidecar` command)."""
    asyncio.run(_serve_sidecar(host, port))
