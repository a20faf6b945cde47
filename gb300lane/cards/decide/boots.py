"""The between-boot component of a tested gate's noise: how far one boot's mean sits from the lane's.

A boot has its own numerics (on the embedded engine its boot seed moves
every context's weights; on a real lane, kernels and autotuning), so every
request of an arm shares a shift its own spread cannot show. With N boots of
the control recipe, each running the same transcripts with its own seeds,
the per-transcript units of a gate (`cards.decide.evidence`) follow

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.decide.evidence import by_transcript, units_of
from gb300lane.cards.schema import TestedGate

if TYPE_CHECKING:  # numpy is imported where the arithmetic runs
    import numpy as np


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
    lower: float = 0.0  # one-sided 95% lower confidence bound of sigma_b (the same law, the other tail)
    within: float = 0.0  # MS_res: the relative variance of one unit within a boot (what the boots are seen against)

    def describe(self) -> str:
        df = "-" if self.df is None else f"{self.df:.0f}"
        return (
            f"boot sd {self.sd:.3%} (signed {self.signed:+.3%}, df {df}, 95% upper bound {self.upper:.3%}, "
            f"F {self.f_ratio:.2f}, {self.boots} boots x {self.units} transcripts)"
        )


BOOT_SEED_VAR = "GB300LANE_BOOT_SEED"


def refuse_pinned_boot_seed(what: str, env: Mapping[str, str] | None = None) -> None:
    """CardError when the environment pins every boot's seed: each in-process boot (and each engine the lane
    starts) would then share one boot's numerics, and `what` would measure no boot variance at all."""
    import os

    from gb300lane.errors import CardError

    value = (os.environ if env is None else env).get(BOOT_SEED_VAR)
    if value:
        raise CardError(
            f"{what}: {BOOT_SEED_VAR}={value} is set in the environment, which pins every boot to one "
            f"seed, so it would measure no between-boot variance; unset it (`unset {BOOT_SEED_VAR}`) "
            "and run again"
        )


BootUnits = dict[Any, dict[str, float]]


def boot_units(gate: TestedGate, arm: ArmData) -> BootUnits:
    """One boot's units for `gate`: per test group (None for an aggregate gate, the cell otherwise),
    transcript -> value."""
    units, _ = units_of(arm, gate, gate.metric)
    keys = sorted(units, key=lambda k: (k[1], k[0]))
    groups = [(None, keys)] if gate.scope == "aggregate" else [(k, [k]) for k in keys]
    return {g: {u: v for u, (v, _) in by_transcript(units, ks).items()} for g, ks in groups}


def estimate_boot_sd(gate: TestedGate, boots: list[ArmData]) -> BootEstimate | None:
    """sigma_b of `gate`'s units over `boots` (each one boot of the same recipe); None with fewer than 3 boots
    or no transcript common to them."""
    return estimate_from_units([boot_units(gate, a) for a in boots])


def boot_mean_squares(y: np.ndarray) -> tuple[float, float, int, int]:
    """The boots x transcripts analysis of variance of `y` (one row per boot, relative to its grand mean):
    (MS_boot, MS_res, their degrees of freedom), with E[MS_boot] = sigma_e^2 + n sigma_b^2."""
    n_b, n = y.shape
    bm, tm = y.mean(axis=1), y.mean(axis=0)
    res = y - bm[:, None] - tm[None, :] + 1.0
    df_b, df_r = n_b - 1, (n_b - 1) * (n - 1)
    return n * float(((bm - 1.0) ** 2).sum()) / df_b, float((res**2).sum()) / df_r, df_b, df_r


def estimate_from_units(per_boot: list[BootUnits], min_boots: int = 3) -> BootEstimate | None:
    """sigma_b from each boot's units (`boot_units`); None with fewer than `min_boots` boots (2 is the card's own
    A against A2: one degree of freedom, enough for a lower bound to rule a registered figure out)."""
    import numpy as np
    from scipy.stats import chi2

    if len(per_boot) < max(2, min_boots):
        return None
    names = set(per_boot[0]).intersection(*[set(p) for p in per_boot[1:]])
    s2s: list[float] = []
    uppers: list[float] = []
    lowers: list[float] = []
    withins: list[float] = []
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
        n = y.shape[1]
        ms_b, ms_r, df_b, df_r = boot_mean_squares(y)
        s2s.append((ms_b - ms_r) / n)
        # E[MS_boot] = sigma_e^2 + n sigma_b^2 and MS_boot ~ E chi2(df_b) / df_b; sigma_e^2 is pinned by df_r
        uppers.append((ms_b * df_b / float(chi2.ppf(0.05, df_b)) - ms_r) / n)
        lowers.append((ms_b * df_b / float(chi2.ppf(0.95, df_b)) - ms_r) / n)
        withins.append(ms_r)
        var_terms.append(2 * (ms_b / n) ** 2 / df_b + 2 * (ms_r / n) ** 2 / df_r)
        fs.append(ms_b / ms_r if ms_r > 0 else math.inf)
        units = n if units == 0 else min(units, n)
    if not s2s:
        return None
    s2 = sum(s2s) / len(s2s)
    var = sum(var_terms) / len(s2s) ** 2
    df = 2 * s2 * s2 / var if s2 > 0 and var > 0 else None
    return BootEstimate(
        sd=math.sqrt(max(0.0, s2)),
        signed=math.copysign(math.sqrt(abs(s2)), s2),
        df=df,
        f_ratio=sum(fs) / len(fs),
        boots=len(per_boot),
        units=units,
        upper=math.sqrt(max(0.0, sum(uppers) / len(uppers))),
        lower=math.sqrt(max(0.0, sum(lowers) / len(lowers))),
        within=sum(withins) / len(withins),
    )


