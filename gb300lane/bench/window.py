"""Running a window: seeded requests over (class, concurrency or rate, round) cells.

A window runs its cells in order round -> class -> load, so the two rounds
of a cell are separated in time and their spread measures the lane's noise.
Each cell scrapes /metrics before and after and is summarised by
`cells.summarize_cell`. Load is closed loop (the window's concurrency
levels: that many streams, each sending its next request when the previous
one finished) or open loop (`LoadSpec`: requests arrive at a rate, Poisson
or evenly spaced, whether or not earlier ones finished).

A concurrency above the transcript count cycles the transcripts
ceil(C / N) times, so every one of the C streams runs and every transcript
counts equally; each pass has its own seeds (`repeat` in the seed, recorded
on the request). The cell is labelled with the concurrency that ran.

Every arm must see identical requests: the per-request seed is a stable hash
of (seed base, transcript id, round, and the pass when it is not the first),
independent of concurrency, order and arm; the output length is forced
(`max_tokens = min_tokens = forced_tokens`, `ignore_eos`). A window with
`forced_tokens: null` lets its requests stop at EOS (`max_tokens` caps
them): what a task-quality window needs, whose requests each get their
outcome checked (`bench.quality`) and recorded beside the text.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

import aiohttp

from gb300lane import __version__
from gb300lane.bench.cells import make_record, summarize_cell
from gb300lane.bench.client import collector_paused, request_sent_trace, stream_request
from gb300lane.bench.models import Arrivals, CellResult, LoadSpec, RequestRecord, RetriedCell, WindowResult
from gb300lane.bench.quality import asks_for
from gb300lane.bench.transcripts import Transcript, select_transcripts
from gb300lane.errors import BenchError
from gb300lane.lane.probe import Scrape, get_json, get_status, scrape_metrics
from gb300lane.recipes.schema import WindowSpec

#: Per-request read timeout: a stream silent this long is recorded as stalled.
READ_TIMEOUT_S = 120.0
#: How long after the client first counts C in flight it scrapes the lane's own count (the requests' heads go out).
MID_SCRAPE_DELAY_S = 0.005


class WindowProgress(Protocol):
    """What a window reports while it runs (the CLI draws a bar from it)."""

    def window_started(self, window: WindowSpec, cells: int, requests: int) -> None: ...

    def request_done(self, record: RequestRecord) -> None: ...

    def cell_done(self, cell: CellResult) -> None: ...


#: Told of each invalid try run again: (the discarded cell, the next try's number, the tries allowed).
RetryNotice = Callable[[CellResult, int, int], None]


def derive_seed(seed_base: int, transcript_id: str, round: int, repeat: int = 0) -> int:
    """The per-request sampling seed: a stable 31-bit hash of (seed base, transcript id, round[, repeat]).

    The first pass (`repeat` 0) hashes exactly what it always did, so cycling
    added no change to any existing window's requests.
    """
    text = f"{seed_base}:{transcript_id}:{round}" + (f":{repeat}" if repeat else "")
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def passes_for(transcripts: int, concurrency: int) -> int:
    """Passes over `transcripts` that give each of `concurrency` streams a request: ceil(C / N), at least 1."""
    return max(1, math.ceil(concurrency / transcripts)) if transcripts else 1


def plan_requests(transcripts: list[Transcript], concurrency: int) -> tuple[list[tuple[Transcript, int]], int]:
    """((transcript, repeat) in send order, passes): every transcript once per pass, passes from `passes_for`."""
    passes = passes_for(len(transcripts), concurrency)
    return [(t, r) for r in range(passes) for t in transcripts], passes


def arrival_times(n: int, rate: float, arrivals: Arrivals, seed: int) -> list[float]:
    """Send times (seconds from the cell's start) of `n` open-loop requests at `rate` per second.

    Poisson: exponential gaps of mean 1 / rate from a generator seeded with
    `seed`; constant: gaps of exactly 1 / rate. The first request goes at 0,
    as `vllm bench serve` sends its first at once.
    """
    if rate <= 0 or not math.isfinite(rate):
        raise BenchError(f"request rate {rate!r} is not a positive finite number; pass e.g. --request-rate 4")
    if n <= 0:
        return []
    if arrivals == "constant":
        return [i / rate for i in range(n)]
    import numpy as np

    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def trace_schedule(transcripts: list[Transcript], speed: float, workload: str) -> list[float]:
    """Send times of a trace's transcripts: their recorded arrivals from the first, divided by `speed`."""
    missing = [t.id for t in transcripts if t.arrival_s is None]
    if missing:
        raise BenchError(
            f"workload {workload}: transcript {missing[0]} has no recorded arrival time; --arrivals trace "
            "replays a trace's (import one with `gb300lane workload import --format trace`)"
        )
    first = min(t.arrival_s for t in transcripts if t.arrival_s is not None)
    return [((t.arrival_s or 0.0) - first) / speed for t in transcripts]


def derive_arrival_seed(base: int, cls: str, round: int, rate: float) -> int:
    """The Poisson seed of one open-loop cell: a stable hash of (base, class, round, rate)."""
    digest = hashlib.sha256(f"arrivals:{base}:{cls}:{round}:{rate!r}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def build_request(
    transcript: Transcript, window: WindowSpec, *, model: str, round: int, repeat: int = 0
) -> tuple[str, dict[str, object], int | None]:
    """(path, JSON body, seed) of one request; chat for tool_json, completions otherwise."""
    seed = None if window.seed_base is None else derive_seed(window.seed_base, transcript.id, round, repeat)
    body: dict[str, object] = {"model": model, "max_tokens": window.token_cap}
    if window.forced_tokens is not None:
        body.update(min_tokens=window.forced_tokens, ignore_eos=True)
    body.update(
        {
            "temperature": window.temperature,
            "top_p": window.top_p,
            "stream": True,
            # Per-chunk cumulative usage makes multi-token chunks countable exactly.
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    if window.temperature > 0:
        # The token ids sampled (vLLM's return_token_ids): what a referee scores, exactly, where the text alone
        # would have to be tokenized again (bench.referee)
        body["return_token_ids"] = True
    if seed is not None:
        body["seed"] = seed
    if transcript.response_format is not None:
        body["response_format"] = transcript.response_format
    if transcript.kind == "chat":
        body["messages"] = transcript.messages
        if transcript.tools:
            body["tools"] = transcript.tools
            if window.tool_choice is not None:
                body["tool_choice"] = window.tool_choice
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
    chosen = select_transcripts(cls, window.transcripts_per_class, window.workload, held_out=window.held_out)
    planned, passes = plan_requests(chosen, concurrency)
    before = await scrape_metrics(session, base)
    queue: asyncio.Queue[tuple[int, tuple[Transcript, int]]] = asyncio.Queue()
    for item in enumerate(planned):
        queue.put_nowait(item)
    records: list[RequestRecord | None] = [None] * len(planned)
    in_flight = peak = 0
    held = asyncio.Event()
    target = min(concurrency, len(planned))
    t0 = time.perf_counter()

    async def stream(worker: int) -> None:
        nonlocal in_flight, peak
        while True:
            try:
                index, (transcript, repeat) = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            path, body, seed = build_request(transcript, window, model=model, round=round, repeat=repeat)
            start = time.perf_counter() - t0
            in_flight += 1
            peak = max(peak, in_flight)
            if in_flight >= target:
                held.set()
            outcome = await stream_request(session, base + path, body, read_timeout_s=READ_TIMEOUT_S)
            in_flight -= 1
            rec = make_record(
                outcome,
                transcript_id=transcript.id,
                cls=cls,
                round=round,
                concurrency=concurrency,
                repeat=repeat,
                seed=seed if seed is not None else -1,
                kind=transcript.kind,
                worker=worker,
                start_s=start,
                expected_tokens=window.forced_tokens,
                ask=asks_for(transcript) if window.stops_at_eos else None,
            )
            records[index] = rec
            if progress is not None:
                progress.request_done(rec)

    mid: list[tuple[tuple[float, float], Scrape]] = []

    async def mid_cell() -> None:
        # Once the client counts C in flight, ask the lane what it counts (running + waiting).
        await held.wait()
        await asyncio.sleep(MID_SCRAPE_DELAY_S)
        asked = time.perf_counter() - t0
        scrape = await scrape_metrics(session, base)
        mid.append(((asked, time.perf_counter() - t0), scrape))

    scraper = asyncio.ensure_future(mid_cell())
    with collector_paused():
        t0 = time.perf_counter()  # after the collection the pause starts with, which takes its own time
        await asyncio.gather(*(stream(w) for w in range(min(concurrency, len(planned)))))
    wall_span = time.perf_counter() - t0
    if not held.is_set():
        scraper.cancel()  # the client never counted C in flight: there is no mid-cell count to compare
    with contextlib.suppress(asyncio.CancelledError):
        await scraper
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
        repeats=passes,
        peak_in_flight=peak,
        mid_cell=mid[0] if mid else None,
    )
    if progress is not None:
        progress.cell_done(cell)
    return cell, done


async def _run_open_cell(
    session: aiohttp.ClientSession,
    base: str,
    window: WindowSpec,
    *,
    cls: str,
    rate: float,
    arrivals: Arrivals,
    arrival_seed: int,
    round: int,
    model: str,
    progress: WindowProgress | None,
) -> tuple[CellResult, list[RequestRecord]]:
    """One open-loop cell: each transcript is sent at its scheduled arrival, not when a stream frees up."""
    transcripts = select_transcripts(cls, window.transcripts_per_class, window.workload, held_out=window.held_out)
    if arrivals == "trace":  # replayed at the recorded times, in their order; the rate is the replay speed
        transcripts = sorted(transcripts, key=lambda t: t.arrival_s or 0.0)
        schedule = trace_schedule(transcripts, rate, window.workload)
    else:
        schedule = arrival_times(len(transcripts), rate, arrivals, arrival_seed)
    before = await scrape_metrics(session, base)
    records: list[RequestRecord | None] = [None] * len(transcripts)
    in_flight = peak = 0
    t0 = time.perf_counter()

    async def one(index: int, transcript: Transcript, at: float) -> None:
        nonlocal in_flight, peak
        delay = t0 + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        path, body, seed = build_request(transcript, window, model=model, round=round)
        start = time.perf_counter() - t0
        in_flight += 1
        peak = max(peak, in_flight)
        outcome = await stream_request(session, base + path, body, read_timeout_s=READ_TIMEOUT_S)
        in_flight -= 1
        rec = make_record(
            outcome,
            transcript_id=transcript.id,
            cls=cls,
            round=round,
            concurrency=0,
            request_rate=rate,
            seed=seed if seed is not None else -1,
            kind=transcript.kind,
            worker=index,
            start_s=start,
            scheduled_s=at,
            expected_tokens=window.forced_tokens,
            ask=asks_for(transcript) if window.stops_at_eos else None,
        )
        records[index] = rec
        if progress is not None:
            progress.request_done(rec)

    with collector_paused():
        t0 = time.perf_counter()  # the schedule starts after the collection the pause starts with
        await asyncio.gather(*(one(i, t, at) for i, (t, at) in enumerate(zip(transcripts, schedule))))
    wall_span = time.perf_counter() - t0
    after = await scrape_metrics(session, base)
    done = [r for r in records if r is not None]
    cell = summarize_cell(
        cls=cls,
        concurrency=0,
        round=round,
        records=done,
        forced_tokens=window.forced_tokens,
        wall_span_s=wall_span,
        before=before,
        after=after,
        model=model,
        request_rate=rate,
        arrivals=arrivals,
        arrival_seed=arrival_seed if arrivals == "poisson" else None,
        peak_in_flight=peak,
        schedule=schedule,
    )
    if progress is not None:
        progress.cell_done(cell)
    return cell, done


async def _discover_model(session: aiohttp.ClientSession, base: str) -> str:
    body, reason = await get_json(session, f"{base}/v1/models")
    if body is None:
        raise BenchError(
            f"cannot reach the lane at {base}: {reason}; start it (`gb300lane up RECIPE`) or fix --endpoint"
        )
    data = body.get("data") if isinstance(body, dict) else None
    first = data[0] if isinstance(data, list) and data else None
    if not isinstance(first, dict) or "id" not in first:
        raise BenchError(f"{base}/v1/models lists no model; pass the served model name explicitly")
    return str(first["id"])


async def run_window_async(
    endpoint: str,
    window: WindowSpec,
    *,
    model: str | None = None,
    progress: WindowProgress | None = None,
    recipe: str | None = None,
    fingerprint: str | None = None,
    load: LoadSpec | None = None,
    connections: int | None = None,
    invalid_retries: int = 0,
    on_retry: RetryNotice | None = None,
) -> WindowResult:
    """Run every cell of `window` against `endpoint`; see `run_window`.

    `connections` caps the client's connection pool (None: one per request in
    flight, as a window needs); a cap below the concurrency is a client that
    holds fewer in flight than it was told to, and its cells say so.
    `invalid_retries` runs a cell that comes back invalid again, up to that
    many more times, at once and with the same seeds (validity is the client's
    and the counters' bookkeeping, never the figures a card compares, so a
    retry selects no outcome); each discarded
    try stays in the result (`retried`) and `on_retry` hears of it.
    """
    if invalid_retries < 0:
        raise BenchError(f"invalid_retries {invalid_retries} is negative; pass 0 or more")
    load = load or LoadSpec(mode="closed")
    if load.mode == "open" and not load.request_rates:
        raise BenchError("an open-loop load needs at least one request rate; pass --request-rate R")
    for rate in load.request_rates or []:
        arrival_times(1, rate, "constant", 0)  # a bad rate fails before anything is sent
    base = endpoint.rstrip("/")
    for cls in window.classes:
        # fail before sending anything
        chosen = select_transcripts(cls, window.transcripts_per_class, window.workload, held_out=window.held_out)
        if load.arrivals == "trace":
            trace_schedule(chosen, 1.0, window.workload)
    created = datetime.now(UTC).isoformat(timespec="seconds")
    connector = aiohttp.TCPConnector(limit=connections or 0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, trace_configs=[request_sent_trace()]) as session:
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
        n = window.transcripts_per_class
        if load.mode == "open":
            levels = len(load.request_rates or [])
            requests = window.rounds * len(window.classes) * levels * n
        else:
            levels = len(window.concurrency)
            requests = window.rounds * len(window.classes) * sum(n * passes_for(n, c) for c in window.concurrency)
        n_cells = window.rounds * len(window.classes) * levels
        if progress is not None:
            progress.window_started(window, n_cells, requests)
        cells: list[CellResult] = []
        records: list[RequestRecord] = []
        retried: list[RetriedCell] = []

        async def run(one: Callable[[], Awaitable[tuple[CellResult, list[RequestRecord]]]]) -> None:
            for attempt in range(1, invalid_retries + 2):
                cell, recs = await one()
                if cell.valid or attempt > invalid_retries:
                    break
                retried.append(RetriedCell(cell=cell, records=recs))
                if on_retry is not None:
                    on_retry(cell, attempt + 1, invalid_retries + 1)
            cells.append(cell)
            records.extend(recs)

        seed_base = load.arrival_seed if load.arrival_seed is not None else (window.seed_base or 0)
        for rnd in range(1, window.rounds + 1):
            for cls in window.classes:
                if load.mode == "open":
                    for rate in load.request_rates or []:
                        await run(
                            partial(
                                _run_open_cell,
                                session,
                                base,
                                window,
                                cls=cls,
                                rate=rate,
                                arrivals=load.arrivals or "poisson",
                                arrival_seed=derive_arrival_seed(seed_base, cls, rnd, rate),
                                round=rnd,
                                model=served,
                                progress=progress,
                            )
                        )
                    continue
                for conc in window.concurrency:
                    await run(
                        partial(
                            _run_cell,
                            session,
                            base,
                            window,
                            cls=cls,
                            concurrency=conc,
                            round=rnd,
                            model=served,
                            progress=progress,
                        )
                    )
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
        load=load,
        valid=all(c.valid for c in cells),
        cells=cells,
        records=records,
        retried=retried,
    )


def run_window(
    endpoint: str,
    window: WindowSpec,
    *,
    model: str | None = None,
    progress: WindowProgress | None = None,
    recipe: str | None = None,
    fingerprint: str | None = None,
    load: LoadSpec | None = None,
    invalid_retries: int = 0,
    on_retry: RetryNotice | None = None,
) -> WindowResult:
    """Run a window and return its result; server faults become invalid cells, never exceptions.

    `model` is the served model name (discovered from /v1/models when None);
    `load` is closed loop at the window's concurrency levels unless it says
    open. Raises BenchError only when the endpoint cannot be reached at all,
    the window asks for transcripts that are not shipped, or a rate is not a
    positive number.
    """
    return asyncio.run(
        run_window_async(
            endpoint,
            window,
            model=model,
            progress=progress,
            recipe=recipe,
            fingerprint=fingerprint,
            load=load,
            invalid_retries=invalid_retries,
            on_retry=on_retry,
        )
    )
