"""`card plan` of a card with a registered extension: its own look at its share of alpha, the whole plan's power
by the last look (checked by simulating the plan's z path), and the time plan's rows for it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from gb300lane.cards import load_card
from gb300lane.cards.decide.data import CellData, WindowData
from gb300lane.cards.decide.sequential import boundaries, nominal_level
from gb300lane.cards.schema import parse_card
from gb300lane.instrument.plan import Noise, Sample, plan_card
from gb300lane.instrument.timeplan import time_plan

DATA = Path(__file__).parents[1] / "data" / "cards"


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


def _noise(card: object, sd: float, seed: int = 0) -> Noise:
    """Control requests with a known spread around each transcript's level: two arms x the window's rounds."""
    rng = np.random.default_rng(seed)
    w = card.window(card.primary_window)  # type: ignore[attr-defined]
    out = []
    for cls in w.classes:
        for t in range(40):
            level = 3.0 * (1 + 0.1 * rng.standard_normal())
            for arm in ("A", "A2"):
                for r in range(1, w.rounds + 1):
                    x = level * (1 + sd * rng.standard_normal())
                    for conc in w.concurrency:
                        out.append(
                            Sample(
                                source=arm,
                                cls=cls,
                                concurrency=conc,
                                transcript=f"{cls}-{t}",
                                round=r,
                                tokens_per_step=x,
                                decode_tok_s=100 * x,
                            )
                        )
    return Noise(samples=out)


def _without_extension(text: str) -> str:
    head, _, _ = text.partition("design:")
    return head + "design:\n  kind: fixed\n"


@pytest.mark.slow
def test_the_card_s_own_look_takes_its_share_of_alpha_and_the_plan_s_power_is_by_its_last_look() -> None:
    card, path = load_card(DATA / "extension.yaml")
    noise = _noise(card, 0.08)
    p = plan_card(card, noise, "synthetic")
    e = p.extension
    assert e is not None and (e.looks, e.design_looks, e.spending) == (4, 1, "pocock")
    tps = next(g for g in p.gates if g.gate == "tokens-per-step")
    b = boundaries(0.025, 4, "pocock")
    assert e.levels["tokens-per-step"] == pytest.approx(
        tuple(nominal_level(0.025, k, 4, "pocock") for k in range(1, 5))
    )
    # as written: one look, one boot, tested at the first boundary of the four-look plan
    assert tps.power == pytest.approx(float(norm.cdf(tps.effect / tps.se - b[0])), abs=1e-6)
    fixed = plan_card(parse_card(_without_extension(path.read_text()), "fixed.yaml"), noise, "synthetic")
    tps_fixed = next(g for g in fixed.gates if g.gate == "tokens-per-step")
    assert fixed.extension is None and tps_fixed.power > tps.power  # all of alpha at one look
    assert tps_fixed.power == pytest.approx(float(norm.cdf(tps.effect / tps.se - norm.isf(0.025))), abs=1e-6)
    # the whole plan: the z path of four equal stages, simulated, crosses as often as the plan says
    rng = np.random.default_rng(7)
    drift = tps.effect / tps.se  # E[z] after one stage
    steps = rng.standard_normal((40_000, 4)) + drift
    z = np.cumsum(steps, axis=1) / np.sqrt(np.arange(1, 5))
    simulated = float(np.mean((z >= np.array(b)).any(axis=1)))
    assert tps.power_extended == pytest.approx(simulated, abs=4 * math.sqrt(simulated * (1 - simulated) / 40_000))
    assert tps.power < tps.power_extended < 1
    assert e.requests_per_arm == 4 * e.stage_requests_per_arm == 4 * p.requests_per_arm
    assert (
        e.expected_requests_per_arm is not None
        and p.requests_per_arm < e.expected_requests_per_arm < e.requests_per_arm
    )
    assert e.power == pytest.approx(math.prod(g.power_extended for g in p.gates if g.decides), rel=1e-9)
    # sized for the target: the plan's maximum reaches 90% by its last look
    assert e.requests_per_arm_for_target is not None
    bigger = plan_card(
        card.model_copy(
            update={
                "windows": tuple(
                    w.model_copy(
                        update={
                            "transcripts_per_class": math.ceil(
                                w.transcripts_per_class * e.requests_per_arm_for_target / e.requests_per_arm
                            )
                        }
                    )
                    for w in card.windows
                )
            }
        ),
        noise,
        "synthetic",
    )
    assert bigger.extension is not None and bigger.extension.power >= 0.89


@pytest.mark.slow
def test_a_registered_boot_sd_shrinks_with_the_plan_s_boots_not_only_its_requests() -> None:
    card, _ = load_card(DATA / "extension.yaml")
    noise = _noise(card, 0.08)
    gates = tuple(g.model_copy(update={"boot_sd": 0.01}) if g.id == "tokens-per-step" else g for g in card.gates)
    p = plan_card(card.model_copy(update={"gates": gates}), noise, "synthetic")
    tps = next(g for g in p.gates if g.gate == "tokens-per-step")
    # as written: the boots' share (1 + 1/2) 1% ^ 2 on one boot; the plan's last look: on four
    within = tps.se**2 - 1.5 * 0.01**2
    full_se = math.sqrt(within / 4 + 1.5 * 0.01**2 / 4)
    b = boundaries(0.025, 4, "pocock")
    rng = np.random.default_rng(3)
    stage_sd = full_se * 2  # each stage's increment of the score, in se units of one stage
    steps = rng.standard_normal((40_000, 4)) + tps.effect / stage_sd
    z = np.cumsum(steps, axis=1) / np.sqrt(np.arange(1, 5))
    simulated = float(np.mean((z >= np.array(b)).any(axis=1)))
    assert tps.power_extended == pytest.approx(simulated, abs=0.01)


@pytest.mark.slow
def test_the_time_plan_costs_the_registered_plan_and_the_card_as_written_extended() -> None:
    card, _ = load_card(DATA / "extension.yaml")
    p = plan_card(card, _noise(card, 0.08), "synthetic")
    w = card.window("primary")
    cells = tuple(CellData(cls=c, concurrency=n, round=1, decode_tok_s=100.0) for c in w.classes for n in w.concurrency)
    tp = time_plan(card, p, [("ctrl", WindowData(window=w.name, clock="modelled", cells=cells))])
    labels = [d.design for d in tp.designs]
    assert labels[0] == "fixed" and labels[1].startswith("registered plan, 1 + 3 looks")
    written = tp.designs[-1]
    assert written.design.startswith("as written, extended") and written.looks == 4
    assert written.requests_per_arm == 4 * p.requests_per_arm
    assert written.expected_looks == pytest.approx(p.extension.expected_looks, abs=0.01)
    (boot,) = tp.boots
    window_s = p.requests_per_arm * w.forced_tokens / 100.0
    assert written.worst_s["modelled"] == pytest.approx(3 * (4 * boot.miss_s + 4 * window_s), abs=0.2)


@pytest.mark.slow
def test_register_warns_from_the_registered_plan_s_power_not_the_design_s_own_look() -> None:
    from gb300lane.instrument.plan import registration_warnings

    card, _ = load_card(DATA / "extension.yaml")
    p = plan_card(card, _noise(card, 0.08), "synthetic")
    assert p.extension is not None and p.extension.power < 0.9
    (line,) = [w for w in registration_warnings(card, p) if w.startswith("underpowered")]
    assert "by look 4 of the registered plan" in line and f"{p.extension.power:.1%}" in line
    assert f"{p.power:.1%} at the design's own" in line
    # a plan whose last look reaches the target says nothing, however weak the design's own look alone is
    quiet = p.model_copy(update={"extension": p.extension.model_copy(update={"power": 0.95})})
    assert not [w for w in registration_warnings(card, quiet) if w.startswith("underpowered")]
