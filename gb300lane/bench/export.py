"""Window results in other tools' shapes: `vllm bench serve --save-result` JSON and a flat CSV of cells.

vLLM's benchmark writes one JSON object per run (one concurrency or request
rate); `--append-result` puts several runs in one file, one object a line.
A window is several runs (class x load x round cells), so the vllm export is
that JSON-lines file, one object per cell, with the keys vLLM 0.33's
`vllm/benchmarks/serve.py` writes by default for a generation run (the
snapshot `vllm-0.33.0-bench-serve-keys.json`, derived from the wheel by
scripts/snapshot_vllm_bench_keys.py), percentiles for ttft, tpot, itl and
e2el as with `--percentile-metrics ttft,tpot,itl,e2el`, the spec-decode
fields, and the cell's identity as `gb300lane_*` keys, the way vLLM's
`--metadata KEY=VALUE` adds keys. Values are recomputed from the raw
per-request records on the client's wall clock, with vLLM's definitions:
TTFT = send to the first event with `choices`, ITL = the gap before every
later such event (one per event, however many events one read brought, as
vLLM's client stamps each line), e2el = send to the last such event, TPOT =
(e2el - ttft) / (tokens - 1), max_output_tokens_per_s over one-second
buckets. Records kept before per-event times (no `event_times_s`) fall back
to their token times, one chunk per distinct time.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from typing import Any, Literal, get_args

import numpy as np
from pydantic import JsonValue

from gb300lane.bench.models import CellResult, ClockStats, RequestRecord, WindowResult
from gb300lane.bench.stats import Percentiles
from gb300lane.errors import BenchError

ExportFormat = Literal["vllm", "csv"]
FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
#: The vLLM version whose `bench serve` keys the vllm export writes.
VLLM_VERSION = "0.33.0"
#: Metrics given percentile keys, as `--percentile-metrics ttft,tpot,itl,e2el` would.
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
#: Percentiles written per metric (vLLM's default `--metric-percentiles 99`).
METRIC_PERCENTILES = (99.0,)


def vllm_bench_keys(version: str = VLLM_VERSION) -> dict[str, JsonValue]:
    """The committed snapshot of the keys `vllm bench serve --save-result` writes."""
    path = resources.files("gb300lane.data").joinpath(f"vllm-{version}-bench-serve-keys.json")
    if not path.is_file():
        raise BenchError(
            f"no vllm bench serve key snapshot for {version}; run scripts/snapshot_vllm_bench_keys.py on that wheel"
        )
    keys: dict[str, JsonValue] = json.loads(path.read_text(encoding="utf-8"))
    return keys


def cell_records(result: WindowResult, cell: CellResult) -> list[RequestRecord]:
    """The requests of one cell, matched by class, load and round."""
    return [
        r
        for r in result.records
        if r.cls == cell.cls
        and r.round == cell.round
        and r.concurrency == cell.concurrency
        and r.request_rate == cell.request_rate
    ]


def _chunk_times(token_times: list[float]) -> list[float]:
    """Arrival of each chunk: tokens of one chunk share its time, so drop the repeats."""
    out: list[float] = []
    for t in token_times:
        if not out or t != out[-1]:
            out.append(t)
    return out


def vllm_timings(rec: RequestRecord) -> tuple[float | None, list[float], float | None]:
    """(ttft, itl gaps, e2el) of one request as `vllm bench serve` measures them, seconds."""
    events = rec.event_times_s or _chunk_times(rec.token_times_s)
    if not events:
        return None, [], None
    return events[0], [b - a for a, b in zip(events, events[1:])], events[-1]


def _stats(values: list[float]) -> dict[str, float]:
    """vLLM's mean/median/std/pXX in ms over values in seconds (`np.mean(values or 0)`: zeros when empty)."""
    arr = np.asarray(values or [0.0], dtype=np.float64) * 1000.0
    out = {"mean": float(arr.mean()), "median": float(np.median(arr)), "std": float(arr.std())}
    for p in METRIC_PERCENTILES:
        out[f"p{int(p) if int(p) == p else p}"] = float(np.percentile(arr, p))
    return out


