"""One cell's derived view: validity rules, clocks, statistics and spec counters.

Pure functions over the raw records of one (class, concurrency, round) cell
and the two /metrics scrapes around it. Nothing here does I/O, so the rules
are tested with recorded values.

Validity: a cell is invalid (and never averaged in) when any request failed,
any request returned other than the forced token count (a window with a
forced length), or the server's
generation-token counter moved by a different amount than the client
received (someone else used the lane during the cell: foreign traffic),
the delivered concurrency or arrival rate is off the configured one by more
than the registered tolerance, or the spec-decode counters cannot be the
cell's own tokens (contaminated; see `delivered`).
A missing /metrics or a lane without spec-decode counters does not
invalidate a cell; its spec statistics are then absent with the reason.

Clocks: a request that carries the embedded engine's `gb300lane` extension
has modelled times beside the client's wall times. A closed-loop cell leads
with the modelled clock when every successful request carried it, and keeps
the wall clock's statistics beside it (`other_clock`), so both are reported.
The modelled cell span is the longest closed-loop stream: the sum of the
modelled e2e times of the requests each concurrent stream sent one after
another (a stream sends its next request as soon as the previous finished).
An open-loop cell leads with the wall clock (its arrivals are paced on it);
its modelled view has latencies but no span.
"""

from __future__ import annotations

from collections import defaultdict

from gb300lane import spec
from gb300lane.bench.client import StreamOutcome
from gb300lane.bench.delivered import counter_attribution, delivered_load
from gb300lane.bench.models import Arrivals, CellResult, Clock, ClockStats, RequestRecord, SpecStats
from gb300lane.bench.quality import Ask, check
from gb300lane.bench.stats import Percentiles, decode_rate, gaps_from_token_times, tpot
from gb300lane.errors import MetricsError
from gb300lane.lane.probe import Scrape
from gb300lane.spec.counters import parse_request_counts

_SPEC_NAME = "vllm:spec_decode_num_drafts"


def make_record(
    outcome: StreamOutcome,
    *,
    transcript_id: str,
    cls: str,
    round: int,
    concurrency: int,
    seed: int,
    kind: str,
    worker: int,
    start_s: float,
    expected_tokens: int | None,
    repeat: int = 0,
    request_rate: float | None = None,
    scheduled_s: float | None = None,
    ask: Ask | None = None,
) -> RequestRecord:
    """A RequestRecord from a stream outcome, with its decode rate on the best clock it has.

    `ask` (what the transcript asks for, in a window whose requests stop at EOS) checks a finished request's
    output and records the outcome; a request that failed has none.
    """
    n = outcome.output_tokens or 0
    clock: Clock
    ttft: float | None
    e2e: float | None
    if outcome.engine is not None:
        clock = "modelled"
        ttft, e2e = outcome.engine.modelled_ttft_s, outcome.engine.modelled_e2e_s
    else:
        clock = "wall"
        ttft, e2e = outcome.ttft_s, outcome.e2e_s
    return RequestRecord(
        transcript_id=transcript_id,
        cls=cls,
        round=round,
        concurrency=concurrency,
        request_rate=request_rate,
        repeat=repeat,
        seed=seed,
        kind=kind,
        worker=worker,
        start_s=start_s,
        scheduled_s=scheduled_s,
        ok=outcome.ok,
        error=outcome.error,
        http_status=outcome.http_status,
        expected_tokens=expected_tokens,
        output_tokens=outcome.output_tokens,
        prompt_tokens=outcome.prompt_tokens,
        chunks=outcome.chunks,
        token_attribution=outcome.token_attribution,
        ttft_s=outcome.ttft_s,
        e2e_s=outcome.e2e_s,
        done_s=outcome.done_s,
        token_times_s=outcome.token_times_s,
        engine=outcome.engine,
        clock=clock,
        decode_tok_s=decode_rate(n, ttft, e2e) if outcome.ok else None,
        tpot_s=tpot(n, ttft, e2e) if outcome.ok else None,
        text=outcome.text,
        spec_decode=outcome.spec_decode,
        event_times_s=outcome.event_times_s,
        sent_s=outcome.sent_s,
        prompt_token_ids=outcome.prompt_token_ids if outcome.token_ids is not None else None,
        token_ids=outcome.token_ids,
        quality=None
        if ask is None or not outcome.ok
        else check(ask, text=outcome.content, tool_calls=outcome.tool_calls, finish_reason=outcome.finish_reason),
    )


