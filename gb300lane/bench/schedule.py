"""Whether the k schedule is live: the draft length the engine ran in each cell against the recipe's schedule.

vLLM does not log the resolved `num_speculative_tokens_per_batch_size` (or its new name
`speculative_token_schedule`), drops it without failing when data parallel size > 1, and a runner may ignore
it; the counters say what ran. Per cell, the mean draft length is `num_draft_tokens / num_drafts` (the
/metrics deltas), and each request's own is its per-request counters' ratio. What the schedule predicts
depends on the batch sizes the steps ran at; the client's in-flight series (`DeliveredLoad`) gives their mix:
weighting each in-flight level b by the time spent there and by b (each running sequence drafts once per
step), the schedule predicts

    K_live = sum_b b * t_b * k(b) / sum_b b * t_b,

and an engine that ignores the schedule drafts the static k (`num_speculative_tokens`) at every batch size.
A cell decides where the two differ by at least `DECISIVE` tokens: it fails when the measured K lies nearer
the static k than K_live (the midpoint rule), with K, both predictions, the batch mix and the per-request
range as evidence. Where every request ran alone (peak in flight 1), each request's own K must be k(1).
The embedded engine also counts drafts by length: a length the schedule never gives at the batch sizes seen
fails outright.

This is a decision on counts, not a statistical test: the counters are exact, and the one estimate, the
batch mix, comes from the client's own timestamps; a cell too short to move off its ramp shows a mix near
its concurrency's neighbours, which the midpoint rule tolerates (the two predictions are at least a token
apart where it decides).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from gb300lane.bench.models import CellResult, RequestRecord, WindowResult, load_label
from gb300lane.models import FrozenModel

#: The least difference (tokens per draft) between the live and the ignored schedule's prediction that lets a cell
#: decide; below it the cell cannot tell them apart.
DECISIVE = 0.5
#: How far a C1 request's own draft length may stray from k(1) (a request's last step may draft fewer).
ALONE_TOLERANCE = 0.25

Schedule = Sequence[tuple[int, int, int]]


def k_at(schedule: Schedule, k: int, batch: int) -> int:
    """The k the schedule gives a step of `batch` sequences (clamped to k, as vLLM clamps); k past the last range."""
    for start, end, kk in schedule:
        if start <= batch <= end:
            return min(kk, k)
    return k


def batch_mix(cell: CellResult) -> dict[int, float]:
    """Seconds spent at each in-flight level b >= 1 during the cell, from the client's in-flight series; the
    configured concurrency alone where the series is missing."""
    series = cell.delivered.in_flight_series if cell.delivered is not None else []
    mix: dict[int, float] = {}
    for (t0, n), (t1, _) in zip(series, series[1:]):
        if n >= 1 and t1 > t0:
            mix[n] = mix.get(n, 0.0) + (t1 - t0)
    if not mix and cell.concurrency:
        mix[cell.concurrency] = 1.0
    return mix


def predicted_k(schedule: Schedule | None, k: int, mix: dict[int, float]) -> float:
    """The mean draft length a schedule predicts over a batch mix (each level weighted by b x its time)."""
    weights = {b: b * t for b, t in mix.items() if t > 0}
    total = sum(weights.values())
    if not total:
        return float(k)
    return sum(w * (k_at(schedule, k, b) if schedule else k) for b, w in weights.items()) / total


class CellSchedule(FrozenModel):
    """One cell's draft lengths against the schedule."""

    cell: str = Field(description="Class, load and round of the cell.")
    status: Literal["pass", "fail", "not_decisive"] = Field(
        description="pass, fail, or not_decisive (the live and the ignored schedule predict the same K here)."
    )
    measured_k: float = Field(description="num_draft_tokens / num_drafts over the cell (/metrics deltas).")
    live_k: float = Field(description="K the schedule predicts over the cell's batch mix.")
    static_k: int = Field(description="K an engine that ignores the schedule drafts (num_speculative_tokens).")
    drafts: int = Field(description="Drafts the cell counted.")
    batch_mix: dict[str, float] = Field(description="In-flight level -> seconds spent there (the client's series).")
    request_k: tuple[float, float] | None = Field(
        description="The least and the most K of one request (per-request counters); None without them."
    )
    lengths: dict[str, int] | None = Field(
        default=None, description="Drafts by length (the embedded engine counts them)."
    )
    reason: str = Field(description="Why the status, in words.")


class ScheduleCheck(FrozenModel):
    """The window's verdict on the k schedule."""

    status: Literal["pass", "fail", "unknown"] = Field(
        description="fail when any cell fails; unknown when no cell could decide."
    )
    schedule: tuple[tuple[int, int, int], ...] = Field(description="The recipe's schedule.")
    static_k: int = Field(description="num_speculative_tokens (the k the schedule clamps to).")
    cells: tuple[CellSchedule, ...] = Field(description="Each cell with spec counters.")
    summary: str = Field(description="One line.")

    @property
    def ok(self) -> bool:
        return self.status != "fail"


