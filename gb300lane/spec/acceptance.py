"""Acceptance arithmetic: from speculative-decoding counters to per-position rates.

Two conventions are kept apart by name, because they differ under a k
schedule (`num_speculative_tokens_per_batch_size`), where drafts have
different lengths:

- `a_p` (this product's convention): drafts accepted at position p over the
  drafts that *had* a position p. This is the number the marginal curve and
  the k advisor need. It is exact when every draft had length k, or when the
  draft-length mix is known (the embedded engine's
  `gb300lane_engine_drafts_by_length_total{length}`).
- `vllm_per_position` (vLLM's log line and dashboards): accepted at position
  p over *all* drafts, whatever their length.

Tokens per verify step is vLLM's mean acceptance length, 1 + accepted / drafts,
in both conventions; it equals 1 + sum(a_p) only when every draft had length k.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from gb300lane.errors import MetricsError
from gb300lane.models import FrozenModel


class SpecCounters(FrozenModel):
    """Speculative-decoding counters over one window (or since engine start)."""

    num_drafts: int = Field(ge=0, description="verify steps that carried a draft (vllm:spec_decode_num_drafts)")
    num_draft_tokens: int = Field(ge=0, description="draft tokens proposed (vllm:spec_decode_num_draft_tokens)")
    num_accepted_tokens: int = Field(ge=0, description="draft tokens accepted (vllm:spec_decode_num_accepted_tokens)")
    accepted_per_pos: tuple[int, ...] = Field(
        default=(), description="accepted drafts per 0-based position (vllm:spec_decode_num_accepted_tokens_per_pos)"
    )
    drafts_by_length: dict[int, int] | None = Field(
        default=None, description="drafts per draft length, where the engine exports it; None when unknown"
    )


class AcceptanceStats(FrozenModel):
    """What the counters say about acceptance, in both conventions."""

    a_p: tuple[float, ...] = Field(description="accepted at position p over the drafts that had position p (1-based p)")
    a_p_exact: bool = Field(
        description="True when the drafts that had each position are known (one draft length, or drafts_by_length)"
    )
    marginal: tuple[float | None, ...] = Field(
        description="a_p / a_(p-1) with a_0 = 1: the chance position p is right given the step reached it"
    )
    vllm_per_position: tuple[float, ...] = Field(
        description="vLLM's convention: accepted at position p over all drafts"
    )
    tokens_per_step: float = Field(description="1 + accepted / drafts: tokens emitted per verify step")
    tokens_per_full_draft: float = Field(description="1 + sum(a_p): tokens per step if every draft had the full length")
    mean_drafts_per_step: float = Field(description="draft tokens / drafts: the mean draft length actually run")
    draft_acceptance_rate: float = Field(description="accepted / draft tokens")


def _drafts_with_position(c: SpecCounters) -> tuple[list[int] | None, bool]:
    """Drafts that had position p (0-based), and whether that count is exact."""
    k = len(c.accepted_per_pos)
    if c.drafts_by_length is not None:
        lengths = c.drafts_by_length
        if sum(lengths.values()) != c.num_drafts:
            raise MetricsError(
                f"gb300lane_engine_drafts_by_length_total sums to {sum(lengths.values())} drafts but "
                f"vllm:spec_decode_num_drafts_total counts {c.num_drafts}; take both from the same scrape"
            )
        if sum(length * n for length, n in lengths.items()) != c.num_draft_tokens:
            raise MetricsError(
                "gb300lane_engine_drafts_by_length_total implies "
                f"{sum(length * n for length, n in lengths.items())} draft tokens but "
                f"vllm:spec_decode_num_draft_tokens_total counts {c.num_draft_tokens}; take both from the same scrape"
            )
        return [sum(n for length, n in lengths.items() if length > p) for p in range(k)], True
    if c.num_draft_tokens == c.num_drafts * k:
        return [c.num_drafts] * k, True
    return None, False


def acceptance(c: SpecCounters) -> AcceptanceStats:
    """Per-position acceptance and tokens per step from one set of counters.

    Without the draft-length mix under a k schedule, a_p falls back to vLLM's
    all-drafts convention and `a_p_exact` says so.
    """
    if c.num_drafts <= 0 or c.num_draft_tokens <= 0:
        raise MetricsError(
            "vllm:spec_decode_num_drafts_total is 0 in this window: no speculative drafts were counted; "
            "check that the lane runs speculative decoding and that traffic ran between the scrapes"
        )
    if c.accepted_per_pos and sum(c.accepted_per_pos) != c.num_accepted_tokens:
        raise MetricsError(
            f"vllm:spec_decode_num_accepted_tokens_per_pos_total sums to {sum(c.accepted_per_pos)} but "
            f"vllm:spec_decode_num_accepted_tokens_total counts {c.num_accepted_tokens}; take both from the same scrape"
        )
    with_pos, exact = _drafts_with_position(c)
    vllm_pp = tuple(n / c.num_drafts for n in c.accepted_per_pos)
    if with_pos is None:
        a_p = vllm_pp
    else:
        a_p = tuple(n / d if d else 0.0 for n, d in zip(c.accepted_per_pos, with_pos))
    return AcceptanceStats(
        a_p=a_p,
        a_p_exact=exact,
        marginal=marginals(a_p),
        vllm_per_position=vllm_pp,
        tokens_per_step=1.0 + c.num_accepted_tokens / c.num_drafts,
        tokens_per_full_draft=tokens_per_step_from_a_p(a_p),
        mean_drafts_per_step=c.num_draft_tokens / c.num_drafts,
        draft_acceptance_rate=c.num_accepted_tokens / c.num_draft_tokens,
    )


def marginals(a_p: Sequence[float]) -> tuple[float | None, ...]:
    """marginal_p = a_p / a_(p-1), a_0 = 1; None where the step never reached p-1."""
    out: list[float | None] = []
    prev = 1.0
    for a in a_p:
        out.append(a / prev if prev > 0 else None)
        prev = a
    return tuple(out)


def a_p_from_marginals(marginal: Sequence[float]) -> tuple[float, ...]:
    """The inverse of `marginals`: a_p is the running product of the marginal curve."""
    out, run = [], 1.0
    for m in marginal:
        run *= m
        out.append(run)
    return tuple(out)


def tokens_per_step_from_a_p(a_p: Sequence[float]) -> float:
    """1 + sum(a_p): the +1 is the token the target always emits itself."""
    return 1.0 + float(sum(a_p))


def tokens_per_second(tokens_per_step: float, step_ms: float) -> float:
    """tok/s = tokens per step / seconds per step."""
    if step_ms <= 0:
        raise ValueError(f"step time must be positive; got {step_ms} ms")
    return tokens_per_step / (step_ms / 1000.0)


def ratio_to_control_mean(treatment: float, *controls: float) -> float:
    """A bracketed arm against the mean of its controls (A -> B -> A2 gives B / mean(A, A2))."""
    if not controls:
        raise ValueError("ratio_to_control_mean needs at least one control value")
    return treatment / (sum(controls) / len(controls))
