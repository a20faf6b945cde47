"""`card extend`: the further looks a card registered, their alpha, the refusals, and an extension end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gb300lane.cards import load_card, register, run_card, score
from gb300lane.cards.decide.data import ArmData, BootFacts
from gb300lane.cards.decide.evidence import Look
from gb300lane.cards.decide.extension import plan_extension, refusal
from gb300lane.cards.decide.looks import decide, design_look
from gb300lane.cards.decide.sequential import boundaries, crossing, nominal_level
from gb300lane.cards.extend import extend_card
from gb300lane.cards.record.arms import window_data_from_result
from gb300lane.cards.record.card_custody import verify_receipts
from gb300lane.cards.record.extensions import read_extension
from gb300lane.cards.record.look_receipts import read_look
from gb300lane.cards.record.receipts import read_verdict, receipts_state
from gb300lane.cards.schema import gates_hash, parse_card, planned_stages, stage_count
from gb300lane.errors import CardError
from gb300lane.instrument.calibrate import run_replicate, summarize

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


def _card(name: str = "extension.yaml", text: str | None = None):
    return parse_card(text if text is not None else (DATA / name).read_text(), name)


def _registered(name: str = "extension.yaml"):
    card, p = load_card(DATA / name)
    return card, register(card, p.read_text())


# -- the plan: the design's look is the first of the registered plan's looks


def test_a_fixed_card_with_an_extension_spends_part_of_alpha_at_its_own_look() -> None:
    card = _card()
    assert (stage_count(card), planned_stages(card)) == (1, 4)
    look = design_look(card, 1)
    assert (look.number, look.looks, look.spending) == (1, 4, "pocock")
    assert look.level(0.025) == pytest.approx(nominal_level(0.025, 1, 4, "pocock"))
    assert look.level(0.025) < 0.025  # the one look no longer spends all of alpha
    # over the four looks, the chance of ever crossing under the null is the registered alpha, never more
    assert sum(crossing(boundaries(0.025, 4, "pocock"), 0.0)) == pytest.approx(0.025, abs=2e-4)
    # without an extension the fixed card's one look spends all of it, as before
    plain = _card("tested.yaml")
    assert design_look(plain, 1) == Look() and Look().level(0.025) == 0.025


def test_the_extension_is_frozen_with_the_gates_and_a_card_without_one_hashes_as_before() -> None:
    text = (DATA / "extension.yaml").read_text()
    with_ext = _card(text=text)
    cut = text[: text.index("design:\n")]
    without = _card(text=cut)
    fixed = _card(text=cut + "design:\n  kind: fixed\n")
    assert gates_hash(without) == gates_hash(fixed)  # an explicit fixed design is still the default
    assert gates_hash(with_ext) != gates_hash(without)
    more = _card(text=text.replace("looks: 3", "looks: 2"))
    assert gates_hash(more) != gates_hash(with_ext)
    seq = (DATA / "sequential.yaml").read_text()
    assert "extension" not in json.dumps(
        _card("sequential.yaml", seq).design.model_dump(mode="json", exclude_none=True)
    )


def test_a_sequential_extension_spends_by_the_design_s_function() -> None:
    seq = (DATA / "sequential.yaml").read_text()
    spending = "spending: pocock" if "pocock" in seq else "spending: obrien_fleming"
    other = "obrien_fleming" if "pocock" in spending else "pocock"
    bad = seq.rstrip("\n") + f"\n  extension:\n    looks: 2\n    spending: {other}\n"
    with pytest.raises(CardError, match="one plan spends alpha by one function"):
        _card("sequential.yaml", bad)
    good = _card("sequential.yaml", seq.rstrip("\n") + f"\n  extension:\n    looks: 2\n    {spending}\n")
    assert planned_stages(good) == stage_count(good) + 2
    assert design_look(good, 1).looks == planned_stages(good)


def test_the_design_s_last_look_is_final_for_card_run_and_the_plan_s_for_card_extend() -> None:
    look = Look(number=1, looks=4, spending="pocock")
    assert decide([], look, final_at=1) == ("INCONCLUSIVE", "final")
    assert decide([], look) == ("INCONCLUSIVE", "continue")
    assert decide([], Look(number=4, looks=4, spending="pocock"), final_at=3) == ("INCONCLUSIVE", "final")


def _inconclusive_results(card, *, tps: float = 1.004):
    """Look 1's results of a card over fake arms (a small effect: the tokens/step gate is INCONCLUSIVE)."""
    from gb300lane.cards.decide.gates import evaluate

    w = card.window(card.primary_window)
    arms = []
    for i, arm in enumerate(card.arms):
        res = fakes.window_result(
            w.model_copy(update={"seed_base": 100 + i}),
            noise=0.03,
            n_transcripts=20,
            tps_factor=tps if arm.role == "candidate" else 1.0,
        )
        arms.append(
            ArmData(
                arm=arm.name,
                recipe=arm.recipe,
                role=arm.role,
                source="measured",
                boot=BootFacts(),
                windows={w.name: window_data_from_result(res, w.name)},
            )
        )
    return evaluate(card, card.gates, arms, None, design_look(card, 1))


