"""The statistics a card decides with: paired ratio tests, their intervals, and rates with intervals.

A statistical gate compares paired units (a transcript of a class x
concurrency cell, its rounds averaged): b_i from the candidate and c_i, the
mean of the controls for the same transcript. The effect is relative,
r = mean(b) / mean(c) - 1, and a margin m is tested exactly with the paired
t-test on e_i = b_i - (1 + m) c_i (mean(b) > (1 + m) mean(c) is r > m). The
interval printed beside it is Fieller's, the set of margins that test does
not reject, so the interval and the decision always agree. `method: bca`
uses scipy's BCa bootstrap interval instead and decides from it.

Boots. Each arm is one boot (one per stage), and a boot has its own
numerics, so an arm's mean can sit off the lane's by a shift its own
requests cannot show: the paired units' spread does not contain it. A gate
that registers `boot_sd` (sigma_b, the relative SD of a boot's mean beyond
its requests' noise, measured by `card plan --boots`) has it added to the
variance of each arm's mean: Var(mean b) += sigma_b^2 mean(b)^2 / S and
Var(mean c) += sigma_b^2 mean(c)^2 / (S k), with k reference arms and S
boots (stages) per arm. Under A/A the test's variance is then
V_n + (1 + 1/k) sigma_b^2 / S (1.5 sigma_b^2 for B against two controls'
mean, 2 sigma_b^2 for A against A2). The test stays a t-test: Fieller's
interval on the enlarged variances, with Welch-Satterthwaite degrees of
freedom from the units' n - 1 and the registered `boot_df` of sigma_b
(none: sigma_b taken as known).

Legacy helpers for the write-up's point-ratio gates (`spread`,
`paired_bootstrap`) stay here for the cards that use them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gb300lane.cards.decide.results import Status
from gb300lane.cards.schema import IntervalMethod, TestKind

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261026
CONFIDENCE = 0.95


def bootstrap_seed(*parts: object) -> int:
    """A resampling's own seed: BOOTSTRAP_SEED plus a stable hash of what it resamples (gate, cell, look ...)."""
    return BOOTSTRAP_SEED + int(hashlib.sha256(repr(parts).encode()).hexdigest()[:6], 16)


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


def paired_units(
    candidate: Mapping[str, float], references: Sequence[Mapping[str, float]]
) -> tuple[np.ndarray, np.ndarray]:
    """(b, c): the candidate's value and the references' mean for every unit present in all of them."""
    if not references:
        return np.empty(0), np.empty(0)
    common = sorted(set(candidate).intersection(*[set(r) for r in references]))
    b = np.array([candidate[u] for u in common], dtype=np.float64)
    c = np.array([[r[u] for u in common] for r in references], dtype=np.float64).mean(axis=0) if common else np.empty(0)
    return b, c


