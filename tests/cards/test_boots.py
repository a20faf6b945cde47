"""A registered boot sd checked against what is measured, the boot seed that would hide it, and how much more
would decide an INCONCLUSIVE card."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gb300lane.cards import load_card
from gb300lane.cards.decide.boots import (
    boots_to_see,
    estimate_from_units,
    exceeds_registered,
    registered_check,
    study_power,
)
from gb300lane.cards.decide.more import more_needed
from gb300lane.cards.decide.results import GateResult, GateTest
from gb300lane.cards.decide.stats import ratio_test
from gb300lane.cli.main import app

DATA = Path(__file__).parents[1] / "data" / "cards"


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("GB300LANE_BOOT_SEED", raising=False)
    return tmp_path / "results"


@pytest.mark.parametrize(
    "argv",
    [
        ["card", "plan", str(DATA / "tested.yaml"), "--boots", "3", "--no-pilot"],
        ["card", "calibrate", str(DATA / "tested.yaml"), "--replicates", "1"],
    ],
)
def test_a_boot_study_and_a_calibration_refuse_a_pinned_boot_seed(argv: list[str], _results: Path) -> None:
    r = CliRunner().invoke(app, argv, env={"GB300LANE_BOOT_SEED": "5"})
    assert r.exit_code == 1, r.output
    text = r.output + (r.stderr if r.stderr_bytes is not None else "")
    assert "GB300LANE_BOOT_SEED=5" in text and "unset GB300LANE_BOOT_SEED" in text
    assert not (_results / "pilots").exists() and not (_results / "calibrations").exists()  # nothing ran


def _units(rng: np.random.Generator, boots: int, n: int, boot_sd: float, unit_sd: float) -> list[dict]:
    mu = 3.0 * (1 + 0.2 * rng.standard_normal(n))
    out = []
    for _ in range(boots):
        shift = 1 + boot_sd * rng.standard_normal()
        out.append({None: {f"t{i}": float(mu[i] * shift * (1 + unit_sd * rng.standard_normal())) for i in range(n)}})
    return out


def test_a_measured_boot_sd_above_the_registered_one_is_named_and_a_matching_one_is_not() -> None:
    rng = np.random.default_rng(4)
    big = estimate_from_units(_units(rng, 30, 200, 0.005, 0.01))
    assert big is not None and big.lower > 0.0016 and exceeds_registered(big, 0.0016)
    line = registered_check("tps", big, 0.0016, 2, "the boot study", None)
    assert "above the registered 0.160%" in line and "register boot_sd" in line
    # the same study against the figure it measures: no note (its lower bound sits below the truth)
    fair = estimate_from_units(_units(rng, 30, 200, 0.005, 0.01))
    assert fair is not None and registered_check("tps", fair, 0.005, None, "the boot study", None) == ""


@pytest.mark.slow
def test_a_study_too_small_to_see_the_boot_sd_that_matters_says_how_many_boots_would() -> None:
    rng = np.random.default_rng(5)
    small = estimate_from_units(_units(rng, 4, 20, 0.0, 0.05))
    assert small is not None and small.lower == 0
    line = registered_check("tps", small, 0.0016, 2, "the boot study", 0.004)
    need = boots_to_see(0.004, small.units, small.within)
    assert need is not None and f"{need} boots would see it" in line
    assert (
        study_power(0.004, need, small.units, small.within)
        >= 0.9
        > study_power(0.004, need - 1, small.units, small.within)
    )
    # and the size it names does see it: an F test at 5% over `need` boots with that boot sd, 200 studies
    seen = 0
    for _ in range(200):
        est = estimate_from_units(_units(rng, need, small.units, 0.004, float(np.sqrt(small.within))))
        seen += est is not None and est.lower > 0
    assert seen / 200 > 0.8, seen


def _gate_result(b: np.ndarray, c: np.ndarray, requests: int) -> GateResult:
    r = ratio_test(b, c, test="superiority", margin=0.0, level_one_sided=0.025)
    t = GateTest(
        metric="tokens_per_step",
        comparison="B / mean(A, A2)",
        test="superiority",
        method="t",
        estimate=r.estimate,
        low=r.low,
        high=r.high,
        level=0.95,
        margin=0.0,
        alpha=0.025,
        nominal_alpha=0.025,
        n=r.n,
        requests_per_arm=requests,
        statistic=r.statistic,
        df=r.df,
        p_value=r.p_value,
        baseline=r.baseline,
        decision=r.decision,
        reason=r.reason,
    )
    return GateResult(
        id="tokens-per-step", kind="tokens_per_step", status=r.decision, observed="", bar="", noise_floor="", tests=(t,)
    )


def test_inconclusive_says_the_requests_that_reach_the_registered_power_and_they_do() -> None:
    card, _ = load_card(DATA / "tested.yaml")
    gate = next(g for g in card.gates if g.id == "tokens-per-step")  # superiority at mde 2%, no boot sd
    rng = np.random.default_rng(7)

    def pair(n: int) -> tuple[np.ndarray, np.ndarray]:
        base = 3.0 * (1 + 0.3 * rng.standard_normal(n))
        return base * 1.02 * (1 + 0.1 * rng.standard_normal(n)), base * (1 + 0.1 * rng.standard_normal(n))

    # 200 units: the observed variance within about 10% of the truth, so the size named is within about 10%
    res = _gate_result(*pair(200), requests=200)
    while res.status != "INCONCLUSIVE":
        res = _gate_result(*pair(200), requests=200)
    more = more_needed(card, gate, res)
    assert more is not None and more.boots_per_arm == 1 and more.requests_per_arm is not None
    assert more.requests_per_arm > 200 and "requests per arm" in more.note
    # at the size it names, the test passes the registered effect about 90% of the time (400 replicates;
    # binomial sd 1.5%, and the size's own error moves the power by about 3%)
    n = more.requests_per_arm
    passed = sum(
        ratio_test(*pair(n), test="superiority", margin=0.0, level_one_sided=0.025).decision == "PASS"
        for _ in range(400)
    )
    assert 0.82 < passed / 400 < 0.97, (n, passed)


def test_a_registered_boot_sd_too_large_for_one_boot_asks_for_more_boots() -> None:
    card, _ = load_card(DATA / "tested.yaml")
    gate = next(g for g in card.gates if g.id == "tokens-per-step").model_copy(update={"boot_sd": 0.01})
    rng = np.random.default_rng(2)
    base = 3.0 * (1 + 0.3 * rng.standard_normal(200))
    res = _gate_result(
        base * (1 + 0.05 * rng.standard_normal(200)), base * (1 + 0.05 * rng.standard_normal(200)), requests=200
    )
    assert res.status == "INCONCLUSIVE"
    more = more_needed(card, gate, res)
    assert more is not None and more.boots_per_arm is not None and more.boots_per_arm > 1
    # the boots' share left a quarter of the needed variance at least to the requests
    assert 1.5 * 0.01**2 / more.boots_per_arm <= 0.75 * more.se_needed**2 + 1e-15


@pytest.mark.slow
def test_a_boot_study_that_sees_more_than_the_registered_figure_is_named_at_register_and_in_the_verdict(
    _results: Path,
) -> None:
    """k9-boots registers local-br1's 0.16% (df 2, measured on local-v26) for local-k9 as production. Three real
    boots of local-k9 in process, then 20 boots made from them with a known 5% boot shift each (seeded): the
    study's lower bound is far above 0.16%, and register and the verdict both name it."""
    import json

    from gb300lane.cards import register, run_card, score
    from gb300lane.instrument.plan import registration_plan, registration_warnings, run_boot_study

    from fakes import cards as fakes

    card, path = load_card(DATA / "k9-boots.yaml")
    d = run_boot_study(card, 3)
    real = [json.loads(f.read_text()) for f in sorted(d.glob("boot-*.json"))]
    shifts = 1 + 0.05 * np.random.default_rng(11).standard_normal(20)
    for i, k in enumerate(shifts):
        w = json.loads(json.dumps(real[i % len(real)]))
        for c in w["cells"]:
            c["per_transcript_tps"] = {t: v * k for t, v in c["per_transcript_tps"].items()}
        f = d / f"boot-{i:03d}.json"
        if f.exists():
            f.chmod(0o644)
        f.write_text(json.dumps(w))
    warns = registration_warnings(card, registration_plan(card))
    flagged = [w for w in warns if w.startswith("gate tokens-per-step: the boot study measured")]
    assert flagged and "above the registered 0.160%" in flagged[0], warns
    rec = register(card, path.read_text())
    run_card(rec, ops=fakes.FakeLane(card, {}, noise=0.05, n_transcripts=20).ops())
    v = score(rec)
    assert any(n.startswith("gate tokens-per-step: a boot study (20 boots of local-k9") for n in v.notes), v.notes
    assert '"notes"' in rec.verdict_file(1).read_text()
    # a registered figure the study cannot rule out (its lower bound below it) is not named
    fair = card.model_copy(
        update={
            "gates": tuple(
                g.model_copy(update={"boot_sd": 0.08}) if g.id == "tokens-per-step" else g for g in card.gates
            )
        }
    )
    assert not [w for w in registration_warnings(fair, registration_plan(fair)) if "above the registered" in w]


