"""The lane's noise ledger: every scored card's A against A2, pooled per lane, recovers a known boot sd."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gb300lane.cards import load_card, register, run_card, score
from gb300lane.cards.record.noise import ALL_CELLS, ledger, pool
from gb300lane.cli.main import app
from gb300lane.instrument.plan import LEDGER_MIN_CARDS, plan_for

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("COLUMNS", "400")
    return tmp_path / "results"


def _cards(tmp_path: Path, shifts: list[tuple[float, float]], *, noise: float = 0.02, same_seeds: bool = False) -> None:
    """One scored `tested` card per (A, A2) tokens/step shift, each with its own seeds unless `same_seeds`."""
    text = (DATA / "tested.yaml").read_text()
    for i, (a, a2) in enumerate(shifts):
        seed = 1000 if same_seeds else 1000 + 7919 * (i + 1)
        p = tmp_path / f"tested-{i}.yaml"
        p.write_text(
            text.replace("name: tested\n", f"name: tested-{i}\n").replace("seed_base: 1000", f"seed_base: {seed}")
        )
        card, _ = load_card(p)
        rec = register(card, p.read_text())
        lane = fakes.FakeLane(card, {}, tps={"A": 1 + a, "A2": 1 + a2, "B": 1.0}, noise=noise)
        run_card(rec, ops=lane.ops())
        score(rec)


def _tps() -> object:
    got = [e for k, e in ledger().items() if k.metric == "tokens_per_step" and k.unit == ALL_CELLS]
    assert len(got) == 1, got
    return got[0]


@pytest.mark.slow
def test_the_ledger_recovers_a_known_boot_sd(tmp_path: Path) -> None:
    sigma = 0.03
    rng = np.random.default_rng(20261201)
    _cards(tmp_path, [(float(x), float(y)) for x, y in rng.normal(0.0, sigma, size=(12, 2))])
    est = _tps()
    assert est.cards == 12 and est.key.lane == "local" and est.key.engine == "embedded"
    assert est.lower <= sigma <= est.upper, est
    assert 0.5 * sigma < est.sd < 1.6 * sigma, est
    assert est.df is not None and est.df > 3


@pytest.mark.slow
def test_no_boot_shift_reads_near_zero_with_an_upper_bound_that_covers_it(tmp_path: Path) -> None:
    _cards(tmp_path, [(0.0, 0.0)] * 6)
    est = _tps()
    assert est.cards == 6 and est.sd < 0.01 and est.lower == 0.0 and est.upper > est.sd


@pytest.mark.slow
def test_cards_that_replay_the_same_seeds_count_once(tmp_path: Path) -> None:
    _cards(tmp_path, [(0.0, 0.01)] * 3, same_seeds=True)
    assert _tps().cards == 1


@pytest.mark.slow
def test_the_pooled_bounds_cover_the_truth_at_their_rate() -> None:
    """The chi-square bounds over K cards, on simulated cards of 12 transcripts: the one-sided 95% upper bound
    misses the true sigma_b in about 5% of 2,000 ledgers (K = 4)."""
    from gb300lane.cards.record.noise import CardSample

    rng = np.random.default_rng(7)
    sigma_b, sigma_e, n, k, reps = 0.02, 0.05, 12, 4, 2000
    miss_up = miss_low = 0
    for _ in range(reps):
        samples = []
        for c in range(k):
            shift = rng.normal(0, sigma_b, size=2)
            t = rng.normal(0, 0.2, size=n)
            y = (1 + t)[None, :] * (1 + shift)[:, None] + rng.normal(0, sigma_e, size=(2, n))
            y = y / y.mean()
            bm, tm = y.mean(axis=1), y.mean(axis=0)
            res = y - bm[:, None] - tm[None, :] + 1.0
            samples.append(
                CardSample(
                    card=f"c{c}",
                    receipts=f"r{c}",
                    date="2026-12-01",
                    recipe="r",
                    fingerprint=None,
                    transcripts=n,
                    ms_boot=n * float(((bm - 1) ** 2).sum()),
                    ms_res=float((res**2).sum()) / (n - 1),
                    data=str(c),
                )
            )
        _, _, upper, lower = pool(samples)
        miss_up += math.sqrt(max(0.0, upper)) < sigma_b
        miss_low += math.sqrt(max(0.0, lower)) > sigma_b
    assert miss_up / reps < 0.08 and miss_low / reps < 0.08, (miss_up / reps, miss_low / reps)


@pytest.mark.slow
def test_card_plan_uses_the_lane_ledger_and_says_which(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    _cards(tmp_path, [(float(x), float(y)) for x, y in rng.normal(0.0, 0.02, size=(LEDGER_MIN_CARDS, 2))])
    card, _ = load_card(DATA / "tested.yaml")
    plan = plan_for(card, pilot=False)
    by_gate = {g.gate: g for g in plan.gates}
    tps = by_gate["tokens-per-step"]
    assert tps.boot_sd_source.startswith("the lane's noise ledger: the controls of 3 scored cards on lane local")
    assert tps.boot_sd == pytest.approx(_tps().sd)
    assert by_gate["decode-per-class"].boot_sd_source != tps.boot_sd_source  # per-cell gates: not the aggregate
    runner = CliRunner()
    shown = runner.invoke(app, ["card", "noise", "--lane", "local"])
    assert shown.exit_code == 0, shown.output
    assert "tokens_per_step" in shown.output and "all cells" in shown.output
    rows = json.loads(runner.invoke(app, ["card", "noise", "--json"]).stdout)
    assert {r["metric"] for r in rows} == {"tokens_per_step", "decode_tok_s"}
    assert all(r["cards"] == LEDGER_MIN_CARDS for r in rows)
    planned = runner.invoke(app, ["card", "plan", str(DATA / "tested.yaml"), "--no-pilot"])
    assert planned.exit_code == 0, planned.output
    assert "from the lane's noise ledger: the controls of 3 scored cards" in planned.output
    assert "boot sd of tokens-per-step, " in planned.output


@pytest.mark.slow
def test_a_registered_boot_sd_the_ledger_contradicts_is_named_at_register_and_in_the_verdict(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    _cards(tmp_path, [(float(x), float(y)) for x, y in rng.normal(0.0, 0.06, size=(8, 2))])
    assert _tps().lower > 0.001
    p = tmp_path / "registers-too-little.yaml"
    p.write_text(
        (DATA / "tested.yaml")
        .read_text()
        .replace("name: tested\n", "name: too-little\n")
        .replace("seed_base: 1000", "seed_base: 4242")
        .replace("    mde: 0.02\n", "    mde: 0.02\n    boot_sd: 0.001\n")
    )
    runner = CliRunner()
    refused = runner.invoke(app, ["card", "register", str(p)])
    assert (
        refused.exit_code == 1
        and "registers a boot sd of 0.100%, below its lower one-sided 95% bound" in refused.output
        and "--boot-sd-override" in refused.output
    ), refused.output
    reg = runner.invoke(app, ["card", "register", str(p), "--boot-sd-override", "the lane changed since"])
    assert reg.exit_code == 0, reg.output
    assert "the lane's noise ledger" in reg.output and "above the registered 0.100%" in reg.output
    card, _ = load_card(p)
    from gb300lane.cards.record.receipts import find_receipts

    rec = find_receipts(card.name)
    assert rec.registration().boot_sd_override == "the lane changed since"
    run_card(rec, ops=fakes.FakeLane(card, {}, noise=0.02).ops())
    verdict = score(rec)
    assert any("the lane's noise ledger: the controls of 8 scored cards" in n for n in verdict.notes), verdict.notes
    assert any("with --boot-sd-override: the lane changed since" in n for n in verdict.notes), verdict.notes


def test_the_pool_weighs_unequal_cards_and_counts_a_replay_once() -> None:
    """One small card beside nine large ones is nearly one card's evidence (Satterthwaite's nu near 1, so the upper
    bound widens); ten cards whose controls ran the same registered requests are one sample."""
    from gb300lane.cards.record.noise import CardSample, _distinct, pool

    def sample(i: int, n: int, ms_boot: float, ms_res: float, seeds: str) -> CardSample:
        return CardSample(
            card=f"c{i}",
            receipts=f"r{i}",
            date="2026-01-01",
            recipe="r",
            fingerprint=None,
            transcripts=n,
            ms_boot=ms_boot,
            ms_res=ms_res,
            data=f"d{i}",
            seeds=seeds,
        )

    equal = [sample(i, 200, 0.02, 0.01, f"s{i}") for i in range(10)]
    mixed = [sample(0, 8, 0.02, 0.01, "s0")] + equal[1:]
    _, _, up_equal, _ = pool(equal)
    from scipy.stats import chi2

    x, w = 0.02 / 200, 0.01 / 200
    assert up_equal == pytest.approx(10 * x / chi2.ppf(0.05, 10) - w)  # cards of one size: the plain chi2(K)
    _, _, up_mixed, _ = pool(mixed)
    mean_x = (0.02 / 8 + 9 * x) / 10
    assert up_mixed > 10 * mean_x / chi2.ppf(0.05, 10) - (0.01 / 8 + 9 * w) / 10  # wider than chi2(10) would say
    replays = [sample(i, 200, 0.02 + 0.001 * i, 0.01, "same") for i in range(10)]
    kept = _distinct(replays)
    assert len(kept) == 1 and kept[0].ms_boot == pytest.approx(0.0245) and kept[0].card.count("+") == 9
