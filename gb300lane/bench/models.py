"""The records a window produces: per request, per cell, and the window result file.

Every raw per-request value is kept in `RequestRecord`; a `CellResult` is the
derived view of one (class, concurrency, round) cell, and `WindowResult` is
what `gb300lane bench --out` writes (schema_version 1).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gb300lane import spec
from gb300lane.bench.quality import QualityOutcome
from gb300lane.bench.stats import Percentiles
from gb300lane.models import FrozenModel
from gb300lane.spec.lossless_result import LosslessResult

Clock = Literal["modelled", "wall"]
TokenAttribution = Literal["usage", "one_per_chunk", "chunks_only"]
#: poisson (seeded), constant spacing, or trace: the transcripts' recorded arrival times (a trace workload).
Arrivals = Literal["poisson", "constant", "trace"]


class EngineTiming(FrozenModel):
    """The embedded engine's `gb300lane` timing extension from the final chunk."""

    modelled_ttft_s: float = Field(description="Modelled time to first token, seconds since the request arrived.")
    modelled_e2e_s: float = Field(description="Modelled time to the last token, seconds since the request arrived.")
    modelled_token_times_s: list[float] = Field(description="Modelled arrival time of each output token.")
    wall_token_times_s: list[float] = Field(description="Engine wall-clock emit time of each output token.")
    block_positions: list[int] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Per output token, the verify-block position that emitted it (1..k+1; 0: a step without "
        "drafts): the losslessness check's effect per position reads it. None: not reported.",
    )


