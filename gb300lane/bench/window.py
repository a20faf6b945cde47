"""Running a window: seeded requests over (class, concurrency, round) cells.

A window runs its cells in order round -> class -> concurrency, so the two
rounds of a cell are separated in time and their spread measures the lane's
noise. Each cell scrapes /metrics before and after, sends its transcripts
through `concurrency` closed-loop streams, and is summarised by
`cells.summarize_cell`.

Every arm must see identical requests: the per-request seed is a stable hash
of (seed base, transcript id, round), independent of concurrency, order and
arm; the output length is forced (`max_tokens = min_tokens = forced_tokens`,
`ignore_eos`).
"""

from __future__ import annotations

import asyncio
import hashlib
import platform
import sys
import time
from datetime import datetime, timezone
from typing import Any, Protocol

import aiohttp

from gb300lane import __version__
from gb300lane.bench.cells import make_record, summarize_cell
from gb300lane.bench.client import get_json, get_status, scrape_metrics, stream_request
from gb300lane.bench.models import CellResult, RequestRecord, WindowResult
from gb300lane.bench.transcripts import Transcript, select_transcripts
from gb300lane.errors import BenchError
from gb300lane.recipes.schema import WindowSpec

#: Per-request read timeout: a stream silent this long is recorded as stalled.
READ_TIMEOUT_S = 120.0


class WindowProgress(Protocol):
    """What a window reports while it runs (the CLI draws a bar from it)."""

    def window_started(self, window: WindowSpec, cells: int, requests: int) -> None: ...

    def request_done(self, record: RequestRecord) -> None: ...

    def cell_done(self, cell: CellResult) -> None: ...


def derive_seed(seed_base: int, transcript_id: str, round: int) -> int:
    """The per-request sampling seed: a stable 31-bit hash of (seed base, transcript id, round)."""
    digest = hashlib.sha256(f"{seed_base}:{transcript_id}:{round}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def build_request(
    transcript: Transcript, window: WindowSpec, *, model: str, round: int
) -> tuple[str, dict[str, Any], int | None]:
    """(path, JSON body, seed) of one request; chat for tool_json, completions otherwise."""
    seed = None if window.seed_base is None else derive_seed(window.seed_base, transcript.id, round)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": window.forced_tokens,
        "min_tokens": window.forced_tokens,
        "ignore_eos": True,
        "temperature": window.temperature,
        "top_p": window.top_p,
        "stream": True,
        # Per-chunk cumulative usage makes multi-token chunks countable exactly.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if seed is not None:
        body["seed"] = seed
    if transcript.kind == "chat":
        body["messages"] = transcript.messages
        if transcript.tools:
            body["tools"] = transcript.tools
        return "/v1/chat/completions", body, seed
    body["prompt"] = transcript.prompt
    return "/v1/completions", body, seed


def _window_data(window: WindowSpec) -> dict[str, Any]:
    return window.model_dump(mode="json")


async def _run_cell(
    session: aiohttp.ClientSession,
    base: str,
    window: WindowSpec,
    *,
    cls: str,
    concurrency: int,
    round: int,
    model: str,
    progress: WindowProgress | None,
) -> tuple[CellResult, list[RequestRecord]]:
    transcripts = select_transcripts(cls, window.transcripts_per_class)
    before = await scrape_metrics(session, base)
    queue: asyncio.Queue[tuple[int, Transcript]] = asyncio.Queue()
    for item in enumerate(transcripts):
        queue.put_nowait(item)
    records: list[RequestRecord | None] = [None] * len(transcripts)
    t0 = time.perf_counter()

    async def stream(worker: int) -> None:
        while True:
            try:
                index, transcript = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            path, body, seed = build_request(transcript, window, model=model, round=round)
            start = time.perf_counter() - t0
            outcome = await stream_request(session, base + path, body, read_timeout_s=READ_TIMEOUT_S)
            rec = make_record(
                outcome,
                transcript_id=transcript.id,
                cls=cls,
                round=round,
                concurrency=concurrency,
                seed=seed if seed is not None else -1,
                kind=transcript.kind,
                worker=worker,
                start_s=start,
                expected_tokens=window.forced_tokens,
            )
            records[index] = rec
            if progress is not None:
                progress.request_done(rec)

    await asyncio.gather(*(stream(w) for w in range(min(concurrency, len(transcripts)))))
    wall_span = time.perf_counter() - t0
    after = await scrape_metrics(session, base)
    done = [r for r in records if r is not None]
    cell = summarize_cell(
        cls=cls,
        concurrency=concurrency,
        round=round,
        records=done,
        forced_tokens=window.forced_tokens,
        wall_span_s=wall_span,
        before=before,
        after=after,
        model=model,
    )
    if progress is not None:
        progress.cell_done(cell)
    return cell, done


