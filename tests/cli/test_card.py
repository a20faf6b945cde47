"""The `card` command group: every command documented, thin over the library."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gb300lane.cli.main import app
from gb300lane.errors import CardError

from fakes import cards as fakes

runner = CliRunner()
COMMANDS = ("register", "plan", "run", "score", "extend", "rescore", "report", "show", "list", "calibrate", "reproduce")


@pytest.fixture(autouse=True)
def _results(tmp_path, monkeypatch):
    monkeypatch.setenv("GB300LANE_RESULTS_DIR", str(tmp_path / "results"))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_card_command_has_help(command: str) -> None:
    res = runner.invoke(app, ["card", command, "--help"])
    assert res.exit_code == 0, res.output
    assert "Usage" in res.output and len(res.output.split("Usage", 1)[1].strip()) > 40


def test_reproduce_br1_part1_prints_the_write_up_figures() -> None:
    res = runner.invoke(app, ["card", "reproduce", "br1", "--part", "1"])
    assert res.exit_code == 0, res.output
    assert "= 1.020 (matches)" in res.output
    assert "verdict 1: FAIL" in res.output and "verdict 2: PASS" in res.output


def test_reproduce_br2_part1_prints_the_k_ladder() -> None:
    res = runner.invoke(app, ["card", "reproduce", "br2", "--part", "1"])
    assert res.exit_code == 0, res.output
    assert "= 2.85 (matches)" in res.output and "= 2.60 (matches)" in res.output


def test_score_dry_run_on_transcribed_receipts_writes_nothing() -> None:
    from gb300lane.cards.present.writeup import BR1_DIR, writeup_receipts

    root = writeup_receipts(BR1_DIR).root
    res = runner.invoke(app, ["card", "score", str(root), "--dry-run", "--json"])
    assert res.exit_code == 1, res.output  # FAIL exits 1
    v = json.loads(res.output)
    assert v["verdict"] == "FAIL" and v["number"] == 1
    assert not (root / "verdicts").exists()


def test_register_then_show(tmp_path) -> None:
    res = runner.invoke(app, ["card", "register", "local-br1"])
    assert res.exit_code == 0, res.output
    assert "local-br1: registered in" in res.output
    res = runner.invoke(app, ["card", "show", "local-br1", "--json"])
    body = json.loads(res.output)
    assert body["arms"] == {"A": "not finished", "B": "not finished", "A2": "not finished"}
    assert body["registration"]["recipes"]["B"]["recipe"] == "local-v27"


@pytest.mark.parametrize(
    ("factor", "noise", "verdict", "code"),
    [(1.04, 0.02, "PASS", 0), (0.9, 0.02, "FAIL", 1), (1.0, 0.02, "INCONCLUSIVE", 3)],
)
@pytest.mark.slow
def test_score_exit_code_is_the_verdict(factor: float, noise: float, verdict: str, code: int) -> None:
    from pathlib import Path

    from gb300lane.cards import load_card, register, run_card

    data = Path(__file__).parents[1] / "data" / "cards"
    card, path = load_card(data / "tested.yaml")
    rec = register(card, path.read_text())
    run_card(rec, ops=fakes.FakeLane(card, {"B": factor}, tps={"B": factor}, noise=noise, n_transcripts=20).ops())
    res = runner.invoke(app, ["card", "score", str(rec.root), "--json"])
    assert res.exit_code == code, res.output
    assert json.loads(res.stdout)["verdict"] == verdict
    res = runner.invoke(app, ["card", "show", str(rec.root)])
    assert f"verdict 1: {verdict}" in res.output


@pytest.mark.parametrize(
    "command",
    [
        ["register", "local-br1"],
        ["show", "local-br1"],
        ["list"],
        ["reproduce", "br1", "--part", "1"],
        ["plan", "local-br1", "--no-pilot"],
    ],
)
def test_card_commands_speak_json(command: list[str]) -> None:
    if command[0] == "show":
        runner.invoke(app, ["card", "register", "local-br1"])
    res = runner.invoke(app, ["card", *command, "--json"])
    if command[0] == "plan":  # no earlier control data in a fresh results dir: a clear error, no boot
        assert res.exit_code == CardError.exit_code and "--no-pilot" in res.output
        return
    assert res.exit_code == 0, res.output
    json.loads(res.stdout)


@pytest.mark.slow
def test_run_rescore_and_report_speak_json_and_rescore_keeps_the_verdict_exit_code_out() -> None:
    """After a (fake) run: `card run` resumes nothing, `rescore` and `report` print one JSON document each."""
    from pathlib import Path

    from gb300lane.cards import load_card, register, run_card

    card, path = load_card(Path(__file__).parents[1] / "data" / "cards" / "tested.yaml")
    rec = register(card, path.read_text())
    run_card(rec, ops=fakes.FakeLane(card, {"B": 1.04}, tps={"B": 1.04}, noise=0.02, n_transcripts=20).ops())
    res = runner.invoke(app, ["card", "run", str(rec.root), "--json"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["receipts"] == str(rec.root) and all("finished earlier" in line for line in body["lines"])
    res = runner.invoke(app, ["card", "score", str(rec.root), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["verdict"] == "PASS", res.output
    gate = next(g.id for g in card.gates if g.kind == "tokens_per_step")
    res = runner.invoke(
        app, ["card", "rescore", str(rec.root), "--reason", "a wider margin", "--set", f"{gate}.margin=0.5", "--json"]
    )
    assert res.exit_code == 0, res.output  # a re-score exits 0 once written, whatever its verdict
    v = json.loads(res.stdout)
    assert v["number"] == 2 and v["verdict"] in ("FAIL", "INCONCLUSIVE") and v["reason"] == "a wider margin"
    res = runner.invoke(app, ["card", "report", str(rec.root), "--json"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert Path(body["report"]).is_file() and body["report"] in body["files"]


def test_library_errors_become_one_line_at_the_cli_boundary() -> None:
    res = runner.invoke(app, ["card", "score", "no-such-card"])
    assert res.exit_code == CardError.exit_code and not isinstance(res.exception, CardError)
    assert "no-such-card" in res.output and len(res.output.strip().splitlines()) == 1


def test_cards_public_api_is_sorted_and_complete() -> None:
    import gb300lane.cards as cards

    assert cards.__all__ == sorted(cards.__all__)
    assert {"GateResult", "GateTest", "CardPlan"} <= set(cards.__all__)
    assert all(hasattr(cards, name) for name in cards.__all__)
    import gb300lane.instrument as instrument  # sizing and calibrating a card: the wing above cards

    assert {"Calibration", "calibrate", "plan_for"} <= set(instrument.__all__)
    assert all(hasattr(instrument, name) for name in instrument.__all__)
