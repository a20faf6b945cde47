"""Receipts that do not collide: `card register` of a card registered today says what its receipts hold and what
to run next, and `reproduce` writes into a run directory of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.cards import load_card, register
from gb300lane.cards.record.receipts import receipts_state
from gb300lane.cli.main import app

DATA = Path(__file__).parents[1] / "data" / "cards"
runner = CliRunner()


def _done(rec, arm: str) -> None:  # type: ignore[no-untyped-def]
    rec.write_json(rec.attempt_dir(arm, 1) / "attempt.json", {"schema_version": 1, "arm": arm, "attempt": 1})
    rec.write_json(rec.arm_dir(arm) / "done.json", {"schema_version": 1, "attempt": 1, "stage": 1})


def test_register_again_says_registered_partial_finished_with_the_next_command(tmp_path: Path) -> None:
    card, path = load_card(DATA / "micro.yaml")
    first = register(card, path.read_text(), base=tmp_path)
    assert not first.reused
    again = register(card, path.read_text(), base=tmp_path)
    assert again.reused and again.root == first.root
    state = receipts_state(again, "micro")
    assert state.state == "registered" and state.next == ("gb300lane card run micro",)
    _done(again, "A")
    state = receipts_state(again, "micro")
    assert state.state == "partial" and state.finished == ("A",) and state.unfinished == ("B", "A2")
    assert state.next == ("gb300lane card run micro", "gb300lane card register micro --fresh")
    assert "arms A finished, B, A2 not yet" in state.describe()
    _done(again, "B")
    _done(again, "A2")
    state = receipts_state(again, "micro")
    assert state.state == "finished"
    assert state.next == ("gb300lane card score micro", "gb300lane card register micro --fresh")
    # --fresh starts a new directory beside it
    fresh = register(card, path.read_text(), base=tmp_path, fresh=True)
    assert fresh.root != first.root and not fresh.reused


def test_cli_register_twice_prints_what_it_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path))
    card = str(DATA / "micro.yaml")
    assert runner.invoke(app, ["card", "register", card]).exit_code == 0
    res = runner.invoke(app, ["card", "register", card])
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "already registered in" in text and "no arm has run yet" in text and "gb300lane card run" in text
    res = runner.invoke(app, ["card", "register", card, "--json"])
    assert json.loads(res.stdout)["existing"]["state"] == "registered"


def test_reproduce_registers_in_its_own_run_directory(tmp_path: Path) -> None:
    card, path = load_card("local-br1")
    repro = register(card, path.read_text(), base=tmp_path, fresh=True, run="reproduce", date="2026-01-02")
    assert repro.root.name == "2026-01-02-local-br1-reproduce"
    again = register(card, path.read_text(), base=tmp_path, fresh=True, run="reproduce", date="2026-01-02")
    assert again.root.name == "2026-01-02-local-br1-reproduce-run2"
    # `card register` of the same card that day starts its own directory: it never reuses reproduce's receipts.
    mine = register(card, path.read_text(), base=tmp_path, date="2026-01-02")
    assert mine.root.name == "2026-01-02-local-br1" and not mine.reused