def test_a_bca_gate_below_its_calibrated_sample_size_is_refused_at_register(tmp_path: Path) -> None:
    from gb300lane.cards import register
    from gb300lane.cards.schema import BCA_MIN_UNITS
    from gb300lane.errors import CardError

    text = (DATA / "tested.yaml").read_text()
    assert "    mde: 0.02\n" in text
    small = tmp_path / "small-bca.yaml"
    small.write_text(
        text.replace("name: tested", "name: small-bca").replace(
            "    mde: 0.02\n", "    mde: 0.02\n    interval: bca\n", 1
        )
    )
    card, _ = load_card(small)
    with pytest.raises(CardError, match=r"gate tokens-per-step.interval = bca at 12 paired units.*set interval: t"):
        register(card, small.read_text())
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
    # the same gate over a window of enough units registers
    big = tmp_path / "big-bca.yaml"
    per_class = -(-BCA_MIN_UNITS // 2)  # two classes
    big.write_text(
        small.read_text()
        .replace("name: small-bca", "name: big-bca")
        .replace("transcripts_per_class: 6", f"transcripts_per_class: {per_class}")
    )
    card, _ = load_card(big)
    assert register(card, big.read_text()).registration_file.is_file()


@pytest.mark.slow
def test_a_registered_boot_sd_records_what_it_was_measured_on_and_scoring_on_another_engine_is_named() -> None:
    import json

    from gb300lane.cards import register, run_card, score
    from gb300lane.cards.record.studies import measured_on
    from gb300lane.instrument.plan import registration_plan, run_boot_study

    from fakes import cards as fakes

    card, path = load_card(DATA / "k9-boots.yaml")
    d = run_boot_study(card, 3)
    meta = json.loads((d / "boots.json").read_text())
    assert meta["measured_on"] == measured_on(card)
    assert meta["measured_on"]["lane"] == "embedded engine, in process" and meta["measured_on"]["engine_fingerprint"]
    plan = registration_plan(card)
    assert (
        plan is not None and plan.boot_measured_on[0]["recipe_fingerprint"] == measured_on(card)["recipe_fingerprint"]
    )
    rec = register(card, path.read_text(), plan=plan)
    assert rec.registration().plan.boot_measured_on == plan.boot_measured_on
    run_card(rec, ops=fakes.FakeLane(card, {}, noise=0.05, n_transcripts=20).ops())
    same = score(rec, dry_run=True)
    assert not [n for n in same.notes if "another lane or engine" in n]

    # the same study as if measured on an engine of other code: the verdict names what moved
    other = card.model_copy(update={"name": "k9-other"})
    f = d / "boots.json"
    f.chmod(0o644)
    f.write_text(
        json.dumps({**meta, "card": "k9-other", "measured_on": {**meta["measured_on"], "engine_fingerprint": "0" * 64}})
    )
    rec2 = register(other, path.read_text().replace("name: k9-boots", "name: k9-other"), plan=registration_plan(other))
    run_card(rec2, ops=fakes.FakeLane(other, {}, noise=0.05, n_transcripts=20).ops())
    moved = [n for n in score(rec2, dry_run=True).notes if "another lane or engine" in n]
    assert moved and f"engine_fingerprint {'0' * 64} -> {measured_on(card)['engine_fingerprint']}" in moved[0]


@pytest.mark.slow
def test_a_calibration_keeps_its_control_boots_lower_bound_and_register_reads_it(tmp_path: Path) -> None:
    """One replicate of calibration of k9-boots (three control boots of local-k9, seed 0): the boot check keeps
    its lower bound beside the estimate, and register names the calibration exactly when that bound is above the
    registered figure (on this engine at 100 requests a boot it is not: no boot shift is seen)."""
    from gb300lane.instrument.calibrate import (
        calibrate,
        calibration_boot_notes,
        progress_file,
        raw_file,
        write_calibration,
    )
    from gb300lane.instrument.plan import registration_warnings

    text = (DATA / "k9-boots.yaml").read_text().replace("boot_sd: 0.0016", "boot_sd: 0.0001")
    f = tmp_path / "k9-boots.yaml"
    f.write_text(text)
    card, _ = load_card(f)
    cal, outcomes = calibrate(card, 1, seed=0, workers=1, resume=progress_file(card, 0), raw=raw_file(card, 0))
    write_calibration(card, text, cal, outcomes)
    b = cal.boot_check["tokens-per-step"]
    assert b.boots == 3 and 0 <= b.lower <= b.measured_sd <= b.upper and b.registered_sd == 0.0001
    flagged = b.lower > b.registered_sd
    assert bool(calibration_boot_notes(card)) == flagged
    assert any(w.startswith("gate tokens-per-step: calibration ") for w in registration_warnings(card, None)) == flagged
