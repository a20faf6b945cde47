"""The losslessness check's result, as written to a window result and a card's receipts (no numpy: the
bench's result models import it, and `gb300lane status` loads those without numpy). `spec.lossless` computes it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gb300lane.models import FrozenModel

LosslessStatus = Literal["PASS", "FAIL", "INCONCLUSIVE"]


class TempEstimate(FrozenModel):
    """The effective temperature, and the top-1 calibration, of one group of tokens."""

    tokens: int = Field(description="Tokens in the group the estimate reads (inside the top-k and the nucleus).")
    transcripts: int = Field(description="Transcripts those tokens come from (the unit of the interval).")
    t_eff: float | None = Field(description="Maximum-likelihood temperature against the referee's distribution.")
    t_low: float | None = Field(description="Lower end of its 1 - alpha interval (cluster-robust Wald on 1/T).")
    t_high: float | None = Field(description="Upper end of its 1 - alpha interval.")
    t_ratio: float | None = Field(description="t_eff over the served temperature: 1 is exact.")
    top1_observed: float | None = Field(description="Fraction of tokens that are the target's top token.")
    top1_expected: float | None = Field(description="That fraction's expectation under exact sampling.")
    z_mean: float | None = Field(description="Stouffer Z of the PIT's normal scores (negative: too greedy).")


class LosslessResult(FrozenModel):
    """The losslessness check of one window (an arm, a smoke, a bench run): verdict, statistic, effect."""

    schema_version: Literal[1] = Field(default=1, description="Layout version of this record.")
    status: LosslessStatus = Field(description="PASS, FAIL or INCONCLUSIVE.")
    reason: str = Field(description="Why, in one line an operator reads.")
    test: str = Field(description="The test and its error rate, stated.")
    temperature: float = Field(description="The served temperature the window sampled at.")
    top_p: float = Field(description="The served top_p.")
    alpha: float = Field(description="The false-FAIL rate under exact sampling the check holds.")
    margin: float = Field(description="Deviation of t_eff / T and of the top-1 ratio from 1 tolerated.")
    exact: bool = Field(description="Whether the full distribution (tail included) was determined (T = 1, top_p = 1).")
    statistic: float | None = Field(description="The mean test's Z.")
    p: float | None = Field(description="Bonferroni p of the mean, dispersion and top-1 tests.")
    p_mean: float | None = Field(description="Two-sided p of the mean test.")
    p_dispersion: float | None = Field(description="Two-sided p of the dispersion (chi-square) test.")
    p_top1: float | None = Field(description="Two-sided p of the top-1 calibration test.")
    tokens_scored: int = Field(description="Tokens the PIT counts.")
    transcripts: int = Field(description="Transcripts with at least one counted token.")
    tail_tokens: int = Field(description="Tokens outside the top-k, left out at T != 1 (counted at T = 1).")
    undetermined_tokens: int = Field(description="Tokens whose nucleus the bounds did not fix, left out.")
    outside_nucleus: int = Field(description="Tokens sampled surely outside the nucleus: impossible when exact.")
    overall: TempEstimate = Field(description="The effect over every counted token.")
    per_class: dict[str, TempEstimate] = Field(description="The effect per transcript class.")
    per_position: dict[str, TempEstimate] | None = Field(
        description="The effect per verify-block position, where the engine reported positions; else None."
    )
    per_position_note: str = Field(description="Why per-position effects are or are not reported.")
    referee: str = Field(default="", description="What scored the tokens (URL or kind).")
    referee_tokens: int = Field(default=0, description="Tokens the referee prefilled (prompts and outputs).")
    referee_s: float = Field(default=0.0, description="Wall time the referee took, seconds.")
    referee_requests: int = Field(default=0, description="Completions the referee answered (besides /tokenize).")
    excluded: dict[str, int] = Field(
        default_factory=dict, description="Requests the referee did not score, per reason (none: empty)."
    )


class TempDifference(FrozenModel):
    """B's effective temperature against the controls': the difference and its interval."""

    difference: float | None = Field(description="t_ratio(B) - t_ratio(controls).")
    low: float | None = Field(description="Lower end of the 1 - alpha interval (independent arms, delta method).")
    high: float | None = Field(description="Upper end.")