def _timings(rec: RequestRecord, clock: Clock) -> tuple[float | None, float | None, list[float]]:
    if clock == "modelled" and rec.engine is not None:
        return rec.engine.modelled_ttft_s, rec.engine.modelled_e2e_s, rec.engine.modelled_token_times_s
    return rec.ttft_s, rec.e2e_s, rec.token_times_s


def _parse(text: str, model: str | None, source: str) -> spec.MetricsScrape:
    try:
        return spec.parse_metrics_text(text, source=source)
    except MetricsError:
        if model is None:
            raise
        # A scrape serving several models is narrowed to the one the window sent.
        return spec.parse_metrics_text(text, model_name=model, source=source)


def spec_from_scrapes(
    before: Scrape, after: Scrape, *, model: str | None = None
) -> tuple[SpecStats | None, str | None, int | None, dict[str, object] | None]:
    """(spec stats, reason they are absent, generation-token delta, raw counter deltas) of one cell."""
    if before.text is None or after.text is None:
        return None, f"/metrics unavailable: {before.reason or after.reason}", None, None
    try:
        first = _parse(before.text, model, "/metrics before the cell")
        last = _parse(after.text, model, "/metrics after the cell")
        if (
            first.spec.drafts_by_length is None
            and first.spec.num_drafts == 0
            and last.spec.drafts_by_length is not None
        ):
            # A fresh engine prints the labelled family with no samples yet: that is zero drafts of every length.
            first = first.model_copy(update={"spec": first.spec.model_copy(update={"drafts_by_length": {}})})
        d = spec.delta(first, last)
    except MetricsError as exc:
        return None, f"/metrics unusable: {exc}", None, None
    counters = d.spec
    raw: dict[str, object] = {
        "generation_tokens": d.generation_tokens,
        "prompt_tokens": d.prompt_tokens,
        "requests_success": d.requests_success,
        "num_drafts": counters.num_drafts,
        "num_draft_tokens": counters.num_draft_tokens,
        "num_accepted_tokens": counters.num_accepted_tokens,
        "accepted_per_pos": list(counters.accepted_per_pos),
        "drafts_by_length": (
            None if counters.drafts_by_length is None else {str(k): v for k, v in counters.drafts_by_length.items()}
        ),
        "extras": dict(d.extras),
    }
    if _SPEC_NAME not in after.text:
        reason = f"no spec-decode counters in /metrics ({_SPEC_NAME} absent; speculative decoding off?)"
        return None, reason, d.generation_tokens, raw
    if counters.num_drafts <= 0:
        return None, "spec-decode counters did not move during the cell (no drafts)", d.generation_tokens, raw
    try:
        stats = SpecStats.from_counters(counters)
    except MetricsError as exc:
        return None, f"spec-decode counters inconsistent: {exc}", d.generation_tokens, raw
    return stats, None, d.generation_tokens, raw