def registered_upper(boot_sd: float, boot_df: int | None) -> float:
    """The registered figure's one-sided 95% upper bound: boot_sd itself when it is taken as known (no boot_df),
    else sqrt(df s^2 / chi2_0.05(df))."""
    from scipy.stats import chi2

    if boot_df is None or boot_sd <= 0:
        return boot_sd
    return boot_sd * math.sqrt(boot_df / float(chi2.ppf(0.05, boot_df)))


def exceeds_registered(est: BootEstimate, boot_sd: float) -> bool:
    """Whether a measurement rules the registered boot sd out from above: its one-sided 95% lower bound (a
    chi-square test of sigma_b <= boot_sd on the boots' mean square, 5% level) lies above the registered figure."""
    return est.lower > boot_sd and est.lower > 0


def registered_check(
    gate_id: str, est: BootEstimate, boot_sd: float, boot_df: int | None, where: str, critical: float | None
) -> str:
    """One line when a measurement of the boot sd contradicts the gate's registered figure (above it, beyond
    doubt at 5%) or is too small to see the boot sd that matters (`critical_boot_sd`); empty otherwise."""
    up = registered_upper(boot_sd, boot_df)
    df = "known" if boot_df is None else f"df {boot_df}, 95% upper bound {up:.3%}"
    if boot_sd > 0 and exceeds_registered(est, boot_sd):
        return (
            f"gate {gate_id}: {where} measured a boot sd of {est.sd:.3%} (95% lower bound {est.lower:.3%}, "
            f"upper {est.upper:.3%}, {est.boots} boots) above the registered {boot_sd:.3%} ({df}): the test "
            f"leaves out between-boot variance the lane shows; register boot_sd {est.sd:.4f}"
            + (f", boot_df {max(1, int(est.df))}" if est.df is not None else "")
        )
    if critical is not None and est.lower <= 0 and est.upper > critical:  # no boot effect seen, none ruled out
        need = boots_to_see(critical, est.units, est.within)
        size = (
            f"{need} boots would see it with 90% power" if need is not None else "no study of this shape would see it"
        )
        return (
            f"gate {gate_id}: {where} ({est.boots} boots, upper bound {est.upper:.3%}) is too small to see a "
            f"boot sd of {critical:.3%}, the one that alone would hold the gate below its power at the "
            f"registered effect; {size}"
        )
    return ""


def critical_boot_sd(
    effect: float, margin: float, test: str, alpha: float, factor: float, boots_per_arm: int, target: float
) -> float | None:
    """The boot sd at which the boots' share alone takes the gate's power at its registered effect down to
    `target` (however many requests): the shift a boot study must be able to see. None without an effect."""
    from scipy.stats import norm

    gap = effect - margin if test == "superiority" else effect + margin if test == "non_inferiority" else margin
    if gap <= 0:
        return None
    return gap / (float(norm.isf(alpha)) + float(norm.ppf(target))) / math.sqrt(factor / boots_per_arm)


def study_power(sd: float, boots: int, units: int, within: float) -> float:
    """Power of the study's F test (5% level) to see a boot sd of `sd` with `boots` boots of `units` transcripts,
    a unit's within-boot relative variance `within`."""
    from scipy.stats import f as f_dist

    if boots < 2 or units < 2 or within <= 0:
        return 0.0
    df_b, df_r = boots - 1, (boots - 1) * (units - 1)
    crit = float(f_dist.ppf(0.95, df_b, df_r))
    return float(f_dist.sf(crit / (1.0 + units * sd * sd / within), df_b, df_r))


def boots_to_see(sd: float, units: int, within: float, power: float = 0.9, limit: int = 5000) -> int | None:
    """The fewest boots whose study sees a boot sd of `sd` with `power` (None past `limit`)."""
    if study_power(sd, limit, units, within) < power:
        return None
    lo, hi = 2, limit
    while lo < hi:
        mid = (lo + hi) // 2
        if study_power(sd, mid, units, within) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


__all__ = [
    "BOOT_SEED_VAR",
    "BootEstimate",
    "BootUnits",
    "boot_units",
    "boots_to_see",
    "critical_boot_sd",
    "estimate_boot_sd",
    "estimate_from_units",
    "exceeds_registered",
    "refuse_pinned_boot_seed",
    "registered_check",
    "registered_upper",
    "study_power",
]