def paired_bootstrap(
    candidate: dict[str, float],
    controls: list[dict[str, float]],
    *,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> PairedCI | None:
    """Percentile bootstrap of mean(candidate[t] - mean_c controls[c][t]); a description, never a decision."""
    b, ctrl = paired_units(candidate, controls)
    if len(b) < 2:
        return None
    base = float(ctrl.mean())
    if base <= 0:
        return None
    diffs = b - ctrl
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diffs), size=(resamples, len(diffs)))
    means = diffs[idx].mean(axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return PairedCI(
        n=len(b), mean_rel=float(diffs.mean()) / base, low_rel=float(low) / base, high_rel=float(high) / base
    )


# ---------------------------------------------------------------- paired ratio tests


@dataclass(frozen=True)
class RatioTest:
    """The outcome of one paired ratio test (relative effects throughout)."""

    n: int
    estimate: float | None
    low: float | None
    high: float | None
    statistic: float | None
    df: int | None
    p_value: float | None
    baseline: float | None
    decision: Status
    reason: str


@dataclass(frozen=True)
class BootVariance:
    """The between-boot component a gate registered: sigma_b (relative), its degrees of freedom, the arms' boots.

    `refs` is the number of reference arms whose mean is compared (2 for B
    against mean(A, A2), 1 for A against A2); `boots` the boots (stages)
    each arm's data spans.
    """

    sd: float = 0.0
    df: int | None = None
    refs: int = 2
    boots: int = 1

    def extra(self, mb: float, mc: float) -> tuple[float, float]:
        """Added variance of mean(b) and of mean(c) (absolute units)."""
        v = self.sd * self.sd / max(1, self.boots)
        return v * mb * mb, v * mc * mc / max(1, self.refs)

    def describe(self) -> str:
        known = "taken as known" if self.df is None else f"df {self.df}"
        return f"boot sd {self.sd:.2%} ({known}), {self.boots} boot(s) per arm"


NO_BOOT = BootVariance()


def undecided(n: int, baseline: float | None, reason: str) -> RatioTest:
    """A test that could not be run on these units: INCONCLUSIVE, with why and nothing estimated."""
    return RatioTest(
        n=n,
        estimate=None,
        low=None,
        high=None,
        statistic=None,
        df=None,
        p_value=None,
        baseline=baseline,
        decision="INCONCLUSIVE",
        reason=reason,
    )


def _moments(
    b: np.ndarray, c: np.ndarray, boot: BootVariance
) -> tuple[float, float, float, float, float, float, float]:
    """(mean b, mean c, Var mean b, Cov, Var mean c, and the units' parts of the two variances)."""
    n = len(b)
    mb, mc = float(b.mean()), float(c.mean())
    cov = np.cov(np.vstack([b, c]), ddof=1)
    sbb, sbc, scc = float(cov[0, 0]) / n, float(cov[0, 1]) / n, float(cov[1, 1]) / n
    eb, ec = boot.extra(mb, mc)
    return mb, mc, sbb + eb, sbc, scc + ec, sbb, scc


def satterthwaite(b: np.ndarray, c: np.ndarray, ratio: float, boot: BootVariance) -> int:
    """Welch-Satterthwaite degrees of freedom of mean(b) - ratio mean(c): the units' part on n - 1, the
    boots' part on the registered df of sigma_b (infinite when it is taken as known); rounded down."""
    n = len(b)
    if boot.sd <= 0:
        return n - 1
    mb, mc, _, sbc, _, sbb, scc = _moments(b, c, boot)
    eb, ec = boot.extra(mb, mc)
    v_units = max(0.0, sbb - 2 * ratio * sbc + ratio * ratio * scc)
    v_boot = eb + ratio * ratio * ec
    den = v_units * v_units / (n - 1) + (0.0 if boot.df is None else v_boot * v_boot / boot.df)
    if den <= 0:
        return n - 1
    return max(1, int(math.floor((v_units + v_boot) ** 2 / den)))


def _t_at(b: np.ndarray, c: np.ndarray, margin: float, boot: BootVariance = NO_BOOT) -> float:
    """The paired t statistic of e = b - (1 + margin) c against 0 (+-inf when e has no spread), its variance
    enlarged by the registered boot component."""
    x = 1.0 + margin
    e = b - x * c
    mean = float(e.mean())
    sd = float(e.std(ddof=1))
    scale = max(1.0, float(np.abs(c).mean()))
    var = sd * sd / len(e)
    if boot.sd > 0:
        eb, ec = boot.extra(float(b.mean()), float(c.mean()))
        var += eb + x * x * ec
    if math.sqrt(var) <= 1e-12 * max(scale, abs(mean)):
        if abs(mean) <= 1e-12 * scale:
            return math.nan  # an exact tie: no evidence either way
        return math.copysign(math.inf, mean)
    return mean / math.sqrt(var)


def fieller(
    b: np.ndarray, c: np.ndarray, tcrit: float, boot: BootVariance = NO_BOOT
) -> tuple[float | None, float | None]:
    """Fieller's interval for mean(b)/mean(c) - 1: the margins the paired t-test at `tcrit` does not reject."""
    mb, mc, sbb, sbc, scc, _, _ = _moments(b, c, boot)
    t2 = tcrit * tcrit
    qa = mc * mc - t2 * scc
    qb = -2.0 * (mb * mc - t2 * sbc)
    qc = mb * mb - t2 * sbb
    if qa <= 0:
        return None, None  # the denominator is not clearly away from zero: no bounded interval
    disc = qb * qb - 4 * qa * qc
    if disc < 0:
        return None, None
    root = math.sqrt(disc)
    lo, hi = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    return lo - 1.0, hi - 1.0


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.2%}"