async def _discover_model(session: aiohttp.ClientSession, base: str) -> str:
    body, reason = await get_json(session, f"{base}/v1/models")
    if body is None:
        raise BenchError(f"cannot reach the lane at {base}: {reason}; start it (`gb300lane up RECIPE`) or fix --endpoint")
    try:
        return str(body["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise BenchError(f"{base}/v1/models lists no model; pass the served model name explicitly") from None


async def run_window_async(
    endpoint: str,
    window: WindowSpec,
    *,
    model: str | None = None,
    progress: WindowProgress | None = None,
    recipe: str | None = None,
    fingerprint: str | None = None,
) -> WindowResult:
    """Run every cell of `window` against `endpoint`; see `run_window`."""
    base = endpoint.rstrip("/")
    for cls in window.classes:
        select_transcripts(cls, window.transcripts_per_class)  # fail before sending anything
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Reachability first: an unreachable or still-booting lane is one clear error,
        # not a window of failed requests.
        health = await get_status(session, f"{base}/health")
        if isinstance(health, str):
            raise BenchError(
                f"cannot reach the lane at {base}: {health}; start it (`gb300lane up RECIPE`) or fix --endpoint"
            )
        if health != 200 and health != 404:  # 404: a server without /health; the requests will tell
            raise BenchError(
                f"the lane at {base} is not ready (GET /health answered {health}); "
                "wait for `gb300lane up` to report it ready, then run again"
            )
        version, _ = await get_json(session, f"{base}/version")
        served = model or await _discover_model(session, base)
        n_cells = window.rounds * len(window.classes) * len(window.concurrency)
        if progress is not None:
            progress.window_started(window, n_cells, n_cells * window.transcripts_per_class)
        cells: list[CellResult] = []
        records: list[RequestRecord] = []
        for rnd in range(1, window.rounds + 1):
            for cls in window.classes:
                for conc in window.concurrency:
                    cell, recs = await _run_cell(
                        session, base, window, cls=cls, concurrency=conc, round=rnd, model=served, progress=progress
                    )
                    cells.append(cell)
                    records.extend(recs)
    return WindowResult(
        tool_version=__version__,
        python=sys.version.split()[0],
        platform=platform.platform(),
        created_at=created,
        endpoint=base,
        model=served,
        server_version=version if isinstance(version, dict) else None,
        recipe=recipe,
        fingerprint=fingerprint,
        window=_window_data(window),
        valid=all(c.valid for c in cells),
        cells=cells,
        records=records,
    )


def run_window(
    endpoint: str,
    window: WindowSpec,
    *,
    model: str | None = None,
    progress: WindowProgress | None = None,
    recipe: str | None = None,
    fingerprint: str | None = None,
) -> WindowResult:
    """Run a window and return its result; server faults become invalid cells, never exceptions.

    `model` is the served model name (discovered from /v1/models when None).
    Raises BenchError only when the endpoint cannot be reached at all or the
    window asks for transcripts that are not shipped.
    """
    return asyncio.run(
        run_window_async(endpoint, window, model=model, progress=progress, recipe=recipe, fingerprint=fingerprint)
    )