def _cell_key(c: CellResult | RequestRecord) -> tuple[str, int, int, float | None]:
    return (c.cls, c.concurrency, c.round, c.request_rate)


def check_cell(cell: CellResult, records: Sequence[RequestRecord], schedule: Schedule, k: int) -> CellSchedule | None:
    """One cell's decision (None when it counted no drafts)."""
    spec = cell.spec
    if spec is None or not spec.num_drafts:
        return None
    measured = spec.num_draft_tokens / spec.num_drafts
    mix = batch_mix(cell)
    live = predicted_k(schedule, k, mix)
    per = [
        r.spec_decode.num_draft_tokens / r.spec_decode.num_drafts
        for r in records
        if r.ok and r.spec_decode is not None and r.spec_decode.num_drafts
    ]
    raw = (cell.counters_delta or {}).get("drafts_by_length")
    lengths = {str(n): int(v) for n, v in raw.items()} if isinstance(raw, dict) and raw else None
    label = f"{cell.cls} {load_label(cell)} r{cell.round}"
    common = dict(
        cell=label,
        measured_k=round(measured, 4),
        live_k=round(live, 4),
        static_k=k,
        drafts=spec.num_drafts,
        batch_mix={str(b): round(t, 4) for b, t in sorted(mix.items())},
        request_k=(round(min(per), 4), round(max(per), 4)) if per else None,
        lengths=lengths,
    )
    seen = sorted(mix) or [cell.concurrency]
    allowed = {k_at(schedule, k, b) for b in range(1, max(seen) + 1)}
    if lengths:
        stray = sorted(int(n) for n, v in lengths.items() if v and int(n) not in allowed)
        if stray:
            return CellSchedule(
                status="fail",
                **common,
                reason=(
                    f"drafts of length {', '.join(map(str, stray))}, which the schedule never gives at batch sizes "
                    f"1-{max(seen)} (it gives {', '.join(map(str, sorted(allowed)))})"
                ),
            )
    alone = cell.delivered is not None and cell.delivered.peak_in_flight == 1
    if alone and per and any(abs(x - k_at(schedule, k, 1)) > ALONE_TOLERANCE for x in per):
        return CellSchedule(
            status="fail",
            **common,
            reason=(
                f"requests that ran alone drafted {min(per):.2f}-{max(per):.2f} tokens per draft; the schedule gives "
                f"{k_at(schedule, k, 1)} at batch 1"
            ),
        )
    if abs(live - k) < DECISIVE:
        return CellSchedule(
            status="not_decisive",
            **common,
            reason=(f"the schedule and a static k predict {live:.2f} and {k} here: this load cannot tell them apart"),
        )
    if abs(measured - k) < abs(measured - live):
        return CellSchedule(
            status="fail",
            **common,
            reason=(
                f"K = {measured:.2f} drafted per draft, nearer the static k = {k} than the {live:.2f} the schedule "
                "predicts at this batch mix: the engine does not run the schedule"
            ),
        )
    return CellSchedule(
        status="pass",
        **common,
        reason=(f"K = {measured:.2f}, as the schedule predicts ({live:.2f}; a static k would be {k})"),
    )


def check_schedule(result: WindowResult, schedule: Schedule | None, k: int | None) -> ScheduleCheck | None:
    """The window's cells against the recipe's schedule; None when the recipe has no schedule or no k."""
    if not schedule or k is None:
        return None
    by_cell: dict[tuple[str, int, int, float | None], list[RequestRecord]] = {}
    for r in result.records:
        by_cell.setdefault(_cell_key(r), []).append(r)
    cells = [
        c
        for c in (
            check_cell(cell, by_cell.get(_cell_key(cell), []), schedule, k) for cell in result.cells if cell.valid
        )
        if c is not None
    ]
    failed = [c for c in cells if c.status == "fail"]
    decided = [c for c in cells if c.status == "pass"]
    if failed:
        status: Literal["pass", "fail", "unknown"] = "fail"
        summary = f"k schedule NOT live: {failed[0].cell}: {failed[0].reason}" + (
            f" (and {len(failed) - 1} more cell(s))" if len(failed) > 1 else ""
        )
    elif decided:
        status = "pass"
        summary = f"k schedule live in {len(decided)} cell(s): " + "; ".join(
            f"{c.cell} K {c.measured_k:.2f} (schedule {c.live_k:.2f}, static {k})" for c in decided[:3]
        )
    else:
        status = "unknown"
        summary = (
            "no cell could tell the schedule from a static k (their predictions differ by less than "
            f"{DECISIVE} at the loads run); run a concurrency inside a range whose k differs from {k}"
        )
    return ScheduleCheck(
        status=status,
        schedule=tuple((int(a), int(b), int(c)) for a, b, c in schedule),
        static_k=k,
        cells=tuple(cells),
        summary=summary,
    )


__all__ = ["CellSchedule", "ScheduleCheck", "batch_mix", "check_cell", "check_schedule", "k_at", "predicted_k"]
