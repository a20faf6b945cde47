"""The lossless gate: each arm judged absolutely, from its window's referee result; the card rules; the in-process
lane's referee (the target's own rows) passes an exact engine."""

from __future__ import annotations

import numpy as np
import pytest

from gb300lane.cards.cardfile import load_card
from gb300lane.cards.decide.data import ArmData, WindowData
from gb300lane.cards.decide.lossless_gate import eval_lossless
from gb300lane.cards.schema import LosslessGate
from gb300lane.instrument.simulate import InProcessLane
from gb300lane.spec.lossless import check, simulate_transcripts
from gb300lane.spec.lossless_result import LosslessResult

GATE = LosslessGate(id="lossless", kind="lossless", window="primary", margin=0.05, alpha=0.01)


def _result(t: float, seed: int, **kw: float) -> LosslessResult:
    window = simulate_transcripts(np.random.default_rng(seed), transcripts=20, tokens=100, sample_temperature=t)
    return check(window, temperature=1.0, **kw)


def _arm(name: str, ll: LosslessResult | None, role: str = "control") -> ArmData:
    return ArmData(
        arm=name,
        recipe="x",
        role=role,
        source="measured",  # type: ignore[arg-type]
        windows={"primary": WindowData(window="primary", lossless=ll)},
    )


def test_every_arm_exact_passes_and_reports_b_against_the_controls() -> None:
    r = eval_lossless(
        GATE, _arm("B", _result(1.0, 1), "candidate"), [_arm("A", _result(1.0, 2)), _arm("A2", _result(1.0, 3))]
    )
    assert r.status == "PASS", r.reasons
    assert "T_eff/T B - A:" in r.observed and "T_eff/T B - A2:" in r.observed


@pytest.mark.slow
@pytest.mark.parametrize("lossy", ["A", "B"])
def test_any_lossy_arm_fails_the_gate_production_included(lossy: str) -> None:
    res = {n: _result(0.85 if n == lossy else 1.0, i) for i, n in enumerate(("A", "B", "A2"))}
    r = eval_lossless(GATE, _arm("B", res["B"], "candidate"), [_arm("A", res["A"]), _arm("A2", res["A2"])])
    assert r.status == "FAIL"
    assert any(reason.startswith(f"{lossy}: not the target's distribution") for reason in r.reasons)


def test_an_unchecked_arm_or_another_alpha_is_inconclusive() -> None:
    ok = _result(1.0, 4)
    r = eval_lossless(GATE, _arm("B", None, "candidate"), [_arm("A", ok)])
    assert r.status == "INCONCLUSIVE" and "no losslessness check" in r.reasons[0]
    other = _result(1.0, 4, alpha=0.05)
    r2 = eval_lossless(GATE, _arm("B", other, "candidate"), [_arm("A", ok)])
    assert r2.status == "INCONCLUSIVE" and "not the gate's" in r2.reasons[0]


def test_a_greedy_window_is_refused_at_registration() -> None:
    card, _ = load_card("local-br1")
    data = card.model_dump(mode="json")
    data["gates"].append({"id": "lossless-t0", "kind": "lossless", "window": "t0-parity", "margin": 0.05})
    with pytest.raises(ValueError, match="lossless-t0: window t0-parity is greedy"):
        type(card).model_validate(data)


def test_the_in_process_referee_passes_the_exact_engine() -> None:
    card, _ = load_card("local-br1")
    window = card.window("primary").model_copy(
        update={"transcripts_per_class": 4, "rounds": 1, "concurrency": (1,), "classes": ("prose", "code")}
    )
    arm = InProcessLane().run_arm(card, card.arms[1], [window], boot_seed=3)
    ll = arm.windows["primary"].lossless
    assert ll is not None and ll.status == "PASS", ll.reason if ll else None
    assert ll.tokens_scored == 8 * 127 and ll.referee_tokens > ll.tokens_scored
    assert ll.referee == "in process (the target's rows)"
