"""The task-quality gate: McNemar's exact test of B against the controls, the floor, the drop's bound, the card rules."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from gb300lane.cards.decide.data import ArmData, CellData, WindowData
from gb300lane.cards.decide.evidence import Look
from gb300lane.cards.decide.gates import evaluate
from gb300lane.cards.decide.quality_gate import drop_upper, eval_quality, mcnemar
from gb300lane.cards.schema import Card, TaskQualityGate, parse_card
from gb300lane.errors import CardError

GATE = TaskQualityGate(id="quality", kind="task_quality", window="quality", margin=0.1, alpha=0.025)


def _arm(
    name: str, outcomes: dict[str, list[bool]], role: str = "control", concurrency: int = 8, rounds: int = 1
) -> ArmData:
    """One arm: per class, the outcomes of its transcripts in order (split evenly over `rounds`)."""
    cells = []
    for cls, oks in outcomes.items():
        per = len(oks) // rounds
        for r in range(rounds):
            part = oks[r * per : (r + 1) * per]
            cells.append(
                CellData(
                    cls=cls,
                    concurrency=concurrency,
                    round=r + 1,
                    quality={f"{cls}-{i:03d}": ok for i, ok in enumerate(part, 1)},
                )
            )
    return ArmData(
        arm=name,
        recipe="x",
        role=role,
        source="measured",  # type: ignore[arg-type]
        windows={"quality": WindowData(window="quality", cells=tuple(cells))},
    )


def _three(a: list[bool], b: list[bool], a2: list[bool], cls: str = "tool_json") -> tuple[ArmData, list[ArmData]]:
    return _arm("B", {cls: b}, "candidate"), [_arm("A", {cls: a}), _arm("A2", {cls: a2})]


def test_mcnemar_is_the_binomial_test_of_the_discordant_pairs() -> None:
    subject = [False] * 9 + [True] * 2 + [True] * 20 + [False] * 5
    reference = [True] * 9 + [False] * 2 + [True] * 20 + [False] * 5
    t = mcnemar(subject, reference, comparison="B vs A", level=0.025)
    assert (t.n, t.worse, t.better, t.alternative) == (36, 9, 2, "greater")
    assert t.p_value == pytest.approx(binomtest(9, 11, 0.5, alternative="greater").pvalue)
    assert t.drop == pytest.approx(7 / 36)
    two = mcnemar(subject, reference, comparison="A vs A2", level=0.025, two_sided=True)
    assert two.p_value == pytest.approx(binomtest(9, 11, 0.5).pvalue) and two.drop_upper is None
    none = mcnemar([True, False], [True, False], comparison="B vs A", level=0.025)
    assert (none.p_value, none.drop) == (1.0, 0.0)


@pytest.mark.slow
def test_the_drops_upper_bound_holds_at_its_level() -> None:
    # Pairs with a true drop of exactly 0.1: p(worse) = 0.2, p(better) = 0.1; the bound must lie above 0.1 in at
    # least 97.5% of samples (it is conservative: the two Clopper-Pearson pieces are Bonferroni-combined).
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        u = rng.random(120)
        worse, better = int((u < 0.2).sum()), int(((u >= 0.2) & (u < 0.3)).sum())
        covered += drop_upper(worse, better, 120, 0.025) >= 0.1
    assert covered / 400 >= 0.975
    assert drop_upper(0, 0, 80, 0.025) == pytest.approx(1 - (0.025 / 4) ** (1 / 80))  # no discordance: psi's bound
    assert drop_upper(0, 10, 80, 0.025) < 0  # B only ever better: the bound is below zero


def test_a_clear_drop_fails_against_both_controls_beyond_their_floor() -> None:
    n = 80
    a = [True] * 60 + [False] * 20
    a2 = list(a)
    b = [True] * 40 + [False] * 40  # 20 units the controls pass and B fails
    cand, ctrls = _three(a, b, a2)
    got = eval_quality(GATE, cand, ctrls, Look())
    assert got.status == "FAIL", got
    q = got.quality
    assert q is not None
    assert [(t.comparison, t.worse, t.better) for t in q.tests] == [
        ("B vs A", 20, 0),
        ("B vs A2", 20, 0),
        ("A vs A2", 0, 0),
    ]
    whole = {r.arm: (r.passed, r.checked) for r in q.rates if r.cls is None}
    assert whole == {"B": (40, n), "A": (60, n), "A2": (60, n)}
    assert "McNemar exact one-sided p = 9.54e-07" in got.observed


def test_no_change_passes_when_the_bound_is_below_the_margin() -> None:
    rng = np.random.default_rng(3)
    base = rng.random(400) < 0.7
    flip = rng.random((3, 400)) < 0.05  # each arm resamples 5% of its outcomes
    arms = [list(base ^ f) for f in flip]
    cand, ctrls = _three(arms[1], arms[0], arms[2])
    got = eval_quality(GATE, cand, ctrls, Look())
    assert got.status == "PASS", got
    assert all(t.drop_upper is not None and t.drop_upper < 0.1 for t in got.quality.tests[:2])


def test_a_drop_within_the_controls_own_difference_is_not_a_failure() -> None:
    a = [True] * 70 + [False] * 30
    a2 = [True] * 50 + [False] * 50  # the controls themselves differ by 20 points
    b = [True] * 44 + [False] * 56
    cand, ctrls = _three(a, b, a2)
    got = eval_quality(GATE.model_copy(update={"alpha": 0.05}), cand, ctrls, Look())
    tests = {t.comparison: t for t in got.quality.tests}
    assert tests["B vs A"].p_value < 0.05 and tests["B vs A2"].p_value < 0.05
    assert got.status == "INCONCLUSIVE"
    assert "by no more than the controls differ from each other (+20.0 pts)" in got.reasons[0]


def test_a_check_that_sees_no_quality_cannot_vouch_for_it() -> None:
    cand, ctrls = _three([False] * 80, [False] * 80, [False] * 80)
    got = eval_quality(GATE, cand, ctrls, Look())
    assert got.status == "INCONCLUSIVE" and "no control passed any of the 80 checked requests" in got.reasons[0]
    empty = eval_quality(GATE, _arm("B", {}, "candidate"), [_arm("A", {}), _arm("A2", {})], Look())
    assert empty.status == "INCONCLUSIVE" and empty.observed.startswith("no paired units")


def test_too_few_units_stay_undecided_rather_than_pass() -> None:
    cand, ctrls = _three([True] * 10, [True] * 10, [True] * 10)
    got = eval_quality(GATE, cand, ctrls, Look())
    assert got.status == "INCONCLUSIVE" and "neither shown" in got.reasons[0]  # 10 units bound the drop at ~0.46


def test_units_pair_by_transcript_and_round_and_per_class_rates_are_kept() -> None:
    b = _arm("B", {"tool_json": [True] * 40, "structured": [False] * 20 + [True] * 20}, "candidate", rounds=2)
    a = _arm("A", {"tool_json": [True] * 40, "structured": [True] * 40}, rounds=2)
    a2 = _arm("A2", {"tool_json": [True] * 38, "structured": [True] * 40}, rounds=2)  # two units unchecked
    got = eval_quality(GATE, b, [a, a2], Look())
    rates = {(r.arm, r.cls): (r.passed, r.checked) for r in got.quality.rates}
    assert rates[("B", None)] == (58, 78) and rates[("B", "structured")] == (20, 40)
    assert rates[("A2", "tool_json")] == (38, 38)
    assert got.status == "FAIL"


def test_a_sequential_look_judges_at_the_level_its_spending_allows() -> None:
    a = [True] * 60 + [False] * 20
    b = [True] * 52 + [False] * 28  # 8 worse, 0 better: one-sided p = 0.0039
    cand, ctrls = _three(a, b, list(a))
    early = Look(number=1, looks=3, spending="obrien_fleming")
    assert eval_quality(GATE, cand, ctrls, early).quality.tests[0].level < 0.001
    assert eval_quality(GATE, cand, ctrls, early).status == "INCONCLUSIVE"
    assert eval_quality(GATE, cand, ctrls, Look()).status == "FAIL"


CARD = """
schema_version: 1
name: quality-card
title: t
arms:
  - {name: A, recipe: local-v26, role: control}
  - {name: B, recipe: local-v27, role: candidate}
  - {name: A2, recipe: local-v26, role: control}