class RequestSpecDecode(FrozenModel):
    """A request's own spec-decode counters (`metrics.speculative_decoding` with --per-request-spec-decode-metrics)."""

    num_drafts: int = Field(ge=0, description="Verify steps of this request that carried drafts.")
    num_draft_tokens: int = Field(ge=0, description="Draft tokens proposed for this request.")
    num_accepted_tokens: int = Field(ge=0, description="Draft tokens of this request the target accepted.")

    @property
    def tokens_per_step(self) -> float | None:
        """1 + accepted / drafts: this request's tokens per verify step."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None


class RequestRecord(FrozenModel):
    """One request of a window, with every raw timing the client saw."""

    transcript_id: str = Field(description="Stable id of the transcript sent.")
    cls: str = Field(description="Traffic class of the cell this request ran in.")
    round: int = Field(description="Round number, 1-based.")
    concurrency: int = Field(description="Concurrency level of the cell; 0 for an open-loop cell (see request_rate).")
    request_rate: float | None = Field(
        default=None, description="Open-loop cells: the arrival rate, requests per second; None for closed loop."
    )
    repeat: int = Field(
        default=0,
        description="Which pass over the transcripts this request is (0 first); a concurrency above the "
        "transcript count cycles them, each pass with its own seeds.",
    )
    seed: int = Field(
        description="Sampling seed derived from (seed base, transcript id, round, repeat); -1 when unseeded."
    )
    kind: Literal["completion", "chat"] = Field(description="Which OpenAI endpoint was used.")
    worker: int = Field(description="Index of the concurrent stream that sent it (0-based).")
    start_s: float = Field(description="Client wall time the request was sent, seconds since the cell started.")
    scheduled_s: float | None = Field(
        default=None,
        description="Open-loop cells: when the arrival process scheduled the request, seconds since the cell started.",
    )
    ok: bool = Field(description="True when the stream completed without error and with usage.")
    error: str | None = Field(description="What went wrong, when anything did.")
    http_status: int | None = Field(description="HTTP status of the response; None when none arrived.")
    expected_tokens: int | None = Field(
        description="The forced output length requested; None where the window let requests stop at EOS."
    )
    output_tokens: int | None = Field(description="Completion tokens from the usage chunk; None without usage.")
    prompt_tokens: int | None = Field(description="Prompt tokens from the usage chunk.")
    chunks: int = Field(description="Number of content-bearing SSE chunks received.")
    token_attribution: TokenAttribution = Field(
        description=(
            "How tokens were assigned to chunks: 'usage' from per-chunk cumulative usage, "
            "'one_per_chunk' when chunks equal usage tokens, 'chunks_only' when neither held "
            "(token times are then chunk times)."
        )
    )
    ttft_s: float | None = Field(description="Client wall time to the first token.")
    e2e_s: float | None = Field(description="Client wall time to the last token.")
    done_s: float | None = Field(description="Client wall time until the stream closed.")
    token_times_s: list[float] = Field(
        description="Client wall arrival time of each output token; the tokens of one chunk share its arrival time."
    )
    engine: EngineTiming | None = Field(description="The engine's timing extension, when it sent one.")
    clock: Clock = Field(description="Which clock decode_tok_s and tpot_s use.")
    decode_tok_s: float | None = Field(description="(output_tokens - 1) / (e2e - ttft) on `clock`.")
    tpot_s: float | None = Field(description="(e2e - ttft) / (output_tokens - 1) on `clock`.")
    text: str = Field(description="The generated text (chat: content, then tool-call arguments).")
    spec_decode: RequestSpecDecode | None = Field(
        default=None, description="The request's spec-decode counters, when the server reports them per request."
    )
    event_times_s: list[float] = Field(
        default_factory=list,
        description="Client wall arrival time of every SSE event with choices (vLLM's chunks), one each, even when "
        "several came in one read; empty in records written before it was kept.",
    )
    sent_s: float | None = Field(
        default=None,
        description="When the request's head went out on a connection, seconds after start_s (later than it when "
        "the request waited for a free connection); None where not traced.",
    )
    # Left out of the dump when none, so the records of windows that did not ask for them are what they were.
    prompt_token_ids: list[int] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The prompt's token ids as the lane tokenized it (vLLM's return_token_ids; windows at "
        "temperature > 0 ask for them, for the referee); None: not returned.",
    )
    token_ids: list[int] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The generated token ids, every chunk's joined (return_token_ids); None: not returned.",
    )
    # Left out of the dump when none, so the records of forced-length windows are byte for byte what they were.
    quality: QualityOutcome | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Task quality (windows whose requests stop at EOS, transcripts that ask for something "
        "checkable): the outcome with its check's input (bench.quality); None: no outcome.",
    )


#: Most points kept of a cell's in-flight series (the step changes, thinned evenly).
SERIES_POINTS = 200


class DeliveredLoad(FrozenModel):
    """What one cell put on the lane, rebuilt from its requests' own timestamps, beside what was configured."""

    configured_concurrency: int | None = Field(
        description="Closed loop: the concurrency asked for; None for open loop."
    )
    configured_rate: float | None = Field(description="Open loop: the arrival rate asked for, requests/s; None closed.")
    delivered_concurrency: float | None = Field(
        description="Closed loop: median in-flight count at the starts after the ramp (see the module docstring)."
    )
    mean_in_flight: float | None = Field(
        description="Time-weighted mean in-flight count from the first begin until the first stream ran out of work."
    )
    peak_in_flight: int = Field(description="The most requests in flight at once, from the records.")
    scheduled_rate: float | None = Field(description="Open loop: (n - 1) / span of the schedule the client was given.")
    delivered_rate: float | None = Field(description="Open loop: (n - 1) / span of the begin times.")
    late_p99_s: float | None = Field(
        description="Open loop: 99th percentile of begin minus scheduled arrival, seconds."
    )
    tolerance: float = Field(description="The registered relative tolerance the cell was checked against.")
    in_flight_series: list[tuple[float, int]] = Field(
        description="(seconds since the cell started, requests in flight from then on), thinned to at most "
        f"{SERIES_POINTS} points."
    )
    server_running: float | None = Field(
        default=None,
        description="The lane's vllm:num_requests_running + num_requests_waiting in a scrape taken mid-cell, "
        "where the window took one.",
    )
    client_in_flight_at_scrape: int | None = Field(
        default=None, description="The client's in-flight count when that scrape was taken."
    )


