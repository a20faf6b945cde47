"""One alpha budget per question: a card's runs are linked by its name and its candidate's resolved recipe.

Registering the card again after a verdict is the question's next run, spending the next Pocock share of each
gate's alpha (design.runs), and its verdict names the runs it follows; a question whose runs are spent, or
whose gates changed, is refused unless --new-question says why, which every later verdict and promote print.
`--fresh` no longer starts the alpha again, and the refusal of a spent plan does not advise it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gb300lane.cards import parse_card, register, run_card, score
from gb300lane.cards.decide.question import EarlierRun, plan_run
from gb300lane.cards.decide.sequential import run_share
from gb300lane.cli.main import app
from gb300lane.errors import CardError

from fakes import cards as fakes

DATA = Path(__file__).resolve().parents[1] / "data" / "cards"
runner = CliRunner()


def _earlier(
    run: int,
    verdict: str | None = "verdict 1 FAIL",
    *,
    runs: int = 3,
    gates: str = "g",
    measured: bool = True,
    new_question: str | None = None,
) -> EarlierRun:
    return EarlierRun(
        receipts=f"/r/{run}",
        registered_at=f"2026-11-0{run}T00:00:00Z",
        run=run,
        runs=runs,
        gates_sha256=gates,
        verdict=verdict,
        measured=measured,
        new_question=new_question,
    )


def test_the_shares_are_pocock_over_the_runs_and_add_to_the_whole_alpha() -> None:
    assert run_share(1, 1) == 1.0
    shares = [run_share(r, 5) for r in range(1, 6)]
    assert shares == sorted(shares, reverse=True) and abs(sum(shares) - 1.0) < 1e-12
    assert round(shares[0], 4) == 0.2954


def test_a_rerun_is_the_next_share_of_the_same_plan() -> None:
    first = plan_run("c", "h", 3, "g", [])
    assert not isinstance(first, str) and (first.run, first.runs, first.follows) == (1, 3, ())
    again = plan_run("c", "h", 3, "g", [_earlier(1)])
    assert not isinstance(again, str) and again.run == 2 and again.share == pytest.approx(run_share(2, 3))
    assert [r.receipts for r in again.follows] == ["/r/1"]
    assert "run 2 of 3 of card c's question" in again.notes()[0] and "follows run 1 (/r/1" in again.notes()[0]
    # a registration that never measured anything spent nothing
    assert plan_run("c", "h", 3, "g", [_earlier(1, None, measured=False)]).run == 1  # type: ignore[union-attr]


def test_a_spent_plan_refuses_and_names_the_runs_without_advising_a_free_restart() -> None:
    said = plan_run("c", "h", 1, "g", [_earlier(1, runs=1)])
    assert isinstance(said, str)
    assert "has had 1 run (run 1 (/r/1, 2026-11-01T00:00:00Z: verdict 1 FAIL))" in said
    assert "its alpha is spent" in said and "--new-question" in said and "--fresh" not in said
    spent = plan_run("c", "h", 3, "g", [_earlier(1), _earlier(2), _earlier(3)])
    assert isinstance(spent, str) and "all the 3 its plan allows" in spent


def test_changed_gates_are_a_new_question_not_another_run() -> None:
    said = plan_run("c", "h", 3, "other gates", [_earlier(1)])
    assert isinstance(said, str) and "its gates or design differ from its earlier runs" in said


def test_a_changed_candidate_recipe_is_a_new_question_that_needs_a_reason() -> None:
    # an edit to any key of the candidate (a port, say) would otherwise be a free restart of the alpha
    moved = [_earlier(1, runs=1)]
    said = plan_run("c", "edited", 1, "g", [], other_candidates=moved)
    assert isinstance(said, str) and "its candidate recipe changed" in said and "--new-question" in said
    assert "run 1 (/r/1" in said
    new = plan_run("c", "edited", 1, "g", [], new_question="image bumped", other_candidates=moved)
    assert not isinstance(new, str) and [r.receipts for r in new.follows] == ["/r/1"]
    assert "earlier runs of card c set aside: run 1 (/r/1" in new.notes()[0]
    # a candidate registered but never measured leaves nothing to restart
    assert not isinstance(
        plan_run("c", "edited", 1, "g", [], other_candidates=[_earlier(1, None, measured=False)]), str
    )


def test_a_new_question_starts_its_own_count_and_keeps_the_reason() -> None:
    new = plan_run("c", "h", 1, "g", [_earlier(1, runs=1)], new_question="the workload changed")
    assert not isinstance(new, str) and new.run == 1 and new.share == 1.0
    assert new.notes()[0].startswith("a new question, registered with --new-question: the workload changed")
    # ... and the runs after it count from it, not from the runs it set aside
    after = plan_run("c", "h", 2, "g", [_earlier(1, runs=1), _earlier(1, runs=2, new_question="the workload changed")])
    assert not isinstance(after, str) and after.run == 2


def _card(runs: int | None, name: str = "mini") -> tuple[Any, str]:
    text = (DATA / f"{name}.yaml").read_text()
    if runs is not None:
        text += f"design:\n  kind: fixed\n  runs: {runs}\n"
    return parse_card(text, "mini"), text


FAIL = {"A": 1.0, "B": 0.9, "A2": 1.0}


def _scored(runs: int | None, factors: dict[str, float], name: str = "mini", **kw: Any) -> Any:
    card, text = _card(runs, name)
    rec = register(card, text, fresh=True, **kw)
    run_card(rec, ops=fakes.FakeLane(card, factors, noise=0.01).ops())
    return rec, score(rec)


@pytest.mark.slow
def test_a_reregistered_cards_verdict_names_the_runs_it_follows_and_spends_its_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    first, v1 = _scored(3, FAIL, "tested")
    assert v1.verdict == "FAIL" and first.registration().question.run == 1
    second, v2 = _scored(3, {"A": 1.0, "B": 1.05, "A2": 1.0}, "tested")
    q = second.registration().question
    assert (q.run, q.runs) == (2, 3) and q.follows[0].receipts == str(first.root.resolve())
    assert any(
        "run 2 of 3 of card tested's question" in n and "follows run 1" in n and "verdict 1 FAIL" in n for n in v2.notes
    ), v2.notes
    tested = [t for r in v2.results for t in r.tests]
    # each tested gate's one-sided level is its alpha times the run's share (a fixed design: one look)
    assert tested and all(t.nominal_alpha == pytest.approx(t.alpha * run_share(2, 3)) for t in tested), [
        (t.nominal_alpha, t.alpha) for t in tested
    ]
    assert all(t.nominal_alpha == pytest.approx(t.alpha * run_share(1, 3)) for r in v1.results for t in r.tests)
    shown = runner.invoke(app, ["card", "show", str(second.root)])
    assert "run 2 of 3 of card tested's question" in " ".join(shown.output.split())
    # the plan of the next run is the plan of its share of alpha
    from gb300lane.cards.record.receipts import next_run
    from gb300lane.instrument.plan import registration_plan

    card, _ = _card(3, "tested")
    upcoming = next_run(card)
    assert not isinstance(upcoming, str) and upcoming.run == 3
    plan = registration_plan(card, share=upcoming.share)
    gates = {g.id: g for g in card.gates}
    assert plan is not None and all(g.alpha == pytest.approx(gates[g.gate].alpha * run_share(3, 3)) for g in plan.gates)


@pytest.mark.slow
def test_fresh_no_longer_resets_alpha_and_a_new_question_is_recorded_and_printed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    _, v1 = _scored(None, FAIL)
    assert v1.verdict == "FAIL"
    card, text = _card(None)
    with pytest.raises(CardError, match="its alpha is spent"):
        register(card, text, fresh=True)
    path = tmp_path / "mini.yaml"
    path.write_text(text)
    refused = runner.invoke(app, ["card", "register", str(path), "--fresh"])
    assert refused.exit_code == 1 and "its alpha is spent" in refused.output and "verdict 1 FAIL" in refused.output
    done = runner.invoke(
        app, ["card", "register", str(path), "--fresh", "--new-question", "the lane's drafter was retrained"]
    )
    assert done.exit_code == 0, done.output
    text_out = " ".join(done.output.split())
    assert "earlier: run 1" in text_out and "a new question: the lane's drafter was retrained" in text_out
    from gb300lane.cards import find_receipts

    rec = find_receipts("mini")
    run_card(rec, ops=fakes.FakeLane(card, {"A": 1.0, "B": 1.05, "A2": 1.0}).ops())
    v = score(rec)
    assert any("a new question, registered with --new-question: the lane's drafter was retrained" in n for n in v.notes)
    # promote prints it beside the verdict it rests on
    from gb300lane.promote.live import LiveOps

    info = LiveOps().verdict("local-v27")
    assert info is not None and info.question and "the lane's drafter was retrained" in info.question
