"""The between-boot component of a tested gate's noise: how far one boot's mean sits from the lane's.

A boot has its own numerics (on the embedded engine its boot seed moves
every context's weights; on a real lane, kernels and autotuning), so every
request of an arm shares a shift its own spread cannot show. With N boots of
the control recipe, each running the same transcripts with its own seeds,
the per-transcript units of a gate (`cards.evidence`) follow

    y[boot, t] = mu_t + beta_boot + e[boot, t],   Var(beta) = sigma_b^2,  Var(e) = sigma_e^2

and the two-way analysis of variance (boots x transcripts) gives

    E[MS_boot] = sigma_e^2 + n sigma_b^2,    E[MS_res] = sigma_e^2
    sigma_b^2  = (MS_boot - MS_res) / n      (relative: over the grand mean squared)

with Satterthwaite's degrees of freedom for that difference, and a one-sided
95% upper bound from the chi-square law of MS_boot. A per-cell
gate pools its cells' estimates (the mean of the per-cell sigma_b^2). The
estimate is what `card plan --boots N` prints for the card to register as
`boot_sd` / `boot_df`, and what `card calibrate` reports from its control
boots as a check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gb300lane.cards.data import ArmData
from gb300lane.cards.evidence import TestedGate, _by_transcript, _units
from gb300lane.cards.schema import ControlsEquivalence, TokensPerStepTest


@dataclass(frozen=True)
class BootEstimate:
    """sigma_b of one gate's units, relative to their mean."""

    sd: float  # max(0, estimate): what a card registers
    signed: float  # sqrt(|s2|) with the estimate's sign (a negative one says: no boot effect seen)
    df: float | None  # Satterthwaite degrees of freedom (None when the estimate is not positive)
    f_ratio: float  # MS_boot / MS_res: about 1 when boots add nothing
    boots: int
    units: int  # transcripts per boot (the smallest group's)
    upper: float  # one-sided 95% upper confidence bound of sigma_b (chi-square on the boots' mean square)

    def describe(self) -> str:
        df = "-" if self.df is None else f"{self.df:.0f}"
        return (f"boot sd {self.sd:.3%} (signed {self.signed:+.3%}, df {df}, 95% upper bound {self.upper:.3%}, "
                f"F {self.f_ratio:.2f}, {self.boots} boots x {self.units} transcripts)")


def metric_of(gate: TestedGate) -> str:
    if isinstance(gate, ControlsEquivalence):
        return gate.metric
    return "tokens_per_step" if isinstance(gate, TokensPerStepTest) else "decode_tok_s"


BootUnits = dict[Any, dict[str, float]]


def boot_units(gate: TestedGate, arm: ArmData) -> BootUnits:
    """One boot's units for `gate`: per test group (None for an aggregate gate, the cell otherwise),
    transcript -> value."""
    units, _ = _units(arm, gate, metric_of(gate))
    keys = sorted(units, key=lambda k: (k[1], k[0]))
    groups = [(None, keys)] if gate.scope == "aggregate" else [(k, [k]) for k in keys]
    return {g: {u: v for u, (v, _) in _by_transcript(units, ks).items()} for g, ks in groups}


def estimate_boot_sd(gate: TestedGate, boots: list[ArmData]) -> BootEstimate | None:
    """sigma_b of `gate`'s units over `boots` (each one boot of the same recipe); None with fewer than 3 boots
    or no transcript common to them."""
    return estimate_from_units([boot_units(gate, a) for a in boots])


def estimate_from_units(per_boot: list[BootUnits]) -> BootEstimate | None:
    """sigma_b from each boot's units (`boot_units`)."""
    import numpy as np
    from scipy.stats import chi2

    if len(per_boot) < 3:
        return None
    names = set(per_boot[0]).intersection(*[set(p) for p in per_boot[1:]])
    s2s: list[float] = []
    uppers: list[float] = []
    var_terms: list[float] = []
    fs: list[float] = []
    units = 0
    for g in sorted(names, key=repr):
        common = sorted(set(per_boot[0][g]).intersection(*[set(p[g]) for p in per_boot[1:]]))
        if len(common) < 2:
            continue
        y = np.array([[p[g][u] for u in common] for p in per_boot], dtype=np.float64)
        grand = float(y.mean())
        if grand <= 0:
            continue
        y = y / grand
        n_b, n = y.shape
        bm, tm = y.mean(axis=1), y.mean(axis=0)
        res = y - bm[:, None] - tm[None, :] + 1.0
        df_b, df_r = n_b - 1, (n_b - 1) * (n - 1)
        ms_b = n * float(((bm - 1.0) ** 2).sum()) / df_b
        ms_r = float((res ** 2).sum()) / df_r
        s2s.append((ms_b - ms_r) / n)
        # E[MS_boot] = sigma_e^2 + n sigma_b^2 and MS_boot ~ E chi2(df_b) / df_b; sigma_e^2 is pinned by df_r
        uppers.append((ms_b * df_b / float(chi2.ppf(0.05, df_b)) - ms_r) / n)
        var_terms.append(2 * (ms_b / n) ** 2 / df_b + 2 * (ms_r / n) ** 2 / df_r)
        fs.append(ms_b / ms_r if ms_r > 0 else math.inf)
        units = n if units == 0 else min(units, n)
    if not s2s:
        return None
    s2 = sum(s2s) / len(s2s)
    var = sum(var_terms) / len(s2s) ** 2
    df = 2 * s2 * s2 / var if s2 > 0 and var > 0 else None
    return BootEstimate(sd=math.sqrt(max(0.0, s2)), signed=math.copysign(math.sqrt(abs(s2)), s2), df=df,
                        f_ratio=sum(fs) / len(fs), boots=len(per_boot), units=units,
                        upper=math.sqrt(max(0.0, sum(uppers) / len(uppers))))


__all__ = ["BootEstimate", "BootUnits", "boot_units", "estimate_boot_sd", "estimate_from_units", "metric_of"]
