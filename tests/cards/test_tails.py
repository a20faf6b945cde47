"""The latency-tail gate: its quantiles, its sample guard, its cluster bootstrap, and its error rates."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from gb300lane.bench.models import EngineTiming
from gb300lane.cards.decide.data import ArmData, CellData, WindowData
from gb300lane.cards.decide.tails import _weighted_quantiles, eval_tail, quantile
from gb300lane.cards.record.arms import _latency
from gb300lane.cards.schema import LatencyTailGate

from fakes import cards as fakes


def _gate(**kw) -> LatencyTailGate:
    base = dict(id="ttft-p99", kind="latency_tail", window="primary", metric="ttft", quantile=0.99, margin=0.10)
    base.update(kw)
    return LatencyTailGate(**base)


def _arms(
    rng: np.random.Generator,
    *,
    transcripts: int = 40,
    per: int = 25,
    b_factor: float = 1.0,
    unit_sd: float = 0.3,
    within_sd: float = 0.2,
    shared: np.ndarray | None = None,
    quantile_zero: bool = False,
) -> list[ArmData]:
    """Three arms of lognormal TTFTs: each transcript a shared level (all arms), its requests noise around it."""
    level = shared if shared is not None else rng.normal(0.0, unit_sd, transcripts)
    out = []
    for name, role, f in (("A", "control", 1.0), ("B", "candidate", b_factor), ("A2", "control", 1.0)):
        cells = []
        for rnd in range(per):
            ttft = {
                f"prose-{i:03d}": float(0.05 * f * np.exp(level[i] + rng.normal(0.0, within_sd)))
                # quantile_zero: every value but the last two transcripts' is zero (a clock that did not resolve)
                * (0.0 if quantile_zero and i < transcripts - 2 else 1.0)
                for i in range(transcripts)
            }
            cells.append(CellData(cls="prose", concurrency=1, round=rnd + 1, ttft_s=ttft))
        out.append(
            ArmData(
                arm=name,
                recipe="r",
                role=role,
                source="measured",
                windows={"primary": WindowData(window="primary", clock="modelled", cells=tuple(cells))},
            )
        )
    return out


def _eval(gate: LatencyTailGate, arms: list[ArmData]):
    return eval_tail(gate, arms[1], [arms[0], arms[2]])


def test_the_sample_guard_is_ten_values_beyond_the_quantile() -> None:
    assert _gate().min_values() == 1000 and _gate(quantile=0.95).min_values() == 200
    assert _gate(quantile=0.999).min_values() == 10000
    with pytest.raises(ValidationError):
        _gate(quantile=1.0)


def test_the_weighted_quantile_is_the_quantile_of_the_values_repeated() -> None:
    rng = np.random.default_rng(3)
    values = np.sort(rng.exponential(size=60))
    unit_of = rng.integers(0, 7, size=60)
    counts = rng.multinomial(7, [1 / 7] * 7, size=20)
    got = _weighted_quantiles(values, unit_of, counts, 0.9)
    for row, g in zip(counts, got):
        repeated = np.concatenate(
            [values[unit_of == u].repeat(0) if k == 0 else np.tile(values[unit_of == u], k) for u, k in enumerate(row)]
        )
        assert g == quantile(repeated, 0.9) == np.quantile(repeated, 0.9, method="inverted_cdf")


def test_too_few_values_is_inconclusive_and_says_how_many() -> None:
    r = _eval(_gate(), _arms(np.random.default_rng(1), transcripts=20, per=10))
    assert (
        r.status == "INCONCLUSIVE"
        and "needs at least 1000 per arm, ten beyond it" in r.reasons[0]
        and "B has 200" in r.reasons[0]
    )
    assert "n >= 10/(1-q)" in r.bar


def test_a_slower_tail_fails_and_an_equal_one_passes_the_margin() -> None:
    rng = np.random.default_rng(2)
    shared = rng.normal(0.0, 0.3, 40)
    slow = _eval(_gate(), _arms(rng, b_factor=1.4, shared=shared))
    assert slow.status == "FAIL" and "shown worse" in slow.reasons[0] and "modelled clock" in slow.observed
    same = _eval(_gate(margin=0.25), _arms(rng, shared=shared))
    assert same.status == "PASS", same.observed


def test_a_registered_boot_sd_widens_the_interval() -> None:
    arms = _arms(np.random.default_rng(4))
    plain, booted = _eval(_gate(), arms), _eval(_gate(boot_sd=0.05), arms)

    def width(r) -> float:
        low, high = r.observed.split("interval [")[1].split("]")[0].split(", ")
        return float(high.rstrip("%")) - float(low.rstrip("%"))

    assert width(booted) > width(plain) and "boot sd 5.00% registered" in booted.observed


def test_itl_reads_every_gap_and_the_cells_clock() -> None:
    cell = CellData(cls="prose", concurrency=1, round=1, itl_s={"prose-000": (0.01, 0.02), "prose-001": (0.03,)})
    arms = [
        ArmData(
            arm=n,
            recipe="r",
            role="candidate" if n == "B" else "control",
            source="measured",
            windows={"primary": WindowData(window="primary", clock="wall", cells=(cell,))},
        )
        for n in ("A", "B", "A2")
    ]
    r = _eval(_gate(metric="itl", quantile=0.6), arms)  # 0.6 needs 7 values: 3 per arm is too few
    assert r.status == "INCONCLUSIVE" and "B has 3" in r.reasons[0]


def test_a_request_latency_on_each_clock() -> None:
    rec = fakes._record("prose-000", "prose", 1, 1, 100.0).model_copy(
        update={
            "ttft_s": 0.2,
            "event_times_s": [0.2, 0.25, 0.35],
            "token_times_s": [0.2, 0.25, 0.25, 0.35],
            "engine": EngineTiming(
                modelled_ttft_s=0.1,
                modelled_e2e_s=0.13,
                modelled_token_times_s=[0.1, 0.11, 0.11, 0.13],
                wall_token_times_s=[0.0] * 4,
            ),
        }
    )
    wall, modelled = _latency(rec, "wall"), _latency(rec, "modelled")
    assert wall[0] == 0.2 and wall[1] == pytest.approx((0.05, 0.10))
    assert modelled[0] == 0.1 and modelled[1] == pytest.approx((0.01, 0.02))  # one step's tokens are one chunk


@pytest.mark.slow
def test_aa_false_worse_stays_at_alpha_when_transcripts_cluster_the_values() -> None:
    """200 seeded A/A replicates with strongly clustered values: the gate at margin 0 is a one-sided test at 2.5%
    (FAIL = B shown worse), and resampling by transcript keeps both tails there."""
    rng = np.random.default_rng(11)
    fails = passes = 0
    for _ in range(200):
        arms = _arms(rng, transcripts=30, per=14, unit_sd=0.5, within_sd=0.15)
        status = _eval(_gate(margin=0.0, quantile=0.95), arms).status
        fails += status == "FAIL"
        passes += status == "PASS"
    # binomial(200, 0.025): mean 5, P(X > 13) < 0.1%; both tails are one-sided tests at 2.5%
    assert fails <= 13 and passes <= 13, (fails, passes)


def test_a_tail_over_too_few_transcripts_is_not_decided() -> None:
    """Values within a transcript are not independent: 12 transcripts of 100 requests hold 1,200 values per arm,
    and the gate still waits for MIN_TRANSCRIPTS transcripts."""
    from gb300lane.cards.decide.tails import MIN_TRANSCRIPTS

    arms = _arms(np.random.default_rng(5), transcripts=12, per=100)
    got = _eval(_gate(), arms)
    assert got.status == "INCONCLUSIVE" and f"fewer than {MIN_TRANSCRIPTS} transcripts" in got.reasons[0]


def test_a_look_spends_its_own_level_and_the_boots_so_far() -> None:
    """At look 2 of 4 (O'Brien-Fleming) the interval is far wider than the fixed design's, and the bar says so; at
    look 1 the level is too deep for the resampling draws to resolve, and the gate waits for a later look."""
    from gb300lane.cards.decide.evidence import Look

    arms = _arms(np.random.default_rng(6), transcripts=40, per=12)
    gate = _gate(quantile=0.95, boot_sd=0.01)
    fixed = eval_tail(gate, arms[1], [arms[0], arms[2]])
    early = eval_tail(gate, arms[1], [arms[0], arms[2]], Look(number=2, looks=4, spending="obrien_fleming"))
    assert "look 2 of 4" in early.bar and "look" not in fixed.bar

    def width(r) -> float:
        lo, hi = r.observed.split("interval [")[1].split("]")[0].split(", ")
        return float(hi.rstrip("%")) - float(lo.rstrip("%"))

    assert width(early) > 1.5 * width(fixed)
    first = eval_tail(gate, arms[1], [arms[0], arms[2]], Look(number=1, looks=4, spending="obrien_fleming"))
    assert first.status == "INCONCLUSIVE" and "decides at a later look" in first.reasons[0], first


def test_a_tail_whose_resamples_hit_zero_is_not_decided() -> None:
    """ITL gaps the clock did not resolve are zero: where too many resampled quantiles are zero to read the
    interval, the gate says so instead of reading it from the draws that are left."""
    rng = np.random.default_rng(8)
    arms = _arms(rng, transcripts=20, per=60, quantile_zero=True)
    got = _eval(_gate(quantile=0.95), arms)
    assert got.status == "INCONCLUSIVE" and "the resampled p95 is zero in" in got.reasons[0], got
