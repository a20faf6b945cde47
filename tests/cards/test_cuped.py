"""`adjust: cuped`: the adjusted paired test against direct computations, its saving and its A/A error rate."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from gb300lane.cards import load_card, register, run_card, score
from gb300lane.cards.decide.cuped import adjusted_log_ratio, controls_noise, cuped_test
from gb300lane.cards.decide.results import GateTest
from gb300lane.cards.decide.stats import BootVariance, proportion
from gb300lane.cards.schema import gates_hash, parse_card
from gb300lane.errors import CardError

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"


def _bracket(
    rng: np.random.Generator,
    level: np.ndarray,
    *,
    theta: float = 1.0,
    effect: float = 0.0,
    noise: float = 0.05,
    k: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """B and k controls over fixed transcript levels (logs): B = effect + theta * level + noise."""
    b = np.exp(effect + theta * level + noise * rng.standard_normal(len(level)))
    c = np.exp(level[None, :] + noise * rng.standard_normal((k, len(level))))
    return b, c


def test_without_the_noise_correction_it_is_ols_of_log_b_on_log_c() -> None:
    rng = np.random.default_rng(1)
    level = 0.3 * rng.standard_normal(40)
    b, c = _bracket(rng, level, theta=1.2, effect=0.02)
    got = adjusted_log_ratio(b, c, correct_noise=False)
    y, x = np.log(b), np.log(c).mean(axis=0)
    design = np.column_stack([np.ones_like(x), x - x.mean()])
    coef, ssr, _, _ = np.linalg.lstsq(design, y, rcond=None)
    n = len(y)
    assert got.theta == pytest.approx(coef[1], rel=1e-10)
    # the intercept at the covariate's mean is mean(y); the estimate of the log ratio is it minus mean(x)
    assert got.estimate_log == pytest.approx(coef[0] - x.mean(), rel=1e-10)
    assert got.var_units == pytest.approx(float(ssr[0]) / (n - 2) / n, rel=1e-10)
    assert got.df == n - 2 and got.adjusted


def test_the_noise_correction_matches_a_direct_errors_in_variables_computation() -> None:
    rng = np.random.default_rng(2)
    level = 0.3 * rng.standard_normal(128)
    b, c = _bracket(rng, level, theta=1.3, noise=0.1)
    got = adjusted_log_ratio(b, c)
    logs = np.log(c)
    # residual mean square of the transcripts x controls two-way table, by the textbook sums of squares
    k, n = logs.shape
    ss_total = ((logs - logs.mean()) ** 2).sum()
    ss_rows = n * ((logs.mean(axis=1) - logs.mean()) ** 2).sum()
    ss_cols = k * ((logs.mean(axis=0) - logs.mean()) ** 2).sum()
    ms_e = (ss_total - ss_rows - ss_cols) / ((k - 1) * (n - 1))
    assert controls_noise(logs) == pytest.approx(ms_e, rel=1e-10)
    x = np.log(c).mean(axis=0)
    d = np.log(b) - x
    v_c = ms_e / k
    s_tt = np.var(x, ddof=1) - v_c
    s_dt = np.cov(d, x, ddof=1)[0, 1] + v_c
    resid = np.var(d, ddof=1) * (n - 1) - (n - 1) * s_dt**2 / s_tt
    assert got.theta == pytest.approx(1 + s_dt / s_tt, rel=1e-9)
    assert got.reliability == pytest.approx(s_tt / np.var(x, ddof=1), rel=1e-9)
    assert got.var_units == pytest.approx(resid / (n - 2) / n, rel=1e-9)
    assert got.theta == pytest.approx(1.3, abs=0.1)  # the corrected slope is not attenuated by the controls' noise


def test_theta_forced_to_one_is_the_paired_t_on_log_ratios() -> None:
    rng = np.random.default_rng(3)
    level = 0.3 * rng.standard_normal(30)
    b, c = _bracket(rng, level, effect=0.03)
    got = adjusted_log_ratio(b, c, theta=1.0)
    ratio = np.log(b) - np.log(c).mean(axis=0)
    ref = sps.ttest_1samp(ratio, 0.0)
    assert got.df == len(b) - 1
    assert got.estimate_log / got.se == pytest.approx(float(ref.statistic), rel=1e-10)
    rt, _ = cuped_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025, theta=1.0)
    assert rt.statistic == pytest.approx(float(ref.statistic), rel=1e-10)
    assert rt.p_value == pytest.approx(float(ref.pvalue) / 2, rel=1e-8)  # one-sided, the estimate is positive
    assert rt.estimate == pytest.approx(math.expm1(ratio.mean()))


def test_the_boot_variance_is_added_on_top_and_the_df_are_satterthwaites() -> None:
    rng = np.random.default_rng(4)
    level = 0.3 * rng.standard_normal(30)
    b, c = _bracket(rng, level)
    plain = adjusted_log_ratio(b, c)
    boot = BootVariance(sd=0.01, df=4, refs=2, boots=1)
    got = adjusted_log_ratio(b, c, boot=boot)
    assert got.var_units == pytest.approx(plain.var_units)
    assert got.var_boot == pytest.approx(0.01**2 * 1.5)
    v_u, v_b = got.var_units, got.var_boot
    assert got.df == math.floor((v_u + v_b) ** 2 / (v_u**2 / (len(b) - 2) + v_b**2 / 4))


def test_when_b_gains_with_the_level_the_adjustment_removes_it_and_its_se_holds() -> None:
    """Fixed transcripts, fresh noise per replicate: B's gain grows with the level (theta 1.5). The paired
    spread keeps (theta - 1)^2 Var(level); the adjusted one is the requests' noise, which is what the
    estimate's spread over replicates shows."""
    rng = np.random.default_rng(5)
    level = 0.3 * rng.standard_normal(128)
    est, v_paired, v_cuped = [], [], []
    for _ in range(400):
        b, c = _bracket(rng, level, theta=1.5, effect=0.02, noise=0.05)
        p, a = adjusted_log_ratio(b, c, theta=1.0), adjusted_log_ratio(b, c)
        est.append(a.estimate_log)
        v_paired.append(p.var_units)
        v_cuped.append(a.var_units)
    realized = float(np.var(est, ddof=1))
    assert np.mean(v_cuped) / np.mean(v_paired) < 0.3
    assert np.mean(v_cuped) == pytest.approx(realized, rel=0.25)
    assert np.mean(v_paired) > 3 * realized


