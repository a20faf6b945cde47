"""`card plan`'s wall-clock per design: boots from the lane's reports and the engine's model, requests from
measured throughput per cell."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gb300lane.cards import load_card
from gb300lane.cards.decide.data import CellData, WindowData
from gb300lane.cards.decide.results import CardPlan
from gb300lane.engine import modelled_boot as eb
from gb300lane.instrument.timeplan import time_plan

DATA = Path(__file__).parents[1] / "data" / "cards"


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


def _plan(card_name: str, n_target: int) -> tuple[object, CardPlan]:
    card, _ = load_card(DATA / card_name)
    w = card.window(card.primary_window)
    n0 = len(w.classes) * w.transcripts_per_class * len(w.concurrency) * w.rounds
    return card, CardPlan(
        card=card.name,
        source="test",
        source_requests=0,
        requests_per_arm=n0,
        target_power=0.9,
        design="fixed",
        gates=(),
        power=0.5,
        requests_per_arm_for_target=n_target,
    )


def _windows(card: object, rate: float) -> list[tuple[str, WindowData]]:
    w = card.window(card.primary_window)  # type: ignore[attr-defined]
    cells = tuple(CellData(cls=c, concurrency=n, round=1, decode_tok_s=rate) for c in w.classes for n in w.concurrency)
    return [("ctrl", WindowData(window=w.name, clock="modelled", cells=cells))]


@pytest.mark.slow
def test_each_design_is_timed_from_the_modelled_boot_and_the_cells_throughput() -> None:
    card, plan = _plan("tested.yaml", 96)
    w = card.window("primary")
    tp = time_plan(card, plan, _windows(card, rate=100.0))
    (boot,) = tp.boots  # no boot on record here: the embedded engine's model only
    capture = eb.CAPTURE_S_PER_SIZE * 11  # local-v26 captures 11 sizes
    assert boot.clock == "modelled" and boot.hit_s == pytest.approx(
        eb.WEIGHTS_S + eb.COMPILE_HIT_S + eb.PROFILE_HIT_S + eb.INIT_REST_S + capture, abs=0.1
    )
    fixed, seq4, seq2 = tp.designs
    window_s = plan.requests_per_arm * w.forced_tokens / 100.0
    req_s = window_s * 96 / plan.requests_per_arm
    assert fixed.request_s == pytest.approx(req_s, abs=0.01)
    assert fixed.expected_s["modelled"] == pytest.approx(3 * (boot.hit_s + req_s), abs=0.1)
    assert fixed.worst_s["modelled"] == pytest.approx(3 * (boot.miss_s + req_s), abs=0.1)
    # sequential: a larger maximum, a smaller expected size, every look a boot of every arm
    assert seq4.looks == 4 and seq2.looks == 2 and seq4.requests_per_arm > seq2.requests_per_arm > 96
    assert seq4.expected_requests_per_arm < 96 and 1 < seq4.expected_looks < 4
    assert seq4.worst_s["modelled"] == pytest.approx(
        3 * (4 * boot.miss_s + window_s * seq4.requests_per_arm / plan.requests_per_arm), abs=0.1
    )
    # boots of 500 s against seconds of requests: the fixed design is the cheapest
    assert tp.cheapest == {"modelled": "fixed"}


@pytest.mark.slow
def test_when_requests_dominate_the_sequential_design_is_the_cheapest() -> None:
    card, plan = _plan("tested.yaml", 4000)
    tp = time_plan(card, plan, _windows(card, rate=0.5))  # half a token a second: hours of requests per arm
    fixed, seq4, _ = tp.designs
    assert seq4.expected_s["modelled"] < fixed.expected_s["modelled"]
    assert tp.cheapest["modelled"].startswith("group_sequential")


@pytest.mark.slow
def test_no_throughput_for_a_cell_leaves_the_times_out_and_says_why() -> None:
    card, plan = _plan("tested.yaml", 96)
    tp = time_plan(card, plan, [])
    assert all(d.request_s is None and d.expected_s["modelled"] is None for d in tp.designs)
    assert "no measured throughput" in tp.note and not tp.cheapest
    assert math.isfinite(tp.designs[0].expected_looks)


def test_with_no_miss_on_record_the_worst_case_books_the_median_boot_and_says_so() -> None:
    from gb300lane.cards import register, run_card
    from gb300lane.instrument.timeplan import lane_boots

    from fakes import cards as fakes

    card, p = load_card(DATA / "tested.yaml")
    run_card(register(card, p.read_text()), ops=fakes.FakeLane(card, {}).ops())
    boots = lane_boots(card)
    assert boots is not None and boots.boots == 3 and boots.misses == 0
    assert boots.miss_s == boots.hit_s == 1.0