windows:
  - {name: primary, classes: [prose], transcripts_per_class: 4, concurrency: [1], temperature: 1.0, forced_tokens: 16}
  - {name: quality, classes: [tool_json], transcripts_per_class: 4, concurrency: [1, 8], temperature: 1.0,
     forced_tokens: null, max_tokens: 128, tool_choice: required}
primary_window: primary
gates:
  - {id: quality, kind: task_quality, window: WINDOW, margin: 0.1, alpha: 0.025, concurrency: [8]}
"""


def test_the_card_refuses_a_gate_on_a_forced_window_or_over_several_concurrencies() -> None:
    card = parse_card(CARD.replace("WINDOW", "quality"), "c.yaml")
    assert isinstance(card, Card) and card.gates[0].kind == "task_quality"
    with pytest.raises(CardError, match="window primary forces 16 tokens, which cuts tool calls and documents off"):
        parse_card(CARD.replace("WINDOW", "primary"), "c.yaml")
    with pytest.raises(CardError, match=r"covers concurrency \[1, 8\] of window quality; a round's requests share"):
        parse_card(CARD.replace("WINDOW", "quality").replace(", concurrency: [8]}", "}"), "c.yaml")


def test_the_gate_is_dispatched_with_the_other_kinds() -> None:
    card = parse_card(CARD.replace("WINDOW", "quality"), "c.yaml")
    b = _arm("B", {"tool_json": [True] * 80}, "candidate")
    ctrls = [_arm("A", {"tool_json": [True] * 80}), _arm("A2", {"tool_json": [True] * 80})]
    (got,) = evaluate(card, card.gates, [ctrls[0], b, ctrls[1]])
    assert got.kind == "task_quality" and got.status == "PASS" and got.quality is not None
    assert "quality" in got.model_dump(mode="json")


def test_other_gates_results_dump_as_they_did() -> None:
    from gb300lane.cards.decide.results import GateResult

    plain = GateResult(id="g", kind="parity", status="PASS", observed="o", bar="b", noise_floor="-")
    assert "quality" not in plain.model_dump(mode="json")