def _peaks(ok: list[RequestRecord]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests: one-second buckets from the first send."""
    if not ok:
        return 0.0, 0
    t0 = min(r.start_s for r in ok)
    end = max(r.start_s + (r.e2e_s or 0.0) for r in ok)
    n = int(math.ceil(end - t0)) + 1
    tokens = np.zeros(n)
    active = np.zeros(n)
    for r in ok:
        for t in r.token_times_s:
            b = int(r.start_s + t - t0)
            if 0 <= b < n:
                tokens[b] += 1
        for s in range(int(r.start_s - t0), int(r.start_s + (r.e2e_s or 0.0) - t0) + 1):
            active[s] += 1
    return float(tokens.max()), int(active.max())


def vllm_record(result: WindowResult, cell: CellResult) -> dict[str, object]:
    """One cell as `vllm bench serve --save-result` writes one run."""
    recs = cell_records(result, cell)
    ok = [r for r in recs if r.ok]
    duration = cell.wall_span_s
    total_in = sum(r.prompt_tokens or 0 for r in ok)
    total_out = sum(r.output_tokens or 0 for r in ok)
    timed = [(r, *vllm_timings(r)) for r in ok]
    ttfts = [t for _, t, _, _ in timed if t is not None]
    tpots = [
        (e - t) / ((r.output_tokens or 0) - 1)
        for r, t, _, e in timed
        if e is not None and t is not None and (r.output_tokens or 0) > 1
    ]
    itls = [g for _, _, gaps, _ in timed for g in gaps]
    e2els = [e for _, _, _, e in timed if e is not None]
    peak_tok_s, peak_conc = _peaks(ok)
    kinds = {r.kind for r in recs}
    backend = "openai-chat" if kinds == {"chat"} else "openai"
    created = datetime.fromisoformat(result.created_at.replace("Z", "+00:00"))
    out: dict[str, object] = {
        "date": created.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": None,
        "model_id": result.model,
        "tokenizer_id": result.model,
        "num_prompts": cell.requests,
        # Closed loop is vLLM's `--request-rate inf --max-concurrency C`; Poisson arrivals are burstiness 1.
        "request_rate": cell.request_rate if cell.request_rate is not None else "inf",
        "burstiness": 1.0,
        "max_concurrency": cell.concurrency if cell.request_rate is None else None,
        "gb300lane_class": cell.cls,
        "gb300lane_round": cell.round,
        "gb300lane_arrivals": cell.arrivals or "closed",
        "gb300lane_valid": cell.valid,
        "gb300lane_recipe": result.recipe,
        "gb300lane_fingerprint": result.fingerprint,
        "gb300lane_clock": "wall",
        "duration": duration,
        "completed": len(ok),
        "failed": len(recs) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration else 0.0,
        "request_goodput": None,
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration else 0.0,
        "latencies": e2els,
        # vLLM: request start minus its scheduled arrival (closed loop: every request arrives at 0).
        "queue_times": [r.start_s - (r.scheduled_s or 0.0) for r in ok],
        "max_output_tokens_per_s": peak_tok_s,
        "max_concurrent_requests": peak_conc,
        "rtfx": 0.0,
    }
    spec = cell.spec
    if spec is not None and spec.num_draft_tokens > 0:
        out.update(
            {
                "spec_decode_acceptance_rate": spec.num_accepted_tokens / spec.num_draft_tokens * 100,
                "spec_decode_acceptance_length": 1 + spec.num_accepted_tokens / spec.num_drafts
                if spec.num_drafts
                else 0.0,
                "spec_decode_num_drafts": spec.num_drafts,
                "spec_decode_draft_tokens": spec.num_draft_tokens,
                "spec_decode_accepted_tokens": spec.num_accepted_tokens,
                # vLLM's convention: accepted at position p over all drafts.
                "spec_decode_per_position_acceptance_rates": list(spec.vllm_per_position),
            }
        )
    for metric, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        s = _stats(values)
        out[f"mean_{metric}_ms"] = s["mean"]
        out[f"median_{metric}_ms"] = s["median"]
        out[f"std_{metric}_ms"] = s["std"]
        for key, value in s.items():
            if key.startswith("p"):
                out[f"{key}_{metric}_ms"] = value
    return out


def to_vllm(result: WindowResult) -> str:
    """JSON lines, one `vllm bench serve` result per cell (as `--append-result` writes a sweep)."""
    return "".join(json.dumps(vllm_record(result, cell)) + "\n" for cell in result.cells)


_PCT = ("mean", "p50", "p90", "p99")


def _clock_columns(stats: ClockStats | None, prefix: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        f"{prefix}_span_s": stats.span_s if stats else None,
        f"{prefix}_decode_tok_s": stats.decode_tok_s if stats else None,
        f"{prefix}_request_throughput": stats.request_throughput if stats else None,
    }
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        p: Percentiles | None = getattr(stats, name) if stats else None
        for q in _PCT:
            v = getattr(p, q) if p is not None else None
            row[f"{prefix}_{name[:-2]}_ms_{q}"] = v * 1000.0 if v is not None else None
    return row


def _lead(cell: CellResult) -> ClockStats:
    return ClockStats(
        clock=cell.clock,
        span_s=cell.span_s,
        decode_tok_s=cell.decode_tok_s,
        request_throughput=cell.request_throughput,
        decode_tok_s_per_stream=cell.decode_tok_s_per_stream,
        ttft_s=cell.ttft_s,
        tpot_s=cell.tpot_s,
        itl_s=cell.itl_s,
        e2e_s=cell.e2e_s,
    )


def csv_rows(result: WindowResult) -> list[dict[str, object]]:
    """One flat row per cell: identity, validity, both clocks' statistics and the spec-decode statistics."""
    rows = []
    for cell in result.cells:
        by_clock = {cell.clock: _lead(cell)}
        if cell.other_clock is not None:
            by_clock[cell.other_clock.clock] = cell.other_clock
        spec = cell.spec
        row: dict[str, object] = {
            "recipe": result.recipe,
            "fingerprint": result.fingerprint,
            "model": result.model,
            "class": cell.cls,
            "concurrency": cell.concurrency if cell.request_rate is None else None,
            "request_rate": cell.request_rate,
            "arrivals": cell.arrivals,
            "round": cell.round,
            "valid": cell.valid,
            "invalid_reasons": "; ".join(cell.invalid_reasons),
            "requests": cell.requests,
            "errors": cell.errors,
            "expected_tokens": cell.expected_tokens,
            "output_tokens": cell.output_tokens,
            "lead_clock": cell.clock,
        }
        for clock in ("modelled", "wall"):
            row.update(_clock_columns(by_clock.get(clock), clock))
        row.update(
            {
                "tokens_per_step": spec.tokens_per_step if spec else None,
                "num_drafts": spec.num_drafts if spec else None,
                "num_draft_tokens": spec.num_draft_tokens if spec else None,
                "num_accepted_tokens": spec.num_accepted_tokens if spec else None,
                "draft_acceptance_rate": spec.draft_acceptance_rate if spec else None,
                "a_p": " ".join(f"{v:.6g}" for v in spec.a_p) if spec else None,
                "marginal": " ".join("" if v is None else f"{v:.6g}" for v in spec.marginal) if spec else None,
            }
        )
        rows.append(row)
    return rows


def to_csv(result: WindowResult) -> str:
    """A flat CSV, one row per cell, header first."""
    rows = csv_rows(result)
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


#: Each export format's writer: a new format is a value of `ExportFormat`, its writer and its entry here (a test
#: checks the table covers the Literal; `bench export --format`'s help names the formats for people).
EXPORTERS: dict[ExportFormat, Callable[[WindowResult], str]] = {"vllm": to_vllm, "csv": to_csv}


def export(result: WindowResult, fmt: str) -> str:
    """The window result in `fmt` (one of FORMATS)."""
    for name in FORMATS:
        if fmt == name:
            return EXPORTERS[name](result)
    raise BenchError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