def test_an_extension_is_sized_from_more_needed_and_spends_the_plan_s_levels() -> None:
    card = _card()
    results = _inconclusive_results(card)
    assert next(r for r in results if r.id == "tokens-per-step").status == "INCONCLUSIVE"
    plan = plan_extension(card, card.gates, results, 1)
    assert plan.first_stage == 2 and 2 <= plan.last_stage <= 4 and plan.looks == 4 and plan.spending == "pocock"
    assert plan.more_needed and plan.more_needed[0].gate == "tokens-per-step"
    levels = plan.levels["tokens-per-step"]
    assert len(levels) == plan.last_stage - 1
    for s, level in zip(range(2, plan.last_stage + 1), levels):
        assert level == pytest.approx(nominal_level(0.025, s, 4, "pocock"))
    assert "decode-per-class" not in plan.levels  # a diagnostic spends nothing
    # without a registered effect nothing sizes it: the extension runs the plan's remaining looks
    bare = _card(text=(DATA / "extension.yaml").read_text().replace("    mde: 0.02\n", ""))
    plan = plan_extension(bare, bare.gates, _inconclusive_results(bare), 2)
    assert (plan.first_stage, plan.last_stage) == (3, 4) and "remaining looks" in plan.reason
    with pytest.raises(ValueError, match="no further look"):
        plan_extension(card, card.gates, results, 4)


def test_extend_refuses_naming_the_file_the_key_and_the_fix() -> None:
    card = _card()
    plain = _card("tested.yaml")
    common = dict(card_file="r/card.yaml", verdict_file="r/verdicts/verdict-1.json", look_file="r/looks/look-1.json")
    why = refusal(plain, **common, verdict="INCONCLUSIVE", registered_gates=True, stages_done=1)
    assert why and "r/card.yaml" in why and "design.extension" in why and "--fresh" in why
    why = refusal(card, **common, verdict="PASS", registered_gates=True, stages_done=1)
    assert why and "verdict-1.json" in why and "key verdict" in why and "not INCONCLUSIVE" in why
    why = refusal(card, **{**common, "verdict_file": None}, verdict=None, registered_gates=False, stages_done=1)
    assert why and "card score" in why
    why = refusal(card, **common, verdict="INCONCLUSIVE", registered_gates=False, stages_done=1)
    assert why and "re-score" in why
    why = refusal(
        card,
        **{**common, "look_file": "r/looks/look-4.json"},
        verdict="INCONCLUSIVE",
        registered_gates=True,
        stages_done=4,
    )
    assert why and "look-4.json" in why and "design.extension.looks" in why and "alpha is spent" in why
    assert refusal(card, **common, verdict="INCONCLUSIVE", registered_gates=True, stages_done=1) is None


# -- end to end, on a fake lane