def _interval_text(low: float | None, high: float | None, level: float) -> str:
    return f"{level:.1%} interval [{_pct(low)}, {_pct(high)}]"


def _bca(b: np.ndarray, c: np.ndarray, level: float, seed: int) -> tuple[float | None, float | None]:
    from scipy import stats as sps

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.mean(x, axis=axis) / np.mean(y, axis=axis) - 1.0)

    if float(np.ptp(b - c)) == 0.0 and float(np.ptp(b)) == 0.0:
        return None, None  # no spread: the bootstrap distribution is a point
    with np.errstate(all="ignore"):
        res = sps.bootstrap(
            (b, c),
            ratio,
            paired=True,
            vectorized=True,
            method="BCa",
            confidence_level=level,
            n_resamples=BOOTSTRAP_RESAMPLES,
            random_state=np.random.default_rng(seed),
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (lo if math.isfinite(lo) else None), (hi if math.isfinite(hi) else None)


def ratio_test(
    b: np.ndarray,
    c: np.ndarray,
    *,
    test: TestKind,
    margin: float,
    level_one_sided: float,
    method: IntervalMethod = "t",
    seed: int = BOOTSTRAP_SEED,
    who: str = "B",
    boot: BootVariance = NO_BOOT,
) -> RatioTest:
    """Test mean(b)/mean(c) - 1 against `margin` at one-sided level `level_one_sided`.

    superiority: PASS when r > margin is shown, FAIL when r < margin is shown.
    non_inferiority: PASS when r > -margin is shown, FAIL when r < -margin is shown.
    equivalence (TOST): PASS when -margin < r < margin is shown (both one-sided
    tests reject), FAIL when the interval lies wholly outside the band.
    Anything else is INCONCLUSIVE: a tie never passes superiority.
    With `boot` (a registered sigma_b > 0) the variance carries the boots' shift (module docstring); the
    BCa interval resamples units only, so a bca gate with a boot component is refused at registration.
    """
    from scipy import stats as sps

    n = len(b)
    if n < 2:
        return RatioTest(
            n=n,
            estimate=None,
            low=None,
            high=None,
            statistic=None,
            df=None,
            p_value=None,
            baseline=float(c.mean()) if n else None,
            decision="INCONCLUSIVE",
            reason=f"{n} paired unit(s): a test needs at least 2",
        )
    base = float(c.mean())
    if base <= 0:
        return undecided(n, base, "the reference mean is not positive")
    est = float(b.mean()) / base - 1.0
    df = satterthwaite(b, c, 1.0 + est, boot)
    level = 1.0 - 2.0 * level_one_sided
    tcrit = float(sps.t.ppf(1.0 - level_one_sided, df))
    if method == "bca":
        low, high = _bca(b, c, level, seed)
    else:
        low, high = fieller(b, c, tcrit, boot)
    iv = _interval_text(low, high, level) + ("" if boot.sd <= 0 else f" with {boot.describe()}")
    bound = margin if test == "superiority" else -margin

    if test == "equivalence":
        t_lo, t_hi = _t_at(b, c, -margin, boot), _t_at(b, c, margin, boot)
        p = (
            max(float(sps.t.sf(t_lo, df)), float(sps.t.cdf(t_hi, df)))
            if not (math.isnan(t_lo) or math.isnan(t_hi))
            else None
        )
        stat = min(t_lo, -t_hi) if not (math.isnan(t_lo) or math.isnan(t_hi)) else None
        if method == "bca":
            inside = low is not None and high is not None and -margin < low and high < margin
            outside = (low is not None and low >= margin) or (high is not None and high <= -margin)
        else:
            inside = stat is not None and stat > tcrit
            outside = (low is not None and low >= margin) or (high is not None and high <= -margin)
        band = f"+-{margin:.2%}"
        if inside:
            return RatioTest(
                n,
                est,
                low,
                high,
                stat,
                df,
                p,
                base,
                "PASS",
                f"equivalent: {iv} lies inside {band} (TOST, each side at {level_one_sided:.2%})",
            )
        if outside:
            return RatioTest(n, est, low, high, stat, df, p, base, "FAIL", f"not equivalent: {iv} lies outside {band}")
        return RatioTest(
            n, est, low, high, stat, df, p, base, "INCONCLUSIVE", f"equivalence not shown: {iv} is not inside {band}"
        )

    stat = _t_at(b, c, bound, boot)
    if math.isnan(stat):
        return RatioTest(
            n,
            est,
            low,
            high,
            None,
            df,
            None,
            base,
            "INCONCLUSIVE",
            f"an exact tie at the margin {_pct(bound)}: no evidence either way",
        )
    p = float(sps.t.sf(stat, df))
    claim = (
        f"{who} better than the controls by more than {_pct(bound)}"
        if test == "superiority"
        else f"{who} no worse than {_pct(bound)}"
    )
    if method == "bca":
        passed = low is not None and low > bound
        failed = high is not None and high < bound
    else:
        passed, failed = stat > tcrit, stat < -tcrit
    if passed:
        return RatioTest(
            n,
            est,
            low,
            high,
            stat,
            df,
            p,
            base,
            "PASS",
            f"shown: {claim} ({iv}; t = {stat:.2f} > {tcrit:.2f}, df {df})",
        )
    if failed:
        return RatioTest(
            n,
            est,
            low,
            high,
            stat,
            df,
            p,
            base,
            "FAIL",
            f"refuted: {who} below {_pct(bound)} ({iv}; t = {stat:.2f} < -{tcrit:.2f}, df {df})",
        )
    return RatioTest(
        n,
        est,
        low,
        high,
        stat,
        df,
        p,
        base,
        "INCONCLUSIVE",
        f"not shown either way: {iv} contains the margin {_pct(bound)} "
        f"(t = {stat:.2f}, needs > {tcrit:.2f} to pass, < -{tcrit:.2f} to fail)",
    )


def arms_as_units(candidate: float, controls: Sequence[float]) -> tuple[float, int, float]:
    """(t, df, one-sided p) of one candidate arm against k control arms, each arm one observation.

    The controls' spread is the only noise estimate (k - 1 degrees of
    freedom); t = (B - mean(controls)) / (s sqrt(1 + 1/k)), the test of
    whether B comes from the controls' distribution. With two controls this
    is a t on one degree of freedom: what a single bracket supports.
    """
    from scipy import stats as sps

    c = np.asarray(controls, dtype=np.float64)
    k = len(c)
    s = float(c.std(ddof=1))
    t = (
        (candidate - float(c.mean())) / (s * math.sqrt(1.0 + 1.0 / k))
        if s > 0
        else math.copysign(math.inf, candidate - float(c.mean()))
    )
    return t, k - 1, float(sps.t.sf(t, k - 1))


# ---------------------------------------------------------------- rates


@dataclass(frozen=True)
class Rate:
    """An observed proportion with its two-sided interval."""

    events: int
    trials: int
    rate: float
    low: float
    high: float
    method: str

    def describe(self) -> str:
        return f"{self.rate:.1%} [{self.low:.1%}, {self.high:.1%}] ({self.events}/{self.trials})"


def proportion(events: int, trials: int, *, confidence: float = CONFIDENCE, method: str = "exact") -> Rate:
    """events / trials with a Clopper-Pearson (`exact`) or Wilson (`wilson`) interval."""
    from scipy.stats import binomtest

    if trials <= 0:
        return Rate(events=0, trials=0, rate=math.nan, low=0.0, high=1.0, method=method)
    ci = binomtest(events, trials).proportion_ci(confidence_level=confidence, method=method)
    name = "Clopper-Pearson" if method == "exact" else "Wilson"
    return Rate(events=events, trials=trials, rate=events / trials, low=float(ci.low), high=float(ci.high), method=name)
