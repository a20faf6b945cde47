"""Production has more than one witness: a ledger deleted or emptied with production running is never "never promoted".

A real lane (process runtime, embedded engine) with production local-v27 and the
rollback pair local-v26. Then the ledger is deleted (with its WAL) or its
slots are emptied by hand. The other witnesses (the production witness file
beside the ledger and the instance records' marks) still say a production
exists: every command that could remove or replace production refuses, names
the witnesses and the repair, and nothing is removed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane import lane
from gb300lane import promote as pm
from gb300lane.cli.main import app
from gb300lane.errors import StateError
from gb300lane.promote.ledger import ledger_path
from gb300lane.promote.view import protected_instances
from gb300lane.testing.quick_recipes import quick_local_v26, write_quick_pair


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture
def production(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    base = quick_local_v26(name="wt{port}", forced_tokens=8)
    port = int(base["lane"]["port"])
    write_quick_pair(recipes, base)
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(recipes))
    monkeypatch.delenv("GB300LANE_LANE_OPS", raising=False)
    assert pm.promote("local-v26", force=True, reason="first production").ok
    assert pm.promote("local-v27", force=True, reason="the change").ok
    try:
        yield {"production": f"wt{port}-local-v27", "pair": f"wt{port}-local-v26"}
    finally:
        lane.down(all=True)


def _states() -> dict[str, str]:
    return {i.name: i.state for i in lane.list_instances()}


def _forget(how: str) -> None:
    path = ledger_path()
    if how == "deleted":
        for p in path.parent.glob(path.name + "*"):
            p.unlink()
    else:
        db = sqlite3.connect(path)
        db.execute("DELETE FROM slots")
        db.commit()
        db.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_a_forgotten_ledger_with_production_running_refuses_and_names_the_witnesses(
    production: dict[str, str], how: str
) -> None:
    prod, pair = production["production"], production["pair"]
    assert _states() == {prod: "running", pair: "stopped"}
    _forget(how)

    with pytest.raises(StateError) as exc:
        pm.current_production()
    said = str(exc.value)
    assert "witnesses disagree" in said and "ledger" in said and prod in said and "restore" in said
    assert protected_instances().unknown is not None

    code, out = _cli("status")
    assert code == 1 and "production: none recorded" not in out and "witnesses disagree" in out, out
    code, out = _cli("verify", "--production")
    assert code == 1 and "witnesses disagree" in out, out
    for args in (["down", "--all"], ["down", "local-v27"], ["down", "local-v26"]):
        code, out = _cli(*args)
        assert code == 1 and "witnesses disagree" in out and "--force" in out, (args, out)
    for args in (["promote", "local-v26", "--force", "--reason", "x"], ["rollback"], ["prune"]):
        code, out = _cli(*args)
        assert code == 1 and "witnesses disagree" in out and "Traceback" not in out, (args, out)
    code, out = _cli("up", "local-v26")
    assert code == 1, out
    assert _states() == {prod: "running", pair: "stopped"}  # nothing was removed or replaced


# -- preflight: a transition checks what it needs before it stops anything ------------------------


@pytest.mark.slow
def test_rollback_with_a_garbage_state_key_is_refused_before_production_is_touched(
    production: dict[str, str],
) -> None:
    from gb300lane import keyed

    prod, pair = production["production"], production["pair"]
    keyed.key_path().write_bytes(b"\x00garbage, not a key\n")
    code, out = _cli("rollback")
    assert code == 1 and str(keyed.key_path()) in out and "Traceback" not in out, out
    assert _states() == {prod: "running", pair: "stopped"}
    code, out = _cli("promote", "local-v26", "--force", "--reason", "x")
    assert code == 1 and str(keyed.key_path()) in out, out
    assert _states() == {prod: "running", pair: "stopped"}


@pytest.mark.slow
def test_rollback_with_an_unreadable_pair_record_is_refused_before_production_is_touched(
    production: dict[str, str],
) -> None:
    from gb300lane.lane.records import record_path

    prod, pair = production["production"], production["pair"]
    record_path(pair).write_bytes(b"\xff\xfe not json")
    code, out = _cli("rollback")
    assert code == 1 and pair in out and "Traceback" not in out, out
    assert {i.name: i.state for i in lane.list_instances()}.get(prod) == "running"
    code, out = _cli("rollback", "--dry-run")
    assert code == 1 and pair in out, out  # no plan is offered that cannot run


def test_the_advice_for_an_unreadable_process_record_never_loses_production(tmp_path: Path) -> None:
    from gb300lane.runtime.process import ProcessRuntime

    rt = ProcessRuntime(tmp_path)
    (tmp_path / "x-main.json").write_bytes(b"\x00\x01")
    with pytest.raises(StateError) as exc:
        rt.inspect("x-main")
    said = str(exc.value)
    assert str(tmp_path / "x-main.json") in said and "remove the file" not in said
    assert "may still be running" in said
