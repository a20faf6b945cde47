"""Smoke gates against a real local SSE server: parity against references and itself, bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gb300lane.bench import load_transcripts
from gb300lane.bench.smoke import count_flips, run_smoke
from gb300lane.bench.store import load_result, save_result
from gb300lane.bench.window import run_window
from gb300lane.errors import BenchError
from gb300lane.recipes import load_recipe
from gb300lane.recipes.schema import SmokeGate, WindowSpec

from fakes import lane as fake_lane

# One stream: a parity window compares texts, and a single stream holds its load on any host (at C2 a busy
# host's pause between one stream's requests reads as delivered concurrency below 2, and the cell is invalid).
PARITY = WindowSpec(
    name="t0",
    classes=["prose", "code"],
    transcripts_per_class=3,
    rounds=1,
    concurrency=[1],
    temperature=0.0,
    forced_tokens=8,
)
SEEDED = WindowSpec(
    name="t1",
    classes=["prose", "tool_json"],
    transcripts_per_class=3,
    rounds=2,
    concurrency=[1],
    temperature=1.0,
    top_p=1.0,
    seed_base=1000,
    forced_tokens=9,
)


@pytest.fixture
def lane():
    server = fake_lane.FakeLane().start()
    server.behaviour.tokens_per_step = 3
    server.behaviour.draft_k = 5  # what v27's schedule gives at batch sizes 1-4
    yield server
    server.stop()


def _recipe(*gates: SmokeGate):
    base = load_recipe("v27")
    return base.model_copy(update={"smoke": base.smoke.model_copy(update={"gates": tuple(gates)})})


def _parity(max_flips: int = 0) -> SmokeGate:
    return SmokeGate(name="parity-t0", kind="parity", window=PARITY, max_flips=max_flips)


def _bounds(lo: float | None = 2.0, hi: float | None = 6.0, tok_s: float | None = None) -> SmokeGate:
    return SmokeGate(
        name="bounds-t1",
        kind="bounds",
        window=SEEDED,
        tokens_per_step={"min": lo, "max": hi},
        decode_tok_s_min=tok_s,
    )


def test_a_lane_drafting_lengths_the_schedule_never_gives_fails_the_bounds_gate(lane):
    lane.behaviour.draft_k = 4
    report = run_smoke(_recipe(_bounds()), lane.url, model="fake-model")
    gate = report.gates[0]
    assert gate.status == "FAIL" and "drafts of length 4, which the schedule never gives" in gate.reason
    assert gate.details["schedule"]["status"] == "fail"


def test_count_flips():
    assert count_flips({"a": "x", "b": "y", "c": "z"}, {"a": "x", "b": "Y", "d": "w"}) == (1, 2, ["b"])


@pytest.mark.slow
def test_all_gates_pass_without_reference(lane):
    report = run_smoke(_recipe(_parity(), _bounds(tok_s=1.0)), lane.url, model="fake-model")
    assert report.passed, [g.reason for g in report.gates]
    parity, bounds = report.gates
    assert parity.status == "PASS" and "no control reference" in parity.reason
    assert parity.details["flips"] == 0 and parity.details["compared"] == 6  # 2 classes x 3 transcripts
    assert len(parity.results) == 2  # the run and its repeat, both kept
    assert bounds.status == "PASS" and bounds.details["tokens_per_step"] == pytest.approx(3.0)
    saved = json.loads(Path(report.report_path).read_text())
    assert saved["passed"] is True and saved["schema_version"] == 1


@pytest.mark.slow
def test_parity_against_a_reference_counts_flips(lane, tmp_path):
    ref_path = tmp_path / "control.json"
    save_result(run_window(lane.url, PARITY, model="fake-model"), ref_path)
    lane.behaviour.perturb_greedy = {t.prompt for t in load_transcripts("code")[:2]}
    report = run_smoke(_recipe(_parity(max_flips=1)), lane.url, model="fake-model", reference=ref_path)
    (gate,) = report.gates
    # two perturbed transcripts: two flips, above max_flips 1
    assert gate.status == "FAIL" and gate.details.get("flips") == 2 and "above the bar 1" in gate.reason, gate.reason
    assert report.passed is False
    report = run_smoke(_recipe(_parity(max_flips=2)), lane.url, model="fake-model", reference=ref_path)
    assert report.gates[0].status == "PASS"


@pytest.mark.slow
def test_parity_floor_from_two_controls(lane, tmp_path):
    a = tmp_path / "a.json"
    a2 = tmp_path / "a2.json"
    save_result(run_window(lane.url, PARITY, model="fake-model"), a)
    lane.behaviour.perturb_greedy = {t.prompt for t in load_transcripts("prose")[:2]}
    save_result(run_window(lane.url, PARITY, model="fake-model"), a2)  # A2 already differs from A by 2
    report = run_smoke(_recipe(_parity(max_flips=0)), lane.url, model="fake-model", reference=[a, a2])
    (gate,) = report.gates
    assert "floor" in gate.details, gate.reason  # both controls' windows valid
    assert gate.details["floor"] == 2 and gate.details["bar"] == 2 and gate.details["flips"] == 2
    assert gate.status == "PASS" and "A-vs-A2 floor 2" in gate.reason


def test_parity_reference_of_another_window_is_inconclusive(lane, tmp_path):
    ref = tmp_path / "other.json"
    save_result(run_window(lane.url, PARITY.model_copy(update={"forced_tokens": 4}), model="fake-model"), ref)
    report = run_smoke(_recipe(_parity()), lane.url, model="fake-model", reference=ref)
    assert report.gates[0].status == "INCONCLUSIVE" and "forced_tokens" in report.gates[0].reason
    assert not report.passed


@pytest.mark.slow
def test_bounds_fail_on_tokens_per_step_and_rate(lane):
    report = run_smoke(_recipe(_bounds(lo=3.5, hi=6.0)), lane.url, model="fake-model")
    assert report.gates[0].status == "FAIL" and "tokens/step 3.000 (bounds 3.5 .. 6.0)" in report.gates[0].reason
    report = run_smoke(_recipe(_bounds(tok_s=1e12)), lane.url, model="fake-model")
    assert report.gates[0].status == "FAIL" and "lowest decode" in report.gates[0].reason


@pytest.mark.slow
def test_bounds_fail_on_errors_and_inconclusive_without_counters(lane):
    lane.behaviour.fail_requests = {2: 503}
    report = run_smoke(_recipe(_bounds()), lane.url, model="fake-model")
    assert report.gates[0].status == "FAIL" and "HTTP 503" in report.gates[0].reason
    lane.behaviour.fail_requests = {}
    lane.behaviour.metrics = "no_spec"
    report = run_smoke(_recipe(_bounds()), lane.url, model="fake-model")
    assert report.gates[0].status == "INCONCLUSIVE" and "no spec-decode counters" in report.gates[0].reason


def test_recipe_without_gates_does_not_pass(lane):
    assert run_smoke(_recipe(), lane.url, model="fake-model").passed is False


def test_results_are_never_overwritten(lane, tmp_path):
    path = tmp_path / "w.json"
    result = run_window(
        lane.url, PARITY.model_copy(update={"classes": ("prose",), "concurrency": (1,)}), model="fake-model"
    )
    save_result(result, path)
    assert load_result(path) == result
    with pytest.raises(BenchError, match="never overwritten"):
        save_result(result, path)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(BenchError, match="not a window result"):
        load_result(tmp_path / "bad.json")