def summarize_cell(
    *,
    cls: str,
    concurrency: int,
    round: int,
    records: list[RequestRecord],
    forced_tokens: int | None,
    wall_span_s: float,
    before: Scrape,
    after: Scrape,
    model: str | None = None,
    repeats: int = 1,
    request_rate: float | None = None,
    arrivals: Arrivals | None = None,
    arrival_seed: int | None = None,
    peak_in_flight: int | None = None,
    schedule: list[float] | None = None,
    mid_cell: tuple[tuple[float, float], Scrape] | None = None,
) -> CellResult:
    """Apply the validity rules and compute the cell's statistics from its raw records."""
    invalid: list[str] = []
    notes: list[str] = []
    failed = [r for r in records if not r.ok]
    if failed:
        first = failed[0]
        invalid.append(f"{len(failed)} of {len(records)} requests failed; first: {first.transcript_id}: {first.error}")
    short = [r for r in records if r.ok and forced_tokens is not None and r.output_tokens != forced_tokens]
    if short:
        r = short[0]
        invalid.append(
            f"{len(short)} requests returned other than the forced {forced_tokens} tokens; "
            f"first: {r.transcript_id} returned {r.output_tokens}"
        )
    received = sum(r.output_tokens or 0 for r in records)
    spec_stats, spec_reason, gen_delta, raw = spec_from_scrapes(before, after, model=model)
    if gen_delta is not None and gen_delta != received:
        moved = f"the server's generation-token counter moved by {gen_delta} while this cell received {received} tokens"
        if failed:
            notes.append(f"{moved} (failed requests may account for it)")
        else:
            invalid.append(f"foreign traffic: {moved}")
    if gen_delta is None:
        notes.append(f"foreign-traffic check not possible: {spec_reason}")
    if spec_stats is None:
        notes.append(f"spec stats absent: {spec_reason}")
    server_count = None
    if mid_cell is not None and mid_cell[1].text is not None:
        try:
            gauges = parse_request_counts(mid_cell[1].text, source="/metrics mid-cell")
        except MetricsError:
            gauges = None
        if gauges is not None and gauges.requests_running is not None:
            server_count = (mid_cell[0], gauges.requests_running + (gauges.requests_waiting or 0.0))
    delivered, load_reasons, load_notes = delivered_load(
        records,
        concurrency=concurrency if request_rate is None else None,
        request_rate=request_rate,
        schedule=schedule,
        server=server_count,
    )
    invalid.extend(load_reasons)
    notes.extend(load_notes)
    if not failed and gen_delta is not None and gen_delta == received:
        contaminated, attribution_notes = counter_attribution(records, raw)
        invalid.extend(contaminated)
        notes.extend(attribution_notes)
    attributions = {r.token_attribution for r in records if r.ok}
    if "chunks_only" in attributions:
        notes.append("some streams carried no per-chunk usage: their inter-token gaps are per chunk, not per token")

    ok = [r for r in records if r.ok]
    modelled_ok = bool(ok) and all(r.engine is not None for r in ok)
    if not modelled_ok and any(r.engine is not None for r in ok):
        notes.append("only some requests carried modelled times; the cell uses the wall clock")
    open_loop = request_rate is not None
    # Closed loop leads with the engine's modelled clock when every request carried it; open-loop
    # arrivals are paced on the client's wall clock, so an open-loop cell leads with the wall clock.
    clock: Clock = "modelled" if modelled_ok and not open_loop else "wall"
    lead = _clock_stats(ok, clock, _span(ok, clock, wall_span_s, open_loop), valid=not invalid)
    other: ClockStats | None = None
    if modelled_ok:
        other_clock: Clock = "wall" if clock == "modelled" else "modelled"
        other = _clock_stats(ok, other_clock, _span(ok, other_clock, wall_span_s, open_loop), valid=not invalid)
    if repeats > 1:
        n = len(records) // repeats
        seeded = any(r.seed >= 0 for r in records)
        notes.append(
            f"concurrency {concurrency} is above the {n} transcripts: each was sent {repeats} times"
            + (
                ", every pass with its own seeds (records carry `repeat` and `seed`)"
                if seeded
                else " (unseeded window: the passes send identical requests; records carry `repeat`)"
            )
        )
    return CellResult(
        cls=cls,
        concurrency=concurrency,
        request_rate=request_rate,
        arrivals=arrivals,
        arrival_seed=arrival_seed,
        peak_in_flight=peak_in_flight,
        repeats=repeats,
        round=round,
        valid=not invalid,
        invalid_reasons=invalid,
        notes=notes,
        requests=len(records),
        errors=len(failed),
        expected_tokens=None if forced_tokens is None else forced_tokens * len(records),
        output_tokens=received,
        clock=clock,
        span_s=lead.span_s,
        wall_span_s=wall_span_s,
        decode_tok_s=lead.decode_tok_s,
        decode_tok_s_per_stream=lead.decode_tok_s_per_stream,
        ttft_s=lead.ttft_s,
        tpot_s=lead.tpot_s,
        itl_s=lead.itl_s,
        e2e_s=lead.e2e_s,
        request_throughput=lead.request_throughput,
        other_clock=other,
        generation_tokens_delta=gen_delta,
        spec=spec_stats,
        spec_absent_reason=spec_reason if spec_stats is None else None,
        counters_delta=raw,
        delivered=delivered,
    )


