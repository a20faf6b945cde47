"""The tests a card decides with: paired ratio tests, intervals, TOST, rates and alpha spending."""

from __future__ import annotations

import numpy as np
import pytest

from gb300lane.cards.decide.sequential import boundaries, crossing, nominal_level, power_and_stop, spent
from gb300lane.cards.decide.stats import fieller, proportion, ratio_test


def _pair(rng: np.random.Generator, n: int, effect: float, sd: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    base = 3.0 * (1 + 0.3 * rng.standard_normal(n))  # transcripts differ a lot; pairing removes it
    c = base * (1 + sd * rng.standard_normal(n))
    b = base * (1 + effect) * (1 + sd * rng.standard_normal(n))
    return b, c


def test_superiority_passes_a_real_effect_and_reports_its_interval() -> None:
    b, c = _pair(np.random.default_rng(1), 400, 0.03)
    r = ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025)
    assert r.decision == "PASS" and r.n == 400 and r.df == 399
    assert r.low is not None and r.high is not None and 0 < r.low < r.estimate < r.high
    assert "t = " in r.reason and "shown" in r.reason


def test_a_tie_never_passes_superiority() -> None:
    c = np.array([3.0, 3.2, 2.9, 3.1])
    r = ratio_test(c.copy(), c, test="superiority", margin=0.0, level_one_sided=0.025)
    assert r.decision == "INCONCLUSIVE" and "tie" in r.reason
    assert ratio_test(c.copy(), c, test="non_inferiority", margin=0.0, level_one_sided=0.025).decision == "INCONCLUSIVE"


def test_superiority_fails_when_b_is_shown_worse_and_margins_shift_the_bar() -> None:
    b, c = _pair(np.random.default_rng(3), 400, -0.03)
    assert ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025).decision == "FAIL"
    # the same data are no worse than -5%: non-inferiority passes, and no worse than -1% fails
    assert ratio_test(b, c, test="non_inferiority", margin=0.05, level_one_sided=0.025).decision == "PASS"
    assert ratio_test(b, c, test="non_inferiority", margin=0.01, level_one_sided=0.025).decision == "FAIL"
    # a real +3% does not show "better by more than 5%"
    b, c = _pair(np.random.default_rng(4), 400, 0.03)
    assert ratio_test(b, c, test="superiority", margin=0.05, level_one_sided=0.025).decision == "FAIL"


def test_fieller_interval_is_the_set_of_margins_the_test_keeps() -> None:
    from scipy import stats

    b, c = _pair(np.random.default_rng(5), 60, 0.02, sd=0.2)
    tcrit = float(stats.t.ppf(0.975, 59))
    low, high = fieller(b, c, tcrit)
    assert low is not None and high is not None
    for m, inside in ((low - 1e-4, False), (low + 1e-4, True), (high - 1e-4, True), (high + 1e-4, False)):
        d = ratio_test(b, c, test="superiority", margin=m, level_one_sided=0.025).decision
        assert (d == "INCONCLUSIVE") == inside, (m, d)


def test_bca_interval_decides_like_the_t_test_on_clear_data() -> None:
    b, c = _pair(np.random.default_rng(6), 300, 0.04)
    t = ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025)
    bca = ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025, method="bca", seed=7)
    assert t.decision == bca.decision == "PASS"
    assert bca.low == pytest.approx(t.low, abs=0.01) and bca.high == pytest.approx(t.high, abs=0.01)
    # seeded: the same call gives the same interval
    assert ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025, method="bca", seed=7) == bca


def test_tost_needs_both_sides_inside_the_band() -> None:
    rng = np.random.default_rng(8)
    a, a2 = _pair(rng, 400, 0.0, sd=0.05)
    assert ratio_test(a, a2, test="equivalence", margin=0.03, level_one_sided=0.05).decision == "PASS"
    a, a2 = _pair(rng, 400, 0.06, sd=0.05)
    assert ratio_test(a, a2, test="equivalence", margin=0.03, level_one_sided=0.05).decision == "FAIL"
    a, a2 = _pair(rng, 12, 0.0, sd=0.2)  # too few to show anything
    assert ratio_test(a, a2, test="equivalence", margin=0.03, level_one_sided=0.05).decision == "INCONCLUSIVE"


@pytest.mark.slow
def test_superiority_false_positive_rate_is_alpha() -> None:
    """The instrument check of the test itself: under no effect it claims "better" about alpha of the time."""
    rng = np.random.default_rng(9)
    n, trials = 40, 4000
    passed = sum(
        ratio_test(*_pair(rng, n, 0.0), test="superiority", margin=0.0, level_one_sided=0.025).decision == "PASS"
        for _ in range(trials)
    )
    rate = proportion(passed, trials)
    assert rate.low <= 0.025 <= rate.high, rate.describe()


def test_too_few_units_is_inconclusive() -> None:
    r = ratio_test(np.array([3.0]), np.array([2.9]), test="superiority", margin=0.0, level_one_sided=0.025)
    assert r.decision == "INCONCLUSIVE" and "at least 2" in r.reason


