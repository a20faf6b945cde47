"""Summary statistics as models built from raw values.

A window keeps every raw value in its per-request records; the models here
are derived views (percentiles of TTFT, TPOT, inter-token gaps, per-stream
decode rates) that a reader can recompute from those records.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from pydantic import Field

from gb300lane.models import FrozenModel


class Percentiles(FrozenModel):
    """Percentiles of one quantity over a set of raw values (linear interpolation)."""

    count: int = Field(description="How many raw values the percentiles are over.")
    mean: float | None = Field(description="Arithmetic mean; None when there are no values.")
    p50: float | None = Field(description="Median; None when there are no values.")
    p90: float | None = Field(description="90th percentile; None when there are no values.")
    p99: float | None = Field(description="99th percentile; None when there are no values.")
    min: float | None = Field(description="Smallest value; None when there are no values.")
    max: float | None = Field(description="Largest value; None when there are no values.")

    @classmethod
    def empty(cls) -> Percentiles:
        """No values: count 0 and None everywhere."""
        return cls(count=0, mean=None, p50=None, p90=None, p99=None, min=None, max=None)

    @classmethod
    def from_values(cls, values: Iterable[float]) -> Percentiles:
        """Build from raw values; an empty input gives count 0 and None everywhere."""
        arr = np.asarray([float(v) for v in values], dtype=np.float64)
        if arr.size == 0:
            return cls.empty()
        p50, p90, p99 = np.percentile(arr, [50.0, 90.0, 99.0])
        return cls(
            count=int(arr.size),
            mean=float(arr.mean()),
            p50=float(p50),
            p90=float(p90),
            p99=float(p99),
            min=float(arr.min()),
            max=float(arr.max()),
        )


def gaps_from_token_times(token_times: list[float]) -> list[float]:
    """Inter-token gaps from per-token arrival times (n tokens give n - 1 gaps).

    Tokens that arrived in one chunk share its arrival time, so they add gaps
    of zero: the gap is charged to the first token of the chunk, which is how
    a speculative step that emits several tokens at once is really seen by a
    streaming client.
    """
    return [b - a for a, b in zip(token_times, token_times[1:])]


def decode_rate(output_tokens: int, ttft_s: float | None, e2e_s: float | None) -> float | None:
    """Per-stream decode tokens per second: (tokens - 1) / (e2e - ttft).

    The first token is excluded because its time is the prefill's; None when
    the request produced fewer than two tokens or the decode span is zero.
    """
    if ttft_s is None or e2e_s is None or output_tokens < 2:
        return None
    span = e2e_s - ttft_s
    if span <= 0:
        return None
    return (output_tokens - 1) / span


def tpot(output_tokens: int, ttft_s: float | None, e2e_s: float | None) -> float | None:
    """Time per output token after the first: (e2e - ttft) / (tokens - 1)."""
    if ttft_s is None or e2e_s is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)