@pytest.mark.slow
def test_an_inconclusive_card_is_extended_to_a_decision() -> None:
    card, rec = _registered()
    lane = fakes.FakeLane(card, {}, tps={"B": 1.005}, noise=0.03, n_transcripts=20)
    lines = run_card(rec, ops=lane.ops())
    assert lines[-1] == "look 1 of 4: INCONCLUSIVE with 160 requests per arm -> final"
    v1 = score(rec)
    assert (v1.verdict, v1.look, v1.looks) == ("INCONCLUSIVE", 1, 4)
    tps1 = next(r for r in v1.results if r.id == "tokens-per-step").tests[0]
    assert tps1.nominal_alpha == pytest.approx(nominal_level(0.025, 1, 4, "pocock"))
    assert v1.more_needed and v1.more_needed[0].gate == "tokens-per-step"

    done = extend_card(rec, ops=lane.ops())
    ext = read_extension(rec, 1)
    assert ext == done.receipt and not done.resumed
    assert ext.extends.number == 1 and ext.extends.verdict == "INCONCLUSIVE"
    assert ext.extends.file == "verdicts/verdict-1.json" and ext.plan.first_stage == 2
    assert done.lines[:3] == (
        "A (stage 2): finished (attempt 1)",
        "B (stage 2): finished (attempt 1)",
        "A2 (stage 2): finished (attempt 1)",
    )
    v2 = done.verdict
    assert (v2.number, v2.verdict, v2.look, v2.looks) == (2, "PASS", 2, 4)
    assert v2.previous is not None and v2.previous.number == 1 and "extension 1" in (v2.reason or "")
    assert read_verdict(rec, 2) == v2 and read_look(rec, 2).action == "stop"
    tps2 = next(r for r in v2.results if r.id == "tokens-per-step").tests[0]
    assert tps2.nominal_alpha == pytest.approx(nominal_level(0.025, 2, 4, "pocock"))
    assert tps2.requests_per_arm == 2 * tps1.requests_per_arm
    # stage 2 booted every arm again and sent seeds of its own
    seeds = [w.seed_base for _, w in lane.windows]
    assert len(set(seeds)) == len(seeds) == 6
    assert ("up", "A", "local-v26") in lane.calls[6:] and len([c for c in lane.calls if c[0] == "up"]) == 6
    # the chain holds: verdict 1 still scores what it said at its own look, verdict 2 points at it
    chain = verify_receipts(rec)
    assert chain.ok, [link for link in chain.links if link.status == "broken"]
    # a decided card is not extended again
    with pytest.raises(CardError, match="not INCONCLUSIVE"):
        extend_card(rec, ops=lane.ops())


@pytest.mark.slow
def test_extensions_stop_when_the_registered_looks_are_spent() -> None:
    card, rec = _registered()
    lane = fakes.FakeLane(card, {}, noise=0.03, n_transcripts=20)  # no effect: tokens/step stays undecided
    run_card(rec, ops=lane.ops())
    assert score(rec).verdict == "INCONCLUSIVE"
    assert receipts_state(rec).next[0] == "gb300lane card extend extension"
    seen = []
    while True:
        try:
            done = extend_card(rec, ops=lane.ops())
        except CardError as exc:
            assert "alpha is spent" in str(exc) and "look-4.json" in str(exc)
            break
        seen.append((done.receipt.plan.first_stage, done.receipt.plan.last_stage, done.verdict.verdict))
        assert len(seen) <= 3
    assert seen and seen[-1][1] == 4 and all(v == "INCONCLUSIVE" for *_, v in seen)
    assert rec.look_numbers() == [1, 2, 3, 4] and read_look(rec, 4).looks == 4
    assert verify_receipts(rec).ok
    assert not any("extend" in c for c in receipts_state(rec).next)


def test_a_card_without_an_extension_is_refused() -> None:
    card, rec = _registered("tested.yaml")
    run_card(rec, ops=fakes.FakeLane(card, {}, noise=0.03, n_transcripts=20).ops())
    assert score(rec).verdict == "INCONCLUSIVE"
    with pytest.raises(CardError, match=r"card\.yaml: design\.extension is not registered"):
        extend_card(rec, ops=fakes.FakeLane(card, {}).ops())
    assert rec.extension_numbers() == []