def _span(ok: list[RequestRecord], clock: Clock, wall_span_s: float, open_loop: bool) -> float | None:
    """The cell's duration on `clock`.

    Wall: the client's span. Modelled, closed loop: the longest stream, the
    sum of the modelled e2e times of the requests one stream sent back to
    back. Modelled, open loop: none, because the engine's clock stands still
    while it is idle between arrivals, so it has no span to divide by.
    """
    if clock == "wall":
        return wall_span_s
    if open_loop:
        return None
    per_worker: dict[int, float] = defaultdict(float)
    for r in ok:
        per_worker[r.worker] += r.engine.modelled_e2e_s  # type: ignore[union-attr]
    return max(per_worker.values()) if per_worker else None


def _clock_stats(ok: list[RequestRecord], clock: Clock, span: float | None, *, valid: bool) -> ClockStats:
    ttfts, tpots, rates, itls, e2es = [], [], [], [], []
    for r in ok:
        ttft, e2e, times = _timings(r, clock)
        n = r.output_tokens or 0
        if ttft is not None:
            ttfts.append(ttft)
        if e2e is not None:
            e2es.append(e2e)
        if (t := tpot(n, ttft, e2e)) is not None:
            tpots.append(t)
        if (d := decode_rate(n, ttft, e2e)) is not None:
            rates.append(d)
        itls.extend(gaps_from_token_times(times))
    received = sum(r.output_tokens or 0 for r in ok)
    usable = bool(span) and valid
    return ClockStats(
        clock=clock,
        span_s=span,
        decode_tok_s=(received / span) if usable and received else None,  # type: ignore[operator]
        request_throughput=(len(ok) / span) if usable and ok else None,  # type: ignore[operator]
        decode_tok_s_per_stream=Percentiles.from_values(rates),
        ttft_s=Percentiles.from_values(ttfts),
        tpot_s=Percentiles.from_values(tpots),
        itl_s=Percentiles.from_values(itls),
        e2e_s=Percentiles.from_values(e2es),
    )


def aggregate_spec(cells: list[CellResult]) -> SpecStats | None:
    """Spec stats over the summed counter deltas of the valid cells that have them."""
    used = [c for c in cells if c.valid and c.spec is not None and c.counters_delta is not None]
    if not used:
        return None
    k = max(len(c.counters_delta["accepted_per_pos"]) for c in used)  # type: ignore[index]
    per_pos = [0] * k
    by_length: dict[int, int] | None = {}
    for c in used:
        d = c.counters_delta
        for i, v in enumerate(d["accepted_per_pos"]):  # type: ignore[index]
            per_pos[i] += v
        if by_length is not None and d["drafts_by_length"] is not None:  # type: ignore[index]
            for length, v in d["drafts_by_length"].items():  # type: ignore[index]
                by_length[int(length)] = by_length.get(int(length), 0) + v
        else:
            by_length = None
    counters = spec.SpecCounters(
        num_drafts=sum(c.counters_delta["num_drafts"] for c in used),  # type: ignore[index]
        num_draft_tokens=sum(c.counters_delta["num_draft_tokens"] for c in used),  # type: ignore[index]
        num_accepted_tokens=sum(c.counters_delta["num_accepted_tokens"] for c in used),  # type: ignore[index]
        accepted_per_pos=tuple(per_pos),
        drafts_by_length=by_length or None,
    )
    return SpecStats.from_counters(counters)