def test_clopper_pearson_and_wilson() -> None:
    r = proportion(0, 200)
    assert r.rate == 0 and r.low == 0 and r.high == pytest.approx(0.0183, abs=1e-4)
    r = proportion(5, 200)
    assert (round(r.low, 4), round(r.high, 4)) == (0.0082, 0.0574) and r.method == "Clopper-Pearson"
    w = proportion(5, 200, method="wilson")
    assert w.low > r.low and w.high < r.high


def test_obrien_fleming_and_pocock_boundaries() -> None:
    # Lan-DeMets O'Brien-Fleming, four equally spaced looks, one-sided 0.025 (Jennison and Turnbull's table)
    assert boundaries(0.025, 4, "obrien_fleming") == pytest.approx([4.3326, 2.9631, 2.3590, 2.0141], abs=2e-3)
    for spending in ("obrien_fleming", "pocock"):
        b = boundaries(0.025, 4, spending)
        assert sum(crossing(b, 0.0)) == pytest.approx(0.025, abs=2e-4)  # alpha over all looks
        assert crossing(b, 0.0)[0] == pytest.approx(spent(0.025, 0.25, spending), rel=1e-3)
    pocock = boundaries(0.025, 4, "pocock")
    assert max(pocock) - min(pocock) < 0.05  # nearly flat
    assert boundaries(0.025, 1, "pocock") == pytest.approx([1.95996], abs=1e-4)
    assert nominal_level(0.025, 4, 4, "obrien_fleming") == pytest.approx(0.0220, abs=5e-4)


def test_sequential_power_and_expected_size() -> None:
    b = boundaries(0.025, 4, "pocock")
    drift = 1.95996 + 1.28155  # the fixed design's 90% power
    power, used = power_and_stop(b, drift)
    assert power < 0.9  # the same maximum as the fixed design loses power ...
    power, used = power_and_stop(b, drift * 1.178**0.5)  # ... which an 18% larger maximum restores
    assert power == pytest.approx(0.9, abs=0.005) and used * 1.178 < 0.72


def _aa_boots(rng: np.random.Generator, n: int, boot_sd: float, sd: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """A/A with each arm its own boot: B and two controls, every arm's units shifted by its boot."""
    base = 3.0 * (1 + 0.3 * rng.standard_normal(n))
    arms = [base * (1 + boot_sd * rng.standard_normal()) * (1 + sd * rng.standard_normal(n)) for _ in range(3)]
    return arms[1], (arms[0] + arms[2]) / 2


@pytest.mark.slow
def test_a_registered_boot_sd_keeps_the_aa_error_rate_that_the_units_alone_miss() -> None:
    """Boots shift whole arms by 0.4%; 200 units see 0.35% of sampling noise. The units-only test calls A/A
    significant far beyond 5%; with the boot component in its variance it keeps alpha on both tails."""
    from gb300lane.cards.decide.stats import BootVariance

    rng = np.random.default_rng(11)
    plain = {"PASS": 0, "FAIL": 0, "INCONCLUSIVE": 0}
    booted = dict(plain)
    trials = 1500
    for _ in range(trials):
        b, c = _aa_boots(rng, 200, 0.004)
        plain[ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025).decision] += 1
        booted[
            ratio_test(
                b, c, test="superiority", margin=0.0, level_one_sided=0.025, boot=BootVariance(sd=0.004)
            ).decision
        ] += 1
    assert (plain["PASS"] + plain["FAIL"]) / trials > 0.15
    for tail in ("PASS", "FAIL"):
        assert booted[tail] / trials == pytest.approx(0.025, abs=0.013), booted


def test_boot_component_widens_the_interval_and_satterthwaite_counts_its_df() -> None:
    from gb300lane.cards.decide.stats import BootVariance

    b, c = _pair(np.random.default_rng(12), 300, 0.02)
    plain = ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025)
    known = ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025, boot=BootVariance(sd=0.01))
    few = ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025, boot=BootVariance(sd=0.01, df=5))
    assert plain.df == 299 and known.df is not None and known.df > 299 and few.df is not None and few.df < 40
    assert plain.low is not None and known.low is not None and few.low is not None
    assert few.low < known.low < plain.low and plain.estimate == known.estimate
    assert "boot sd 1.00% (taken as known)" in known.reason and "df 5" in few.reason
    # more boots per arm (stages) shrink the component; the interval stays the set of margins the test keeps
    staged = ratio_test(
        b, c, test="superiority", margin=0.0, level_one_sided=0.025, boot=BootVariance(sd=0.01, boots=4)
    )
    assert staged.low is not None and known.low < staged.low < plain.low
    for m in (staged.low - 1e-4, staged.low + 1e-4):
        d = ratio_test(b, c, test="superiority", margin=m, level_one_sided=0.025, boot=BootVariance(sd=0.01, boots=4))
        assert (d.decision == "INCONCLUSIVE") == (m > staged.low)
