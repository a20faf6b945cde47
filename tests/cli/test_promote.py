"""The promote / rollback / history / prune commands: thin, helpful, honest exit codes; and the ledger file itself."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane import paths
from gb300lane import promote as pm
from gb300lane.cli.main import app
from gb300lane.errors import LedgerError, StateError
from gb300lane.promote.ledger import Ledger, ledger_path
from gb300lane.testing.simlane import SimLane

runner = CliRunner()


@pytest.fixture
def lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimLane:
    sim = SimLane.create(
        tmp_path / "lane.json",
        {"local-v26": {}, "local-v27": {}, "local-k9": {}},
        {"local-v27": {"verdict": "PASS", "reference": "card BR1 verdict 2", "rescored": True}},
    )
    monkeypatch.setenv("GB300LANE_LANE_OPS", f"sim:{sim.path}")
    monkeypatch.setenv("COLUMNS", "400")
    return sim


def _run(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("command", ["promote", "rollback", "history", "prune"])
def test_every_command_has_help(command: str) -> None:
    result = _run(command, "--help")
    assert result.exit_code == 0
    assert len(result.output.strip().splitlines()) > 3
    doc = {
        "promote": "PASS verdict",
        "rollback": "time to restore",
        "history": "when, what and why",
        "prune": "never production",
    }[command]
    assert doc in " ".join(result.output.split())


def test_round_trip_through_the_cli(lane: SimLane) -> None:
    refused = _run("promote", "local-v26")
    assert refused.exit_code == 1 and "no card has it as its B arm" in refused.output
    first = _run("promote", "local-v26", "--force", "--reason", "production before block verification")
    assert first.exit_code == 0, first.output
    assert "no rollback pair (first promotion)" in first.output
    second = _run("promote", "local-v27", "--json")
    assert second.exit_code == 0
    report = json.loads(second.output)
    assert report["ok"] and report["production"] == "local-v27" and report["rollback_pair"] == "local-v26"
    back = _run("rollback")
    assert back.exit_code == 0 and "rolled back to local-v26" in back.output and "tool:" in back.output
    history = _run("history")
    lines = history.output.strip().splitlines()
    assert len(lines) == 3
    assert "promote (forced) - -> local-v26: production before block verification" in lines[0]
    assert "promote local-v26 -> local-v27: card BR1 verdict 2" in lines[1]
    assert "rollback local-v27 -> local-v26 restore" in lines[2]
    events = json.loads(_run("history", "--json").output)
    assert [e["kind"] for e in events] == ["promote", "promote", "rollback"]
    assert events[0]["forced"] is True and events[1]["verdict"] == "card BR1 verdict 2"
    assert all(e["schema_version"] == 1 for e in events)


def test_a_failed_promotion_exits_1_and_says_what_was_restored(lane: SimLane) -> None:
    assert _run("promote", "local-v26", "--force", "--reason", "first").exit_code == 0
    lane.set_recipe("local-v27", fail_smoke=True)
    result = _run("promote", "local-v27")
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "local-v27 failed smoke" in text and "restored local-v26" in text
    line = _run("history").output.strip().splitlines()[-1]
    assert "promote_failed local-v26 -> local-v27 (production stays local-v26) restore" in line


def test_usage_errors(lane: SimLane) -> None:
    result = _run("promote", "local-v27", "--reason", "because")
    assert result.exit_code == 2 and "--reason goes with --force" in result.output
    result = _run("promote", "local-v27", "--force")
    assert result.exit_code == 1 and "--force needs --reason" in result.output
    result = _run("prune", "--keep", "-1")
    assert result.exit_code == 1 and "--keep -1" in result.output
    result = _run("rollback")
    assert result.exit_code == 1 and "no rollback pair" in result.output


def test_history_and_prune_on_an_empty_ledger(lane: SimLane) -> None:
    assert _run("history").output.strip() == "no promotions recorded yet"
    assert json.loads(_run("history", "--json").output) == []
    result = _run("prune", "--json")
    assert result.exit_code == 0 and json.loads(result.output)["removed"] == []


def test_an_unknown_lane_ops_setting_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GB300LANE_LANE_OPS", "bogus")
    result = _run("rollback")
    assert result.exit_code == 1 and "GB300LANE_LANE_OPS='bogus'" in result.output


# -- the ledger file -------------------------------------------------------------------------


def test_the_ledger_lives_under_the_state_dir_in_wal_mode(lane: SimLane) -> None:
    pm.promote("local-v26", force=True, reason="first", ops=lane)
    path = ledger_path()
    assert path.parent == paths.state_dir()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        steps = [r[0] for r in db.execute("SELECT step || ':' || phase FROM journal ORDER BY id")]
    # Intent is written before each side effect, done after.
    assert steps[:2] == ["check_port:intent", "check_port:done"]
    assert steps[2:4] == ["boot_candidate:intent", "boot_candidate:done"]


def test_a_ledger_from_another_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "promote.sqlite3"
    Ledger(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='9' WHERE key='schema_version'")
    with pytest.raises(StateError, match=r"meta.schema_version = 9, this tool reads 1"):
        Ledger(path)


def test_a_file_that_is_not_a_ledger_is_named(tmp_path: Path) -> None:
    path = tmp_path / "promote.sqlite3"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(
        LedgerError, match=r"promote.sqlite3: the promotion ledger is corrupt \(file is not a database\).*move it aside"
    ) as exc:
        Ledger(path)
    assert exc.value.kind == "corrupt"


def test_current_production_is_none_without_a_ledger() -> None:
    assert pm.current_production() is None
    assert not ledger_path().exists()  # reading state creates nothing


def test_dry_runs_show_the_plan_and_change_nothing(lane: SimLane) -> None:
    assert _run("promote", "local-v26", "--force", "--reason", "first").exit_code == 0
    before = lane.operations()
    plan = _run("promote", "local-v27", "--dry-run")
    text = " ".join(plan.output.split())
    assert plan.exit_code == 0 and "plan (card BR1 verdict 2): stop lane-local-v26 (local-v26)" in text
    assert "boot local-v27 as lane-local-v27 on port 30106" in text and "dry run: nothing done" in text
    refused = _run("promote", "local-k9", "--dry-run")
    assert refused.exit_code == 1 and "refusing to promote" in refused.output  # the gate still applies
    assert _run("promote", "local-v27").exit_code == 0
    plan = _run("rollback", "--dry-run")
    text = " ".join(plan.output.split())
    assert "start the kept pair lane-local-v26 (local-v26)" in text and "dry run" in text
    assert pm.current_production().recipe == "local-v27"
    assert [op for op in lane.operations() if op not in before].count(["boot", "lane-local-v27"]) == 1
    assert [e.kind for e in pm.history()] == ["promote", "promote"]