class SpecStats(FrozenModel):
    """Speculative-decoding statistics of one cell, from the /metrics counter deltas."""

    num_drafts: int = Field(description="Verify steps that carried drafts during the cell.")
    num_draft_tokens: int = Field(description="Draft tokens proposed during the cell.")
    num_accepted_tokens: int = Field(description="Draft tokens accepted during the cell.")
    tokens_per_step: float = Field(description="1 + accepted / drafts: tokens emitted per verify step.")
    mean_drafts_per_step: float = Field(description="Draft tokens / drafts: the mean draft length run.")
    a_p: list[float] = Field(description="Accepted at position p over the drafts that had position p (1-based p).")
    a_p_exact: bool = Field(description="False when a_p fell back to the all-drafts convention (k schedule, no mix).")
    marginal: list[float | None] = Field(description="a_p / a_(p-1) per position (None where undefined).")
    vllm_per_position: list[float] = Field(description="vLLM's convention: accepted at position p over all drafts.")
    draft_acceptance_rate: float = Field(description="Accepted / drafted tokens.")

    @classmethod
    def from_counters(cls, counters: spec.SpecCounters) -> SpecStats:
        """The statistics gb300lane.spec derives from a counter delta."""
        acc = spec.acceptance(counters)
        return cls(
            num_drafts=counters.num_drafts,
            num_draft_tokens=counters.num_draft_tokens,
            num_accepted_tokens=counters.num_accepted_tokens,
            tokens_per_step=acc.tokens_per_step,
            mean_drafts_per_step=acc.mean_drafts_per_step,
            a_p=list(acc.a_p),
            a_p_exact=acc.a_p_exact,
            marginal=list(acc.marginal),
            vllm_per_position=list(acc.vllm_per_position),
            draft_acceptance_rate=acc.draft_acceptance_rate,
        )


class ClockStats(FrozenModel):
    """A cell's statistics on one clock (the cell carries its leading clock's inline and the other one here)."""

    clock: Clock = Field(description="Which clock these numbers use.")
    span_s: float | None = Field(description="Cell duration on this clock; None where the clock has no cell span.")
    decode_tok_s: float | None = Field(description="Aggregate output tokens / span; None when invalid or no span.")
    request_throughput: float | None = Field(description="Completed requests / span; None when invalid or no span.")
    decode_tok_s_per_stream: Percentiles = Field(description="Per-request decode tok/s.")
    ttft_s: Percentiles = Field(description="Time to first token.")
    tpot_s: Percentiles = Field(description="Time per output token after the first.")
    itl_s: Percentiles = Field(description="Inter-token gaps (multi-token chunks give zero gaps).")
    e2e_s: Percentiles = Field(description="Time from the request's send (arrival, modelled) to its last token.")


