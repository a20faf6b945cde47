"""The covariate-adjusted (CUPED-style) paired test a tested gate registers with `adjust: cuped`.

Units and logs. A unit is one transcript (as in `cards.decide.evidence`):
y_i = log b_i (B's value), x_i the mean of the k controls' logs for the
same transcript, and d_i = y_i - x_i, the transcript's log ratio. The
estimate is the log of the geometric-mean ratio, dbar = mean(d); the
relative effect reported is exp(dbar) - 1. (The controls enter as the mean
of their logs, not the log of their mean: the log of a mean of noisy values
sits above the mean of their logs by about a quarter of their noise
variance, which would bias d against B under A/A, while the mean of logs
carries each transcript's level with the same expectation as B's log.)

What the pairing already is. The unadjusted paired t on log ratios is CUPED
with theta = 1 fixed: y_i - 1 * x_i. It removes every part of the
transcripts' spread that moves B and the controls alike. What it leaves in
d_i is the arms' request noise and B's effect varying with the transcript:
with a transcript's level T_i (what the controls measure on it, without
their noise), y_i = beta + theta T_i + e_Bi and x_i = T_i + e_Ci, so
d_i = beta + (theta - 1) T_i + e_Bi - e_Ci. When theta != 1 (B gains more
on some transcripts than on others, in step with their level) the pairing
leaves (theta - 1)^2 Var(T) in the spread of d.

The adjustment. Regress d on the transcripts' level and take the residual
spread as the noise: se^2 = SSR / ((n - 2) n), a t on n - 2 degrees of
freedom (the slope costs one). The point estimate does not move: the
covariate is centred at its mean over the same units, so the adjustment
theta * (x - xbar) sums to zero and the estimate is dbar, as unadjusted.
Only the standard error changes, and it is the standard error of dbar over
repeated requests of the card's transcripts: the adjusted test's claim is
about the transcripts the card ran (a fixed, named set: every arm, and
every replicate of a calibration, runs the same ones). B's effect varying
with the level is then part of what is estimated, not noise. A claim about
transcripts the card did not run is the unadjusted test's, whose spread
keeps that variation.

The controls measure the level with their own noise, and that noise is in
d too (with the opposite sign), so plain OLS of y on x (CUPED's textbook
theta = Cov(y, x) / Var(x)) would explain part of the controls' noise
away and understate the standard error: under A/A (theta = 1, no effect)
its residual variance is V_B + V_C - V_C^2 / (Var(T) + V_C) instead of
V_B + V_C. The noise is measured on the card itself instead: the k
controls are k measurements of each transcript, so the residual mean
square of the transcripts x controls table of their logs (each control
centred on its own mean, which removes a control's boot shift and the
hour's drift), MS_e, has E[MS_e] = sigma_e^2, and the controls' mean
carries V_C = MS_e / k. With S_xx, S_dx, S_dd the centred sums of squares
and products over the n units and N = (n - 1) V_C the noise's share of
them:

    S_TT = S_xx - N          (the level's spread, the controls' noise removed)
    S_dT = S_dx + N          (d's covariance with the level: d holds -e_C)
    phi  = S_dT / S_TT,  theta = 1 + phi   (B's slope on the level)
    SSR  = S_dd - S_dT^2 / S_TT

(the errors-in-variables, reliability-corrected regression; reliability
S_TT / S_xx is reported). Under A/A, S_dT is zero in expectation and the
adjustment removes one degree of freedom's worth of spread, as OLS with
an exact covariate would. The correction is itself estimated (MS_e on
(k - 1)(n - 1) df), which the n - 2 df do not count; where the level is
poorly measured that estimate dominates phi and the test runs above its
alpha (with request noise three times the transcripts' spread, reliability
about 0.2, 2.8% against 2.5% over 4,000 A/A replicates), and there is
little to remove anyway. So below a reliability of MIN_RELIABILITY (0.5),
or when SSR <= 0, the test stays unadjusted (theta = 1, n - 1 df) and says
so. Nor is n - 2 enough at small n: with B's gain moving with the level
(theta 1.3, request sd a third of the level's) the adjusted test falsely
passed 3.26% at 2.5% and 0.82% at 0.25% over 8 and 16 transcripts, and
over 64 still 0.35% [0.27%, 0.44%] at 0.25% (20,000 replicates over eight
transcript sets); over 128 it holds both levels (2.65% [2.31%, 3.03%] of
8,000, 0.24% [0.18%, 0.32%] of 20,000). Below MIN_UNITS (128) transcripts
the test therefore stays unadjusted, whose spread keeps B's varying gain and
holds its level. With theta forced (`theta=`)
nothing is estimated: SSR is the spread of d - phi (x - xbar) on n - 1 df;
theta = 1 is the unadjusted paired t on log ratios.

Boots. The boot shift moves every transcript of an arm alike: no
per-transcript covariate removes it, and on logs it adds the registered
sigma_b^2 (1 + 1/k) / S to se^2 (B's boot and the controls' k boots, S
boots per arm), with Welch-Satterthwaite degrees of freedom from the units'
n - 2 and the registered boot_df (none: sigma_b taken as known), as in
`cards.decide.stats`.

Equal power. The boot part is the same with and without the adjustment, so
at equal power the requests per arm scale with the units' part of se^2:
the saving is 1 - (SSR / (n - 2)) / Var(d) (`benchmarks/cuped.py` measures
it on the embedded engine, with the adjusted test's A/A false-alarm rates).
On local-br1 (200 replicates, 800 requests per arm) theta is 0.999 +- 0.038
on tokens/step and the ratio 0.998: B's gain there does not move with the
level, so the pairing has already taken what a covariate of the level could.

The other per-transcript covariate, a pilot or an earlier window, measures
the same level on requests of its own: it can only help where the level
predicts d (theta != 1), it costs those requests, and the controls already
measure the level at reliability above 0.9 on the engine. It is not offered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gb300lane.cards.decide.stats import NO_BOOT, BootVariance, RatioTest, undecided

#: The least reliability S_TT / S_xx at which the level is used as a covariate (module docstring).
MIN_RELIABILITY = 0.5

#: The fewest transcripts the level is used as a covariate over (module docstring): below it the n - 2 df leave
#: the correction's own uncertainty out and the test runs above its level (benchmarks/calibration_suite.py).
MIN_UNITS = 128


@dataclass(frozen=True)
class Adjusted:
    """The adjusted log-ratio estimate of one test and the parts of its variance."""

    n: int
    estimate_log: float
    var_units: float
    var_boot: float
    df: int
    theta: float
    reliability: float | None
    adjusted: bool
    note: str

    @property
    def se(self) -> float:
        return float(math.sqrt(self.var_units + self.var_boot))


def controls_noise(controls: np.ndarray) -> float:
    """sigma_e^2 of one control's log value of a transcript: the residual mean square of the transcripts x
    controls table of logs (`controls` is k x n, logs; each control centred on its own mean)."""
    k, n = controls.shape
    if k < 2 or n < 2:
        return 0.0
    res = controls - controls.mean(axis=1, keepdims=True) - controls.mean(axis=0, keepdims=True) + controls.mean()
    return float((res**2).sum() / ((k - 1) * (n - 1)))


def adjusted_log_ratio(
    b: np.ndarray,
    controls: np.ndarray,
    *,
    boot: BootVariance = NO_BOOT,
    theta: float | None = None,
    correct_noise: bool = True,
) -> Adjusted:
    """The CUPED-adjusted estimate of log(B / mean of the controls) over paired units (module docstring).

    `b` holds B's values (n), `controls` each control's (k x n), positive. `theta` forces the slope (1: the
    unadjusted paired t on log ratios); `correct_noise=False` is plain OLS of log b on log c (which understates
    the noise; for comparison only).
    """
    n = len(b)
    y = np.log(b)
    x = np.log(controls).mean(axis=0)
    d = y - x
    dc, xc = d - d.mean(), x - x.mean()
    s_dd, s_xx, s_dx = float(dc @ dc), float(xc @ xc), float(dc @ xc)
    k = controls.shape[0]
    v_boot = boot.sd * boot.sd * (1.0 + 1.0 / max(1, boot.refs)) / max(1, boot.boots) if boot.sd > 0 else 0.0

    def done(ssr: float, dof: int, th: float, rel: float | None, adjusted: bool, note: str) -> Adjusted:
        var_u = ssr / dof / n
        if v_boot > 0:
            den = var_u * var_u / dof + (0.0 if boot.df is None else v_boot * v_boot / boot.df)
            df = max(1, int(math.floor((var_u + v_boot) ** 2 / den))) if den > 0 else dof
        else:
            df = dof
        return Adjusted(
            n=n,
            estimate_log=float(d.mean()),
            var_units=var_u,
            var_boot=v_boot,
            df=df,
            theta=th,
            reliability=rel,
            adjusted=adjusted,
            note=note,
        )

    if theta is not None:
        phi = theta - 1.0
        r = dc - phi * xc
        return done(float(r @ r), n - 1, theta, None, False, f"theta {theta:g} fixed")
    noise = (n - 1) * controls_noise(np.log(controls)) / k if correct_noise else 0.0
    s_tt, s_dt = s_xx - noise, s_dx + noise
    rel = s_tt / s_xx if s_xx > 0 else None
    if n < 3 or rel is None or rel < MIN_RELIABILITY:
        return done(
            s_dd,
            n - 1,
            1.0,
            rel,
            False,
            f"not adjusted: the controls measure the transcripts' level with reliability "
            f"{'n/a' if rel is None else f'{rel:.2f}'}, below {MIN_RELIABILITY}",
        )
    if correct_noise and n < MIN_UNITS:
        return done(
            s_dd,
            n - 1,
            1.0,
            rel,
            False,
            f"not adjusted: {n} transcripts, below the {MIN_UNITS} at which the corrected slope's own "
            "uncertainty is small enough for n - 2 df to hold the level",
        )
    ssr = s_dd - s_dt * s_dt / s_tt
    if ssr <= 0:
        return done(s_dd, n - 1, 1.0, s_tt / s_xx, False, "not adjusted: the level explains all of the spread")
    return done(ssr, n - 2, 1.0 + s_dt / s_tt, rel, True, "adjusted")


def describe(a: Adjusted) -> str:
    """The adjustment in words, for the verdict and the report."""
    if not a.adjusted:
        return f"cuped on the controls' level: {a.note} (theta {a.theta:.3f})"
    rel = "" if a.reliability is None else f", reliability {a.reliability:.3f}"
    return f"cuped on the controls' level: theta {a.theta:.3f}{rel}, {a.n - 2} df for the units"


def cuped_test(
    b: np.ndarray,
    controls: np.ndarray,
    *,
    test: str,
    margin: float,
    level_one_sided: float,
    who: str = "B",
    boot: BootVariance = NO_BOOT,
    theta: float | None = None,
) -> tuple[RatioTest, Adjusted | None]:
    """A superiority or non-inferiority test of exp(mean log ratio) - 1 against `margin`, adjusted (module
    docstring); the RatioTest reads like `stats.ratio_test`'s (relative effects)."""
    from scipy import stats as sps

    n = len(b)
    base = float(controls.mean(axis=0).mean()) if n else None
    if n < 3:
        return undecided(n, base, f"{n} paired unit(s): an adjusted test needs at least 3"), None
    if float(b.min()) <= 0 or float(controls.min()) <= 0:
        return undecided(n, base, "a unit's value is not positive: the adjusted test works on logs"), None
    a = adjusted_log_ratio(b, controls, boot=boot, theta=theta)
    level = 1.0 - 2.0 * level_one_sided
    tcrit = float(sps.t.ppf(1.0 - level_one_sided, a.df))
    se = a.se
    est = math.expm1(a.estimate_log)
    low, high = math.expm1(a.estimate_log - tcrit * se), math.expm1(a.estimate_log + tcrit * se)
    bound = margin if test == "superiority" else -margin
    iv = f"{level:.1%} interval [{low:+.2%}, {high:+.2%}], {describe(a)}" + (
        "" if boot.sd <= 0 else f" with {boot.describe()}"
    )
    if se <= 0:
        stat = (
            math.copysign(math.inf, a.estimate_log - math.log1p(bound))
            if a.estimate_log != math.log1p(bound)
            else math.nan
        )
    else:
        stat = (a.estimate_log - math.log1p(bound)) / se
    if math.isnan(stat):
        return RatioTest(
            n,
            est,
            low,
            high,
            None,
            a.df,
            None,
            base,
            "INCONCLUSIVE",
            f"an exact tie at the margin {bound:+.2%}: no evidence either way",
        ), a
    p = float(sps.t.sf(stat, a.df))
    claim = (
        f"{who} better than the controls by more than {bound:+.2%}"
        if test == "superiority"
        else f"{who} no worse than {bound:+.2%}"
    )
    if stat > tcrit:
        return RatioTest(
            n,
            est,
            low,
            high,
            stat,
            a.df,
            p,
            base,
            "PASS",
            f"shown: {claim} ({iv}; t = {stat:.2f} > {tcrit:.2f}, df {a.df})",
        ), a
    if stat < -tcrit:
        return RatioTest(
            n,
            est,
            low,
            high,
            stat,
            a.df,
            p,
            base,
            "FAIL",
            f"refuted: {who} below {bound:+.2%} ({iv}; t = {stat:.2f} < -{tcrit:.2f}, df {a.df})",
        ), a
    return RatioTest(
        n,
        est,
        low,
        high,
        stat,
        a.df,
        p,
        base,
        "INCONCLUSIVE",
        f"not shown either way: {iv} contains the margin {bound:+.2%} "
        f"(t = {stat:.2f}, needs > {tcrit:.2f} to pass, < -{tcrit:.2f} to fail)",
    ), a