@pytest.mark.slow
@pytest.mark.parametrize(("spread", "noise"), [(0.3, 0.05), (0.1, 0.3)])
def test_a_over_a_false_pass_holds_alpha_even_where_plain_ols_inflates_it(spread: float, noise: float) -> None:
    """A/A (B is a third control): the adjusted superiority test's false PASS rate at one-sided 2.5% holds
    nominal; with request noise larger than the transcripts' spread, plain OLS of log b on log c (no
    correction) explains the controls' noise away and passes too often."""
    rng = np.random.default_rng(6)
    reps, n = 4000, 24
    level = spread * rng.standard_normal(n)
    cuped = ols = 0
    tcrit_ols = float(sps.t.ppf(0.975, n - 2))
    for _ in range(reps):
        b, c = _bracket(rng, level, noise=noise)
        rt, _ = cuped_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025)
        cuped += rt.decision == "PASS"
        o = adjusted_log_ratio(b, c, correct_noise=False)
        ols += o.estimate_log / o.se > tcrit_ols
    rate = proportion(cuped, reps)
    assert rate.low <= 0.025 and rate.rate < 0.035, rate.describe()
    if noise > spread:
        assert proportion(ols, reps).low > 0.025


# ---------------------------------------------------------------- the card key


def _text(extra: str = "", *, gate: str = "tokens-per-step") -> str:
    text = (DATA / "tested.yaml").read_text()
    return text.replace(f"  - id: {gate}\n", f"  - id: {gate}\n{extra}", 1)


def test_adjust_defaults_to_none_and_leaves_the_gates_hash_alone() -> None:
    plain = parse_card(_text(), "tested.yaml")
    explicit = parse_card(_text("    adjust: none\n"), "tested.yaml")
    cuped = parse_card(_text("    adjust: cuped\n"), "tested.yaml")
    assert gates_hash(plain) == gates_hash(explicit) != gates_hash(cuped)


@pytest.mark.parametrize(
    ("extra", "gate", "words"),
    [
        ("    adjust: cuped\n    interval: bca\n", "tokens-per-step", "interval: t"),
        ("    adjust: cuped\n", "controls-agree", "drop adjust"),
    ],
)
def test_adjust_cuped_is_refused_where_it_does_not_apply(extra: str, gate: str, words: str) -> None:
    with pytest.raises(CardError, match=words):
        parse_card(_text(extra, gate=gate), "tested.yaml")


def test_adjust_cuped_is_refused_with_shared_seeds() -> None:
    with pytest.raises(CardError, match="seeds: per_arm"):
        parse_card(_text("    adjust: cuped\n") + "seeds: shared\n", "tested.yaml")


def test_a_cuped_gate_reports_its_adjustment_and_theta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    path = tmp_path / "tested.yaml"
    path.write_text(_text("    adjust: cuped\n"))
    card, p = load_card(path)
    rec = register(card, p.read_text())
    run_card(rec, ops=fakes.FakeLane(card, {"B": 1.03}, tps={"B": 1.03}, noise=0.03, n_transcripts=64).ops())
    v = score(rec)
    gate = next(r for r in v.results if r.id == "tokens-per-step")
    t = gate.tests[0]
    assert t.adjustment is not None and t.adjustment.startswith("cuped") and t.theta is not None
    assert "cuped" in gate.noise_floor and "theta" in gate.noise_floor and "cuped" in t.reason
    assert t.df == t.n - 2
    plain = next(r for r in v.results if r.id == "decode-no-loss").tests[0]
    assert plain.adjustment is None and "adjustment" not in plain.model_dump(mode="json")
    assert GateTest.model_validate(t.model_dump(mode="json")) == t


def test_a_poorly_measured_level_leaves_the_test_unadjusted_and_says_so() -> None:
    rng = np.random.default_rng(7)
    level = 0.02 * rng.standard_normal(30)
    b, c = _bracket(rng, level, noise=0.2)
    got = adjusted_log_ratio(b, c)
    assert not got.adjusted and got.theta == 1.0 and got.df == len(b) - 1
    assert got.var_units == pytest.approx(adjusted_log_ratio(b, c, theta=1.0).var_units)
    rt, _ = cuped_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025)
    assert "not adjusted" in rt.reason and "reliability" in rt.reason