class CellResult(FrozenModel):
    """One (class, concurrency or request rate, round) cell: its validity and derived statistics."""

    cls: str = Field(description="Traffic class.")
    concurrency: int = Field(
        description="Closed loop: the concurrent streams that ran. 0 for an open-loop cell (see request_rate)."
    )
    request_rate: float | None = Field(
        default=None, description="Open loop: the arrival rate, requests per second of the client's wall clock."
    )
    arrivals: Arrivals | None = Field(default=None, description="Open loop: the arrival process.")
    arrival_seed: int | None = Field(default=None, description="Open loop, Poisson: the seed of the arrival times.")
    peak_in_flight: int | None = Field(
        default=None, description="The most requests in flight at once during the cell, as the client counted them."
    )
    repeats: int = Field(
        default=1,
        description="Passes over the transcripts (above 1 when the concurrency exceeds the transcript count).",
    )
    round: int = Field(description="Round number, 1-based.")
    valid: bool = Field(description="False when any request failed, was short, or foreign traffic was seen.")
    invalid_reasons: list[str] = Field(description="Why the cell is invalid; empty when valid.")
    notes: list[str] = Field(description="Things a reader should know that do not invalidate the cell.")
    requests: int = Field(description="Requests sent.")
    errors: int = Field(description="Requests that failed.")
    expected_tokens: int | None = Field(
        description="requests x forced tokens; None where the window let requests stop at EOS."
    )
    output_tokens: int = Field(description="Completion tokens received (sum of usage).")
    clock: Clock = Field(description="Clock of the decode rates: 'modelled' when every request carried it.")
    span_s: float | None = Field(description="Cell duration on `clock`.")
    wall_span_s: float = Field(description="Cell duration on the client's wall clock.")
    decode_tok_s: float | None = Field(description="Aggregate: output tokens / span on `clock`; None when invalid.")
    decode_tok_s_per_stream: Percentiles = Field(description="Per-request decode tok/s on `clock`.")
    ttft_s: Percentiles = Field(description="Time to first token on `clock`.")
    tpot_s: Percentiles = Field(description="Time per output token after the first on `clock`.")
    itl_s: Percentiles = Field(description="Inter-token gaps on `clock` (multi-token chunks give zero gaps).")
    e2e_s: Percentiles = Field(
        default_factory=Percentiles.empty, description="End-to-end latency (send to last token) on `clock`."
    )
    request_throughput: float | None = Field(
        default=None, description="Completed requests / span on `clock`; None when invalid."
    )
    other_clock: ClockStats | None = Field(
        default=None,
        description="The same statistics on the clock the cell does not lead with (the client's wall clock "
        "beside the engine's modelled one, or the modelled one beside an open-loop cell's wall clock).",
    )
    generation_tokens_delta: int | None = Field(description="Server generation-token counter delta over the cell.")
    spec: SpecStats | None = Field(description="Speculative-decoding statistics; None with spec_absent_reason.")
    spec_absent_reason: str | None = Field(description="Why spec is None.")
    counters_delta: dict[str, Any] | None = Field(description="The raw counter deltas the spec stats come from.")
    delivered: DeliveredLoad | None = Field(
        default=None, description="The load the cell delivered, rebuilt from its requests, beside the configured one."
    )


class LoadSpec(FrozenModel):
    """How a window offers its requests.

    Closed loop: `concurrency` streams, each sending its next request when the
    previous one finished (the window's concurrency levels). Open loop:
    requests arrive at `request_rates` per second of the client's wall clock,
    whether or not earlier ones have finished, Poisson (seeded) or evenly spaced.
    """

    mode: Literal["closed", "open"] = Field(description="closed (concurrency levels) or open (request rates).")
    request_rates: list[float] | None = Field(default=None, description="Open loop: the rates run, requests/s.")
    arrivals: Arrivals | None = Field(
        default=None,
        description="Open loop: poisson or constant spacing at each request rate, or trace: the "
        "transcripts' recorded arrival times, the rate then the replay speed (1: as recorded, 2: twice as fast).",
    )
    arrival_seed: int | None = Field(
        default=None, description="Open loop, Poisson: the seed base of the arrival times (each cell derives its own)."
    )


class RetriedCell(FrozenModel):
    """A try of a cell that came back invalid and was run again: kept whole, never evidence."""

    cell: CellResult = Field(description="The invalid try, with its reasons.")
    records: list[RequestRecord] = Field(description="That try's requests.")


