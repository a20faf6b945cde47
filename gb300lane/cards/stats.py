"""The noise floor and the paired statistic a card reports beside every ratio.

Spreads are `1 - min/max` of two or more rates (the form in which the
write-up's "the two controls agree within 0.1-3.0%" reads). The paired
statistic is a seeded bootstrap of the mean per-transcript difference
candidate - mean(controls), relative to the controls' mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261026
CONFIDENCE = 0.95


def spread(values: list[float] | tuple[float, ...]) -> float | None:
    """1 - min/max of positive rates; None with fewer than two."""
    vals = [float(v) for v in values if v is not None]
    if len(vals) < 2 or max(vals) <= 0:
        return None
    return 1.0 - min(vals) / max(vals)


@dataclass(frozen=True)
class PairedCI:
    """Mean of per-transcript (candidate - controls), relative to the controls' mean, with its CI."""

    n: int
    mean_rel: float
    low_rel: float
    high_rel: float

    def describe(self) -> str:
        return f"{self.mean_rel:+.1%} [{self.low_rel:+.1%}, {self.high_rel:+.1%}] (n={self.n})"


def paired_bootstrap(candidate: dict[str, float], controls: list[dict[str, float]], *,
                     seed: int = BOOTSTRAP_SEED, resamples: int = BOOTSTRAP_RESAMPLES) -> PairedCI | None:
    """Bootstrap CI of mean(candidate[t] - mean_c controls[c][t]) over transcripts t seen in every arm.

    Pairing by transcript removes the between-transcript variance (a long
    prose prompt is slow in every arm), which is what lets a 2% effect stand
    out of a per-stream spread many times wider.
    """
    common = sorted(set(candidate).intersection(*[set(c) for c in controls])) if controls else []
    if len(common) < 2:
        return None
    b = np.array([candidate[t] for t in common], dtype=np.float64)
    ctrl = np.array([[c[t] for t in common] for c in controls], dtype=np.float64).mean(axis=0)
    base = float(ctrl.mean())
    if base <= 0:
        return None
    diffs = b - ctrl
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diffs), size=(resamples, len(diffs)))
    means = diffs[idx].mean(axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return PairedCI(n=len(common), mean_rel=float(diffs.mean()) / base, low_rel=float(low) / base,
                    high_rel=float(high) / base)
