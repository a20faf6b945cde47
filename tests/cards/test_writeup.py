"""The write-up's BR1 and BR2: figures re-derived from the transcribed receipts, verdicts computed."""

from __future__ import annotations

import json

from gb300lane.cards.decide.gates import evaluate
from gb300lane.cards.decide.verdict import apply_changes
from gb300lane.cards.present.writeup import BR1_DIR, BR2_DIR, reproduce_br1, reproduce_br2, writeup_receipts
from gb300lane.cards.record.inputs import verdict_over


def _text(lines: list[str]) -> str:
    return "\n".join(lines)


def test_br1_figures_and_verdicts() -> None:
    out = _text(reproduce_br1())  # how long it takes is benchmarks/reproduce.py's to measure
    assert "3.204 / 3.262 / 3.189 -> B / mean(A, A2) = 1.020 (matches)" in out
    assert "agree at C1 within 0.1%–3.0%" in out
    assert "tool_json 347.6 vs 329.9 tok/s, +5.4% (matches)" in out
    assert "1.037" in out and "1.082" in out and "0.996" in out
    assert "verdict 1: FAIL" in out and "verdict 2: PASS" in out
    assert "container environments differ in order only (compared as ordered lists)" in out
    assert "shell_ops C1: controls differ by 3.0% > bar ±2.0%" in out
    assert "points at verdict 1 (FAIL" in out


def test_br1_what_the_new_design_says_of_the_same_data() -> None:
    out = _text(reproduce_br1())
    new = out.split("What the new design says of the same data", 1)[1]
    # the re-score's bar is the widest A vs A2 gap at C1, the statistic it judges: one step below it, FAIL again
    assert "stated noise floor 3.0%, which is the widest A vs A2 gap at C1 (shell_ops 3.0%)" in new
    assert "(at 2.9% the re-score is FAIL again)" in new
    # one control pair is one degree of freedom: 1.020 is not shown at 2.5%
    assert "t = 5.0 on 1 degree of freedom, one-sided p = 0.062 > 0.025: not shown" in new
    assert "new design's verdict on the same data: INCONCLUSIVE" in new
    # and the write-up's own numbers come first, unchanged
    first = out.split("What the new design says", 1)[0]
    assert first.index("verdict 1: FAIL") < first.index("verdict 2: PASS")


def test_br1_fail_comes_from_the_instrument_not_the_data() -> None:
    rec = writeup_receipts(BR1_DIR)
    card = rec.card()
    v1 = verdict_over(rec, card, card.gates)
    failed = {r.id for r in v1.results if r.status == "FAIL"}
    assert failed == {"env-equal", "controls-agree-c1"}
    # the env lists hold one set in three orders: only the ordered compare fails
    arms = rec.load_arms(card)
    envs = [a.boot.env for a in arms]
    assert len({tuple(e) for e in envs}) == 3 and len({frozenset(e) for e in envs}) == 1
    # each re-score change alone clears exactly its own gate
    for change, gate in (
        ("env-equal.compare=set", "env-equal"),
        ("controls-agree-c1.bar={mode: spread, source: rounds, value: 0.02}", "controls-agree-c1"),
    ):
        gates, _ = apply_changes(card, card.gates, [change])
        res = {r.id: r.status for r in evaluate(card, gates, arms, rec.noise_floor_stated())}
        assert res[gate] == "PASS"
        assert sorted(k for k, v in res.items() if v == "FAIL") == sorted(failed - {gate})


def test_br1_rescore_is_the_shipped_one() -> None:
    rec = writeup_receipts(BR1_DIR)
    rs = json.loads((rec.root / "rescore.json").read_text())
    assert rs["transcribed"] is True
    assert rs["changes"] == [
        "env-equal.compare=set",
        "controls-agree-c1.bar={mode: spread, source: rounds, value: 0.02}",
    ]


def test_br2_figures_and_verdict() -> None:
    out = _text(reproduce_br2())
    assert "= 2.85 (matches)" in out and "= 2.60 (matches)" in out
    assert "positions 6..9 contribute 0.130 tokens (matches)" in out
    assert "0.813" in out and "0.793" in out and "0.930" in out
    assert "verdict 1: FAIL" in out
    assert "shell_ops C1: tokens/step ratio" not in out  # 4.04 vs 3.98: the one class where k=9 stepped further


def test_transcribed_receipts_are_marked_and_intact() -> None:
    for d in (BR1_DIR, BR2_DIR):
        rec = writeup_receipts(d)  # raises if any file differs from manifest.json
        assert rec.registration().transcribed
        m = json.loads((rec.root / "manifest.json").read_text())
        assert m["transcribed"] is True
        assert set(m["files"]) >= {"card.yaml", "registration.json", "README.md"}
        for arm in rec.card().arms:
            t = json.loads((rec.arm_dir(arm.name) / "transcribed.json").read_text())
            assert t["transcribed"] is True and t["quotes"]
        assert not (rec.root / "verdicts").exists()


def test_latest_verdict_for_v27_is_br1_rescore(monkeypatch) -> None:
    from gb300lane.cards import latest_verdict_for

    # The write-up's receipts ship with the package and count wherever results are written.
    ref = latest_verdict_for("v27")
    assert (ref.card, ref.number, ref.verdict, ref.transcribed) == ("br1-block-verification", 2, "PASS", True)
    assert ref.file.endswith("rescore.json")
    k9 = latest_verdict_for("k9")
    assert (k9.card, k9.number, k9.verdict) == ("br2-k-ladder-peerbench", 1, "FAIL")
    assert latest_verdict_for("v26") is None


def test_headers_name_the_card_once() -> None:
    for lines, tag in ((reproduce_br1(), "BR1"), (reproduce_br2(), "BR2")):
        assert lines[0].startswith(f"{tag}: "), lines[0]
        assert f"{tag} {tag}" not in _text(lines)