class WindowResult(FrozenModel):
    """A bench window's result file: the spec, every cell and every raw request."""

    schema_version: Literal[1] = Field(default=1, description="Result file format version.")
    tool_version: str = Field(description="gb300lane version that produced the file.")
    python: str = Field(description="Python version.")
    platform: str = Field(description="platform.platform() of the client host.")
    created_at: str = Field(description="UTC time the window started (ISO 8601).")
    endpoint: str = Field(description="Base URL the window ran against.")
    model: str = Field(description="Served model name sent in every request.")
    server_version: dict[str, Any] | None = Field(description="The server's /version body, when it answered.")
    recipe: str | None = Field(description="Recipe name, when the window ran against a known recipe.")
    fingerprint: str | None = Field(description="Recipe fingerprint, when known.")
    window: dict[str, Any] = Field(description="The WindowSpec the window ran, as data.")
    load: LoadSpec = Field(
        default_factory=lambda: LoadSpec(mode="closed"),
        description="How requests were offered: closed loop at the window's concurrency levels, or open loop.",
    )
    valid: bool = Field(description="True when every cell is valid.")
    cells: list[CellResult] = Field(description="Cells in the order they ran.")
    records: list[RequestRecord] = Field(description="Every request, in the order the cells ran.")
    retried: list[RetriedCell] = Field(
        default_factory=list,
        description="Tries of cells that came back invalid and were run again (`invalid_retries`), in the order "
        "they ran; `cells` and `records` hold each cell's last try.",
    )

    lossless: LosslessResult | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The losslessness check of the window's outputs by a referee (`bench --referee`); None: not "
        "checked.",
    )

    def outputs(self) -> dict[str, str]:
        """Generated text of every successful request, keyed by `output_key`."""
        return {output_key(rec): rec.text for rec in self.records if rec.ok}

    def quality_rates(self) -> list[QualityRate]:
        """Task-quality pass rates per class and check over the requests that carry an outcome (empty: none)."""
        return quality_rates(self.records)


class QualityRate(FrozenModel):
    """The task-quality pass rate of one class and check over a window's requests."""

    cls: str = Field(description="Traffic class.")
    check: str = Field(description="The check (tool_call, json, yaml, csv, python).")
    checked: int = Field(description="Requests checked (finished requests whose transcript asks for it).")
    passed: int = Field(description="Of them, passed.")
    rate: float = Field(description="passed / checked.")
    low: float = Field(description="Clopper-Pearson 95% interval, lower end.")
    high: float = Field(description="Clopper-Pearson 95% interval, upper end.")
    cut_at_max_tokens: int = Field(description="Checked requests that ended at max_tokens (finish_reason length).")
    from_content: int = Field(description="tool_call: requests whose call came from the content, not tool_calls.")
    top_error: str | None = Field(description="The most frequent first error among those that failed.")


def quality_rates(records: list[RequestRecord]) -> list[QualityRate]:
    """Per (class, check), in the order met: pass rates with exact 95% intervals (bench.quality's outcomes)."""
    from collections import Counter

    from scipy.stats import binomtest

    groups: dict[tuple[str, str], list[QualityOutcome]] = {}
    for rec in records:
        if rec.quality is not None:
            groups.setdefault((rec.cls, rec.quality.ask.check), []).append(rec.quality)
    out = []
    for (cls, check), outcomes in groups.items():
        n = len(outcomes)
        k = sum(o.passed for o in outcomes)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        errors = Counter(o.error for o in outcomes if o.error)
        out.append(QualityRate(
            cls=cls, check=check, checked=n, passed=k, rate=k / n, low=float(ci.low), high=float(ci.high),
            cut_at_max_tokens=sum(o.finish_reason == "length" for o in outcomes),
            from_content=sum(o.source == "content" for o in outcomes),
            top_error=errors.most_common(1)[0][0] if errors else None,
        ))  # fmt: skip
    return out


def output_key(rec: RequestRecord) -> str:
    """`<class>/<transcript id>/c<concurrency>/r<round>`: one request's identity across arms.

    Concurrency (or an open-loop cell's rate) is part of the key because
    batching may legitimately change greedy outputs on a real engine, so
    outputs are only compared like for like. A second pass over the
    transcripts (`repeat`) adds `/x<repeat>`.
    """
    load = f"rate{rec.request_rate:g}" if rec.request_rate is not None else f"c{rec.concurrency}"
    key = f"{rec.cls}/{rec.transcript_id}/{load}/r{rec.round}"
    return f"{key}/x{rec.repeat}" if rec.repeat else key


def load_label(cell: CellResult) -> str:
    """`C8` for a closed-loop cell, `2/s` for an open-loop one."""
    return f"{cell.request_rate:g}/s" if cell.request_rate is not None else f"C{cell.concurrency}"