@pytest.mark.slow
def test_an_interrupted_extension_resumes_without_planning_another() -> None:
    card, rec = _registered()
    lane = fakes.FakeLane(card, {}, tps={"B": 1.005}, noise=0.03, n_transcripts=20)
    run_card(rec, ops=lane.ops())
    score(rec)
    broken = fakes.FakeLane(card, {}, tps={"B": 1.005}, noise=0.03, n_transcripts=20, fail_window_on="B")
    with pytest.raises(KeyboardInterrupt):
        extend_card(rec, ops=broken.ops())
    assert rec.extension_numbers() == [1] and rec.verdict_numbers() == [1]
    done = extend_card(rec, ops=lane.ops())
    assert done.resumed and rec.extension_numbers() == [1] and done.verdict.number == 2
    assert done.lines[0] == "A (stage 2): finished earlier (attempt 1); skipped"


# -- calibration: replicates extended as `card extend` extends them


class _FakeEngine:
    """Stands in for the in-process engine: each arm-stage a fake window with its own noise."""

    def __init__(self, tps_b: float) -> None:
        self.tps_b = tps_b

    def run_arm(self, card, arm, windows, recipe=None, boot_seed=None):
        factor = self.tps_b if recipe == card.candidate.recipe else 1.0
        data = {}
        for w in windows:
            w2 = w.model_copy(update={"seed_base": (boot_seed or 0) % 100000})
            data[w.name] = window_data_from_result(
                fakes.window_result(w2, tps_factor=factor, noise=0.03, n_transcripts=20), w.name
            )
        return ArmData(
            arm=arm.name, recipe=recipe or arm.recipe, role=arm.role, source="measured", boot=BootFacts(), windows=data
        )


def test_calibration_extends_inconclusive_replicates_as_card_extend_does() -> None:
    card = _card()
    engine = _FakeEngine(1.005)
    outcomes = [o for r in range(3) for o in run_replicate(engine, card, 0, r)]  # type: ignore[arg-type]
    aa = [o for o in outcomes if o.scenario == "aa"]
    assert aa and all(o.extensions >= 1 and o.look > 1 for o in aa if o.verdict == "INCONCLUSIVE")
    assert all(o.extended_stages == o.look - 1 for o in outcomes)
    assert max(o.look for o in outcomes) <= 4
    unextended = [o for r in range(3) for o in run_replicate(engine, card, 0, r, extend=False)]  # type: ignore[arg-type]
    assert all(o.look == 1 and o.extensions == 0 for o in unextended)
    cal = summarize(card, outcomes, seed=0, replicates=3, cpu=0.0, workers=1)
    assert cal.extended_aa == sum(1 for o in aa if o.extensions) and "extension of up to 3 looks" in cal.design


@pytest.mark.slow
def test_card_extend_on_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import gb300lane.cards.run as run_mod
    from gb300lane.cli.main import app

    card, rec = _registered()
    lane = fakes.FakeLane(card, {}, tps={"B": 1.005}, noise=0.03, n_transcripts=20)
    run_card(rec, ops=lane.ops())
    runner = CliRunner()
    res = runner.invoke(app, ["card", "extend", str(rec.root)])
    assert res.exit_code == 1 and "no verdict yet" in res.output and "card score" in res.output
    score(rec)
    monkeypatch.setattr(run_mod, "LiveArmOps", lambda *a, **kw: lane)
    res = runner.invoke(app, ["card", "extend", str(rec.root), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["verdict"]["verdict"] == "PASS" and got["verdict"]["number"] == 2
    assert got["extension"]["plan"]["first_stage"] == 2 and got["extension"]["extends"]["number"] == 1
    res = runner.invoke(app, ["card", "extend", str(rec.root)])
    assert res.exit_code == 1 and "not INCONCLUSIVE" in res.output
