"""The k advisor: which number of speculative tokens buys the most tokens per second.

Throughput is two multipliers that move apart as k grows: tokens per verify
step (1 + sum of a_p, from a marginal acceptance curve) and seconds per step
(a straight line in k, fitted by least squares to measured step times).
A curve measured at one k describes that k's operating point only: a drafter
asked for a wider block than it was trained on also degrades its early
positions. So each candidate k uses the curve measured at k itself where there
is one, and otherwise the shortest measured curve that reaches k, truncated,
flagged as an extrapolation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from gb300lane.errors import LaneError
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.spec.acceptance import a_p_from_marginals, tokens_per_second, tokens_per_step_from_a_p


class AcceptanceCurve(FrozenModel):
    """Acceptance per position measured while drafting k tokens; give a_p or the marginal curve."""

    k: int = Field(ge=1, description="the num_speculative_tokens the curve was measured at")
    a_p: tuple[float, ...] | None = Field(default=None, description="accepted at p over drafts that had p, p = 1..k")
    marginal: tuple[float, ...] | None = Field(default=None, description="a_p / a_(p-1), p = 1..k")
    label: str = Field(default="", description="where the curve came from (class, concurrency, card)")

    @model_validator(mode="after")
    def _one_form(self) -> AcceptanceCurve:
        given = [v for v in (self.a_p, self.marginal) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of a_p or marginal")
        if len(given[0]) != self.k:
            raise ValueError(f"the curve has {len(given[0])} positions but k = {self.k}")
        if any(not 0.0 <= v <= 1.0 for v in given[0]):
            raise ValueError("acceptance values must lie in [0, 1]")
        return self

    def acceptance_by_position(self) -> tuple[float, ...]:
        return self.a_p if self.a_p is not None else a_p_from_marginals(self.marginal or ())


class StepTimePoint(FrozenModel):
    """One measured decode step time at a given k."""

    k: int = Field(ge=0, description="num_speculative_tokens during the measurement")
    ms: float = Field(gt=0, description="milliseconds per verify step")


class AdvisorInput(FrozenModel):
    """What the advisor reads from a receipts file (`gb300lane spec advise --receipts FILE`)."""

    schema_version: Literal[1] = Field(description="file format version")
    curves: tuple[AcceptanceCurve, ...] = Field(min_length=1, description="acceptance curves, one per measured k")
    step_ms: tuple[StepTimePoint, ...] = Field(min_length=1, description="measured step times (two distinct k or more)")
    trained_block: int | None = Field(default=None, ge=1, description="the checkpoint's dspark_block_size")


class StepTimeModel(FrozenModel):
    """ms per step = intercept + slope * k, fitted by least squares."""

    intercept_ms: float = Field(description="step time with no drafts")
    slope_ms: float = Field(description="added step time per draft token")
    points: tuple[StepTimePoint, ...] = Field(description="the measurements the line was fitted to")

    def ms(self, k: int) -> float:
        return self.intercept_ms + self.slope_ms * k


class KPrediction(FrozenModel):
    k: int = Field(description="candidate num_speculative_tokens")
    tokens_per_step: float = Field(description="1 + sum of a_p up to k")
    step_ms: float = Field(description="modelled milliseconds per step")
    tok_s: float = Field(description="tokens per step / seconds per step, one stream")
    curve_k: int = Field(description="the k whose measured curve was used")
    extrapolated: bool = Field(description="True when the curve was measured at a different k than this one")
    outside_trained_block: bool = Field(description="True when k exceeds the checkpoint's trained block")


class Advice(FrozenModel):
    recommended_k: int = Field(description="the candidate with the highest predicted tok/s")
    predictions: tuple[KPrediction, ...] = Field(description="one row per candidate k, ascending")
    step_model: StepTimeModel = Field(description="the fitted step-time line")
    trained_block: int | None = Field(description="the checkpoint's dspark_block_size, when known")
    warnings: tuple[str, ...] = Field(description="things the reader must weigh before acting")


def fit_step_time(points: list[StepTimePoint] | tuple[StepTimePoint, ...]) -> StepTimeModel:
    """Least-squares line through measured (k, ms) points; needs two distinct k."""
    ks = np.array([pt.k for pt in points], dtype=float)
    ms = np.array([pt.ms for pt in points], dtype=float)
    if len(set(ks.tolist())) < 2:
        raise LaneError(
            "step_ms: the step-time model needs measurements at two different k or more; "
            "add a point such as --step 9:12.2"
        )
    slope, intercept = np.polyfit(ks, ms, 1)
    return StepTimeModel(intercept_ms=float(intercept), slope_ms=float(slope), points=tuple(points))


def advise(
    curves: list[AcceptanceCurve] | tuple[AcceptanceCurve, ...],
    step_points: list[StepTimePoint] | tuple[StepTimePoint, ...],
    *,
    trained_block: int | None = None,
    candidates: list[int] | None = None,
) -> Advice:
    """Predict tokens/step and tok/s for each candidate k and recommend the fastest."""
    if not curves:
        raise LaneError("the advisor needs at least one acceptance curve (--a-p, --marginal or --receipts)")
    model = fit_step_time(step_points)
    by_k = {c.k: c for c in curves}
    longest = max(by_k)
    ks = sorted(set(candidates)) if candidates else list(range(1, longest + 1))
    rows: list[KPrediction] = []
    warnings: list[str] = []
    for k in ks:
        source_k = k if k in by_k else min((m for m in by_k if m >= k), default=None)
        if source_k is None:
            raise LaneError(f"k = {k} is longer than every measured curve (longest k = {longest}); measure it first")
        a_p = by_k[source_k].acceptance_by_position()[:k]
        step_ms = model.ms(k)
        if step_ms <= 0:
            raise LaneError(f"the fitted step time at k = {k} is {step_ms:.2f} ms; measure step times nearer this k")
        tps = tokens_per_step_from_a_p(a_p)
        rows.append(
            KPrediction(
                k=k,
                tokens_per_step=tps,
                step_ms=step_ms,
                tok_s=tokens_per_second(tps, step_ms),
                curve_k=source_k,
                extrapolated=source_k != k,
                outside_trained_block=trained_block is not None and k > trained_block,
            )
        )
    best = max(rows, key=lambda r: r.tok_s)
    if trained_block is not None and best.k > trained_block:
        warnings.append(
            f"k = {best.k} exceeds the trained block (dspark_block_size = {trained_block}); "
            "acceptance past the block is extrapolation by the drafter, confirm with a bracketed card"
        )
    if trained_block is not None and any(k > trained_block for k in by_k):
        warnings.append(f"curves measured at k > {trained_block} are outside the trained block")
    if best.extrapolated:
        warnings.append(
            f"k = {best.k} has no curve of its own; its prediction truncates the k = {best.curve_k} curve, "
            "which understates acceptance if the drafter does better at its own width"
        )
    return Advice(
        recommended_k=best.k,
        predictions=tuple(rows),
        step_model=model,
        trained_block=trained_block,
        warnings=tuple(warnings),
    )


def load_advisor_input(path: Path) -> AdvisorInput:
    """Read an advisor receipts file; errors name the file and the failing key."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise LaneError(f"{path}: no such receipts file; pass the path of a JSON file with curves and step_ms") from exc
    except json.JSONDecodeError as exc:
        raise LaneError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); fix the file") from exc
    try:
        return AdvisorInput.model_validate(raw)
    except ValidationError as exc:
        detail = format_validation_error(exc, source=str(path), first_only=True)
        raise LaneError(f"{detail}; see `gb300lane spec advise --help` for the format") from exc
