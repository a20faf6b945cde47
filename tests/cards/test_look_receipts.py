"""Cards decided by pre-registered tests, against a fake lane: seeds per arm, gates, diagnostics, looks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gb300lane.cards import load_card, register, run_card, score
from gb300lane.cards.record.look_receipts import read_look
from gb300lane.errors import CardError

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


def _registered(name: str = "tested.yaml", text: str | None = None, tmp: Path | None = None):
    path = DATA / name
    if text is not None:
        assert tmp is not None
        path = tmp / name
        path.write_text(text)
    card, p = load_card(path)
    return card, register(card, p.read_text())


def _gate(v, gate_id: str):
    return next(r for r in v.results if r.id == gate_id)


def test_each_arm_sends_its_own_seed_base_and_records_it() -> None:
    card, rec = _registered()
    lane = fakes.FakeLane(card, {})
    run_card(rec, ops=lane.ops())
    seeds = {arm: w.seed_base for arm, w in lane.windows}
    assert len(set(seeds.values())) == 3 and 1000 not in seeds.values()
    for arm in ("A", "B", "A2"):
        got = json.loads((rec.attempt_dir(arm, 1) / "windows" / "primary.json").read_text())
        assert got["window"]["seed_base"] == seeds[arm]


def test_shared_seeds_send_the_same_requests_to_every_arm(tmp_path: Path) -> None:
    text = (DATA / "tested.yaml").read_text() + "seeds: shared\n"
    card, rec = _registered(text=text, tmp=tmp_path)
    lane = fakes.FakeLane(card, {})
    run_card(rec, ops=lane.ops())
    assert {w.seed_base for _, w in lane.windows} == {1000}


def test_a_real_effect_passes_with_its_estimate_interval_and_n() -> None:
    card, rec = _registered()
    run_card(rec, ops=fakes.FakeLane(card, {"B": 1.03}, tps={"B": 1.03}, noise=0.03, n_transcripts=20).ops())
    v = score(rec)
    tps = _gate(v, "tokens-per-step")
    assert tps.status == "PASS" and len(tps.tests) == 1
    t = tps.tests[0]
    # 40 units: 2 classes x 20 transcripts, each averaged over C1, C4 and two rounds (160 requests per arm)
    assert (t.test, t.margin, t.alpha, t.n, t.requests_per_arm) == ("superiority", 0.0, 0.025, 40, 160)
    assert 0.0 < t.low < t.estimate < t.high and t.estimate == pytest.approx(0.03, abs=0.01)
    assert t.comparison == "B / mean(A, A2)" and t.level == pytest.approx(0.95)
    assert "shown" in tps.reasons[0] and "superiority" in tps.bar
    assert v.verdict == "PASS"


def test_no_difference_is_inconclusive_never_pass() -> None:
    card, rec = _registered()
    run_card(rec, ops=fakes.FakeLane(card, {}, noise=0.03, n_transcripts=20).ops())
    v = score(rec)
    assert _gate(v, "tokens-per-step").status == "INCONCLUSIVE"
    assert v.verdict == "INCONCLUSIVE"


def test_exact_tie_is_inconclusive() -> None:
    card, rec = _registered()
    run_card(rec, ops=fakes.FakeLane(card, {}).ops())  # every arm reports the very same numbers
    v = score(rec)
    assert _gate(v, "tokens-per-step").status == "INCONCLUSIVE"
    assert "tie" in _gate(v, "tokens-per-step").reasons[0]


def test_a_slower_candidate_fails_the_non_inferiority_gate() -> None:
    card, rec = _registered()
    run_card(rec, ops=fakes.FakeLane(card, {"B": 0.9}, tps={"B": 1.03}, noise=0.02, n_transcripts=20).ops())
    v = score(rec)
    assert _gate(v, "decode-no-loss").status == "FAIL" and v.verdict == "FAIL"


def test_a_diagnostic_is_reported_but_never_decides() -> None:
    card, rec = _registered()
    # prose is 6% slower on B: the per-class diagnostic sees it, the aggregate gate still passes
    lane = fakes.FakeLane(card, {}, tps={"B": 1.03}, noise=0.01, n_transcripts=20)
    orig = lane.run_window

    def run_window(endpoint, window, **kw):
        res = orig(endpoint, window, **kw)
        if lane.windows[-1][0] != "B":
            return res
        recs = [
            r.model_copy(
                update={"decode_tok_s": r.decode_tok_s * (0.93 if r.cls == "prose" and r.concurrency == 1 else 1.01)}
            )
            for r in res.records
        ]
        return res.model_copy(update={"records": recs})

    lane.run_window = run_window
    run_card(rec, ops=lane.ops())
    v = score(rec)
    diag = _gate(v, "decode-per-class")
    assert diag.status == "FAIL" and not diag.decides and len(diag.tests) == 4
    assert _gate(v, "decode-no-loss").status == "PASS"
    assert v.verdict == "PASS"


def test_controls_that_disagree_make_the_card_inconclusive_not_fail() -> None:
    card, rec = _registered()
    run_card(
        rec, ops=fakes.FakeLane(card, {"A2": 1.08, "B": 1.04}, tps={"B": 1.03}, noise=0.01, n_transcripts=20).ops()
    )
    v = score(rec)
    agree = _gate(v, "controls-agree")
    assert agree.status == "INCONCLUSIVE" and agree.tests[0].decision == "FAIL"
    assert "cannot separate B from the hour" in agree.reasons[0]
    assert v.verdict == "INCONCLUSIVE"


def test_candidate_never_widens_its_own_bar(tmp_path: Path) -> None:
    # the write-up's point-ratio gate with a bar from the rounds' spread: B 15% slower, its own rounds 30% apart
    text = (
        (DATA / "mini.yaml")
        .read_text()
        .replace(
            "    bar: {mode: fixed, value: 0.02}\n  - id: controls-agree",
            "    bar: {mode: spread, source: rounds, value: 0.02}\n  - id: controls-agree",
            1,
        )
    )
    card, rec = _registered("mini.yaml", text=text, tmp=tmp_path)
    run_card(rec, ops=fakes.FakeLane(card, {"B": 0.85}, jitter={"B": {1: 0.0, 2: 0.3}}).ops())
    ratio = _gate(score(rec), "decode-b-over-ctrl")
    assert ratio.status == "FAIL" and all(c.rounds_spread in (None, 0.0) for c in ratio.cells)


def test_sequential_card_stops_at_the_first_clear_look_and_records_it() -> None:
    card, rec = _registered("sequential.yaml")
    lane = fakes.FakeLane(card, {"B": 1.04}, tps={"B": 1.06}, noise=0.02, n_transcripts=20)
    lines = run_card(rec, ops=lane.ops())
    assert lines[3].startswith("look 1 of 4: PASS") and lines[3].endswith("-> stop")
    assert len(lines) == 4 and rec.look_numbers() == [1]
    look = read_look(rec, 1)
    assert look.requests_per_arm == 80 and look.action == "stop"
    tps = next(r for r in look.results if r.id == "tokens-per-step").tests[0]
    assert tps.look == 1 and tps.looks == 4 and tps.nominal_alpha < 0.025
    v = score(rec)
    assert (v.verdict, v.look, v.looks) == ("PASS", 1, 4)
    # each arm of stage 1 ran a quarter of the rounds
    assert {w.rounds for _, w in lane.windows} == {1}


def test_sequential_card_resumes_the_same_design_and_runs_to_the_last_look() -> None:
    card, rec = _registered("sequential.yaml")
    lane = fakes.FakeLane(card, {}, noise=0.02, n_transcripts=20)
    broken = fakes.FakeLane(card, {}, noise=0.02, n_transcripts=20)
    calls = {"n": 0}
    orig = broken.run_window

    def interrupt_stage_two_b(endpoint, window, **kw):
        calls["n"] += 1
        if calls["n"] == 5:  # stage 2, arm B
            raise KeyboardInterrupt("operator")
        return orig(endpoint, window, **kw)

    broken.run_window = interrupt_stage_two_b
    with pytest.raises(KeyboardInterrupt):
        run_card(rec, ops=broken.ops())
    assert rec.look_numbers() == [1] and read_look(rec, 1).action == "continue"
    with pytest.raises(CardError, match="has not stopped yet"):
        score(rec)
    lines = run_card(rec, ops=lane.ops())
    assert lines[0] == "A (stage 1): finished earlier (attempt 1); skipped"
    assert "B (stage 2): finished (attempt 2)" in lines
    assert rec.look_numbers() == [1, 2, 3, 4] and read_look(rec, 4).action == "final"
    v = score(rec)
    assert (v.verdict, v.look) == ("INCONCLUSIVE", 4)
    # stage seeds differ from each other and between arms
    assert len({w.seed_base for _, w in lane.windows}) == len(lane.windows)


def test_sequential_design_must_split_the_rounds_evenly(tmp_path: Path) -> None:
    text = (DATA / "sequential.yaml").read_text().replace("looks: 4", "looks: 3")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CardError, match="must divide the primary window's rounds"):
        load_card(path)
