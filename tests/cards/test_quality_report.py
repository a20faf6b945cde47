"""A task-quality gate through a whole card: registered, run, scored from the receipts, re-scored, reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gb300lane.bench.models import WindowResult
from gb300lane.bench.quality import ToolCall, asks_for, check
from gb300lane.bench.transcripts import load_transcripts
from gb300lane.cards import load_card, register, render_report, rescore, run_card, score
from gb300lane.cards.record.receipts import read_verdict

from fakes import cards as fakes

CARD = """
schema_version: 1
name: quality-demo
title: "quality-demo: does B keep its tool calls valid?"
arms:
  - {name: A, recipe: local-v26, role: control}
  - {name: B, recipe: local-v27, role: candidate}
  - {name: A2, recipe: local-v26, role: control}
windows:
  - {name: primary, classes: [prose], transcripts_per_class: 6, rounds: 1, concurrency: [1], temperature: 1.0,
     seed_base: 1000, forced_tokens: 64}
  - {name: quality, classes: [tool_json], transcripts_per_class: 40, rounds: 2, concurrency: [8],
     temperature: 1.0, seed_base: 3000, forced_tokens: null, max_tokens: 256, tool_choice: required}
primary_window: primary
gates:
  - {id: tool-calls-valid, kind: task_quality, window: quality, margin: 0.1, alpha: 0.025}
"""

ASK = asks_for(load_transcripts("tool_json")[0])  # get_weather(city required, unit c|f)
GOOD = ToolCall(name="get_weather", arguments='{"city": "Lisbon"}')
BAD = ToolCall(name="get_weather", arguments='{"unit": "kelvin"}')


class QualityLane(fakes.FakeLane):
    """The fake lane, whose quality window's calls are valid except B's on `broken` transcripts."""

    def __init__(self, card: Any, broken: set[str]) -> None:
        super().__init__(card, {}, n_transcripts=40)
        self.broken = broken

    def run_window(self, endpoint: str, window: Any, **kw: Any) -> WindowResult:
        res = super().run_window(endpoint, window, **kw)
        if not window.stops_at_eos:
            return res
        arm = self._arm_by_endpoint[endpoint]
        records = [
            r.model_copy(
                update={
                    "quality": check(
                        ASK,
                        text="",
                        tool_calls=[BAD if arm == "B" and r.transcript_id in self.broken else GOOD],
                        finish_reason="tool_calls",
                    )
                }
            )
            for r in res.records
        ]
        return res.model_copy(update={"records": records})


@pytest.fixture
def card_file(tmp_path: Path) -> Path:
    p = tmp_path / "quality-demo.yaml"
    p.write_text(CARD)
    return p


@pytest.mark.slow
def test_a_candidate_that_breaks_its_calls_fails_from_the_receipts(
    card_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    card, p = load_card(card_file)
    rec = register(card, p.read_text())
    broken = {f"tool_json-{i:03d}" for i in range(0, 40, 4)}  # 10 transcripts, in both rounds: 20 of 80 units
    run_card(rec, ops=QualityLane(card, broken).ops())
    verdict = score(rec)
    (gate,) = verdict.results
    assert (verdict.verdict, gate.status) == ("FAIL", "FAIL")
    assert gate.quality is not None
    assert [(t.comparison, t.worse, t.better, t.n) for t in gate.quality.tests] == [
        ("B vs A", 20, 0, 80),
        ("B vs A2", 20, 0, 80),
        ("A vs A2", 0, 0, 80),
    ]
    rates = {(r.arm, r.cls): (r.passed, r.checked) for r in gate.quality.rates}
    assert rates[("B", "tool_json")] == (60, 80) and rates[("A2", None)] == (80, 80)
    # A re-score reads the same receipts: a margin of 30 points still fails (B is shown worse), the rates stand.
    again = rescore(rec, "a wider margin does not excuse a drop the test shows", ["tool-calls-valid.margin=0.3"])
    assert again.results[0].status == "FAIL" and again.results[0].quality == gate.quality
    md = render_report(rec)
    text = md.read_text()
    assert "Task quality, gate `tool-calls-valid`" in text and "| B | 75.0% (60/80) | 75.0% (60/80) |" in text
    assert "| B vs A | 80 | 20 | 0 |" in text
    html = (md.parent / "card.html").read_text()
    assert 'data-comparison="B vs A"' in html and 'data-worse="20"' in html and 'data-passed="60"' in html
    assert read_verdict(rec, 1).results[0].quality == gate.quality


def test_a_candidate_that_keeps_its_calls_passes(
    card_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))
    card, p = load_card(card_file)
    rec = register(card, p.read_text())
    run_card(rec, ops=QualityLane(card, set()).ops())
    (gate,) = score(rec).results
    assert gate.status == "PASS" and "drop <= 6.1 pts" in gate.observed
