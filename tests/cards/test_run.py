"""Card runs against a fake lane: bracket order, dark boots, receipts as it goes, resume, score, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gb300lane.cards import (
    find_receipts,
    latest_verdict_for,
    load_card,
    register,
    render_report,
    rescore,
    run_card,
    score,
)
from gb300lane.cards.record.receipts import read_verdict
from gb300lane.errors import CardError, ReceiptExists

from fakes import cards as fakes

DATA = Path(__file__).parents[1] / "data" / "cards"


@pytest.fixture(autouse=True)
def _results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    return tmp_path / "results"


def _registered(path: Path = DATA / "mini.yaml", **kw):
    card, p = load_card(path)
    return card, register(card, p.read_text(), **kw)


def test_run_boots_each_arm_dark_in_order_and_keeps_receipts() -> None:
    card, rec = _registered()
    lane = fakes.FakeLane(card, {"A": 1.0, "B": 1.03, "A2": 1.005})
    lines = run_card(rec, ops=lane.ops())
    assert lines == ["A: finished (attempt 1)", "B: finished (attempt 1)", "A2: finished (attempt 1)"]
    assert [c for c in lane.calls if c[0] in ("up", "stop")] == [
        ("up", "A", "local-v26"),
        ("stop", "local-v26-A"),
        ("up", "B", "local-v27"),
        ("stop", "local-v27-B"),
        ("up", "A2", "local-v26"),
        ("stop", "local-v26-A2"),
    ]
    for arm in ("A", "B", "A2"):
        adir = rec.attempt_dir(arm, 1)
        assert {p.name for p in adir.iterdir()} == {"attempt.json", "boot.json", "foreign.json", "windows"}
        assert (adir / "windows" / "primary.json").is_file()
        assert json.loads((adir / "foreign.json").read_text())["sent_by_bench"] == 2 * 2 * 2 * 6
    assert rec.verify_manifest() == []
    manifest = json.loads((rec.root / "manifest.json").read_text())
    assert "arms/B/attempt-1/windows/primary.json" in manifest["files"]
    assert manifest["recipes"]["B"]["recipe"] == "local-v27" and manifest["recipes"]["B"]["fingerprint"]


def test_interrupted_run_resumes_from_the_last_finished_arm() -> None:
    card, rec = _registered()
    lane = fakes.FakeLane(card, {"B": 1.03}, fail_window_on="B")
    with pytest.raises(KeyboardInterrupt):
        run_card(rec, ops=lane.ops())
    assert ("stop", "local-v27-B") in lane.calls  # the arm is stopped even when interrupted
    assert rec.finished_attempt("A") == 1 and rec.finished_attempt("B") is None
    lane.calls.clear()
    lines = run_card(rec, ops=lane.ops())
    assert lines[0] == "A: finished earlier (attempt 1); skipped"
    assert lines[1] == "B: finished (attempt 2)"
    assert lane.calls[0] == ("discard", "B") and ("up", "A", "local-v26") not in lane.calls
    assert rec.attempt_dir("B", 1).is_dir()  # the broken attempt stays on the record


@pytest.mark.slow
def test_score_rescore_report_and_latest_verdict() -> None:
    card, rec = _registered()
    # the controls' rounds wobble by 3%, A2 sits 2.5% above A: a fixed ±2% agree bar fails
    lane = fakes.FakeLane(
        card, {"A": 1.0, "B": 1.03, "A2": 1.025}, jitter={"A": {1: 0.0, 2: 0.03}, "A2": {1: 0.03, 2: 0.0}}
    )
    run_card(rec, ops=lane.ops())
    v1 = score(rec)
    assert v1.verdict == "FAIL"
    agree = next(r for r in v1.results if r.id == "controls-agree")
    assert agree.status == "FAIL" and "r1/r2 spread 2.9%" in agree.reasons[0]
    ratio = next(r for r in v1.results if r.id == "decode-b-over-ctrl")
    assert ratio.status == "PASS" and all(c.paired_ci and c.paired_ci.startswith("+") for c in ratio.cells)
    with pytest.raises(CardError, match="verdict 1 is already recorded"):
        score(rec)
    assert latest_verdict_for("local-v27").verdict == "FAIL"

    v2 = rescore(
        rec,
        "the agree bar was tighter than the rounds' own spread",
        ["controls-agree.bar={mode: spread, source: rounds, value: 0.02}"],
    )
    assert v2.verdict == "PASS" and v2.number == 2
    assert v2.previous.number == 1 and v2.previous.verdict == "FAIL"
    assert read_verdict(rec, 1).verdict == "FAIL"  # both on the record
    ref = latest_verdict_for("local-v27")
    assert (ref.number, ref.verdict, ref.card) == (2, "PASS", "mini")
    assert latest_verdict_for("local-v26") is None

    md = render_report(rec)
    assert md.read_text().count("**Verdict") == 2
    for fig in ("fig4-accepted-at-position.png", "fig5-marginal-acceptance.png", "b-over-ctrl-per-class.png"):
        assert (md.parent / fig).read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ReceiptExists):
        render_report(rec)
    assert rec.verify_manifest("manifest-report-2.json") == []


def test_rescore_needs_reason_and_a_real_gate() -> None:
    card, rec = _registered()
    run_card(rec, ops=fakes.FakeLane(card, {}).ops())
    score(rec)
    with pytest.raises(CardError, match="needs --reason"):
        rescore(rec, " ", ["env-equal.compare=ordered"])
    with pytest.raises(CardError, match="no gate 'nope'"):
        rescore(rec, "r", ["nope.compare=set"])
    with pytest.raises(CardError, match="GATE.KEY=VALUE"):
        rescore(rec, "r", ["compare=set"])
    with pytest.raises(CardError, match="changed gate is invalid"):
        rescore(rec, "r", ["env-equal.compare=sideways"])


def test_registration_freezes_gates(tmp_path: Path) -> None:
    card, rec = _registered()
    text = (DATA / "mini.yaml").read_text()
    again = register(card, text)  # same gates: the same receipts
    assert again.root == rec.root
    changed = tmp_path / "mini.yaml"
    changed.write_text(text.replace("value: 0.02}", "value: 0.05}"))
    card2, _ = load_card(changed)
    with pytest.raises(CardError, match="already registered with other gates"):
        register(card2, changed.read_text())
    # editing the receipts' card file after registration is refused at run and score time
    (rec.card_file).chmod(0o644)
    rec.card_file.write_text(changed.read_text())
    with pytest.raises(CardError, match="changed after registration"):
        run_card(rec, ops=fakes.FakeLane(card, {}).ops())
    fresh = register(card2, changed.read_text(), fresh=True)
    assert fresh.root.name.endswith("-mini-run2")
    assert find_receipts("mini").root == fresh.root


def test_score_refuses_unfinished_arms_and_transcribed_receipts() -> None:
    card, rec = _registered()
    with pytest.raises(CardError, match="arms A, B, A2 have not finished"):
        score(rec)
    from gb300lane.cards.present.writeup import BR1_DIR, writeup_receipts

    with pytest.raises(CardError, match="never written to"):
        score(writeup_receipts(BR1_DIR))
    with pytest.raises(CardError, match="cannot be run"):
        run_card(writeup_receipts(BR1_DIR), ops=fakes.FakeLane(card, {}).ops())


def test_parity_gate_counts_flips_against_the_controls_floor(tmp_path: Path) -> None:
    text = (
        (DATA / "mini.yaml")
        .read_text()
        .replace("  - id: hash-hit\n", "  - id: parity\n    kind: parity\n    window: primary\n  - id: hash-hit\n")
    )
    path = tmp_path / "mini.yaml"
    path.write_text(text)
    card, rec = _registered(path)
    run_card(rec, ops=fakes.FakeLane(card, {}, flips={"B": {"prose-001"}}).ops())
    v = score(rec)
    parity = next(r for r in v.results if r.id == "parity")
    assert parity.status == "FAIL" and parity.observed == "4 of 48 outputs differ (B vs A)"
    assert parity.noise_floor == "A vs A2 0 of 48 flips"
    # a re-score that tolerates the four flips passes, with verdict 1 kept
    v2 = rescore(rec, "tolerate the four flips of one transcript", ["parity.max_extra_flips=4"])
    assert next(r for r in v2.results if r.id == "parity").status == "PASS"
    # as a diagnostic the same flips are printed but never decide the verdict
    assert v.verdict == "FAIL"
    v3 = rescore(
        rec,
        "greedy outputs depend on the boot: parity as a diagnostic",
        ["parity.max_extra_flips=0", "parity.decides=false"],
    )
    p3 = next(r for r in v3.results if r.id == "parity")
    assert p3.status == "FAIL" and not p3.decides and v3.verdict == "PASS"


def _missed_selftest(seen):
    from gb300lane.bench.mock import MockTiming
    from gb300lane.bench.selftest import run_selftest

    def selftest(levels):
        # A real self-test run judged against a bound no client meets (a zero ITL sigma).
        seen.append(levels)
        result = run_selftest(((1, MockTiming(ttft_s=0.005, itl_s=0.001, events=8), 2),), agreement=False)
        level = result.levels[0].model_copy(update={"bound_itl_sigma_ms": 0.0, "passed": False})
        return result.model_copy(update={"levels": [level], "passed": False})

    return selftest


@pytest.mark.slow
def test_a_card_on_vllm_lanes_refuses_to_run_when_the_clients_self_test_misses_its_bounds(tmp_path):
    """On a real vLLM lane the card's figures are the client's timing: missed twice, no arm is booted."""
    text = (DATA / "micro.yaml").read_text().replace("local-v26", "v26").replace("local-v27", "v27")
    (tmp_path / "micro.yaml").write_text(text)
    card, p = load_card(tmp_path / "micro.yaml")
    rec = register(card, p.read_text())
    lane = fakes.FakeLane(card, {}).ops()
    seen: list = []
    lane.selftest = _missed_selftest(seen)
    with pytest.raises(CardError, match="self-test missed its registered bounds 2 times"):
        run_card(rec, ops=lane)
    assert seen == [[1, 2], [1, 2]]
    recorded = json.loads((rec.root / "selftest-1.json").read_text())
    assert recorded["passed"] is False and len(recorded["attempts"]) == 2
    assert rec.finished_attempt("A") is None and rec.next_attempt("A") == 1  # nothing was booted


@pytest.mark.slow
def test_an_embedded_card_records_a_missed_self_test_without_refusing():
    card, rec = _registered(DATA / "micro.yaml")
    lane = fakes.FakeLane(card, {}).ops()
    lane.selftest = _missed_selftest([])
    lines = run_card(rec, ops=lane)
    assert "missed its registered bounds" in lines[0] and "Not binding here" in lines[0]
    assert lines[1:] == ["A: finished (attempt 1)", "B: finished (attempt 1)", "A2: finished (attempt 1)"]
    assert json.loads((rec.root / "selftest-1.json").read_text())["passed"] is False


def test_a_cell_invalid_after_every_try_is_left_out_and_the_verdict_says_so() -> None:
    card, rec = _registered(DATA / "tested.yaml")
    w = card.window(card.primary_window)
    cls, conc = w.classes[0], w.concurrency[-1]
    lane = fakes.FakeLane(card, {"B": 1.03}, noise=0.02, invalid={"B": {(cls, conc, 2)}})
    said: list[str] = []
    run_card(rec, ops=lane.ops(), progress=said.append)
    assert any(f"cell {cls} C{conc} r2 was invalid (delivered concurrency" in s for s in said), said
    assert any(
        f"cell {cls} C{conc} r2 is still invalid after" in s and "the verdict leaves it out" in s for s in said
    ), said
    # the receipt keeps the discarded try beside the cell
    window = json.loads((rec.attempt_dir("B", 1) / "windows" / "primary.json").read_text())
    assert [(t["cell"]["cls"], t["cell"]["concurrency"], t["cell"]["round"]) for t in window["retried"]] == [
        (cls, conc, 2)
    ]
    v = score(rec)
    (note,) = [n for n in v.notes if "left out as invalid" in n]
    assert note.startswith("arm B, window primary: 1 cell(s)") and f"{cls} C{conc} r2: delivered" in note
    clean_rec = _registered(
        DATA / "tested.yaml", run="clean", aside="the same bracket with no invalid cell, to compare"
    )[1]
    run_card(clean_rec, ops=fakes.FakeLane(card, {"B": 1.03}, noise=0.02).ops())
    clean = score(clean_rec)
    assert not any("left out as invalid" in n for n in clean.notes)
    # the cell is gone from B's evidence: the tests over it rest on fewer requests
    tested = {r.id: r for r in v.results if r.tests and r.tests[0].comparison.startswith("B /")}
    assert tested
    for gid, r in tested.items():
        before = {
            (t.cls, t.concurrency): t.requests_per_arm for t in next(x for x in clean.results if x.id == gid).tests
        }
        after = {(t.cls, t.concurrency): t.requests_per_arm for t in r.tests}
        assert sum(after.values()) < sum(before.values()), gid
