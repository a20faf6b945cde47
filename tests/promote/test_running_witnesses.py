"""The running engines are witnesses of production: a ledger, witness file and marks forged or deleted together
never let `down --all` remove what serves production without `--force`.

A real lane (process runtime, embedded engine at time scale 0): local-v27 in production over local-v26 (kept).
Two forgeries with write access to the state directory: the ledger's slots emptied and one event inserted at
id 1000 (every other witness then reads as "behind"); or the ledger, `production.json` and the instance
records' marks deleted together. The engine still serving the lane's port, non-dark, with the boot and smoke
reports its promotion wrote, says it may be production: `down --all` refuses and names it and `--force`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gb300lane import lane
from gb300lane.lane import records as instance_records
from gb300lane.promote.ledger import ledger_path
from gb300lane.promote.witness import witness_path

from clirun import cli
from production import in_production

pytestmark = pytest.mark.slow


@pytest.fixture
def promoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    with in_production(tmp_path / "recipes", monkeypatch, ["local-v26", "local-v27"]) as port:
        yield port


def _forge(how: str) -> None:
    path = ledger_path()
    if how == "emptied+event1000":
        db = sqlite3.connect(path)
        db.execute("DELETE FROM slots")
        db.execute(
            "INSERT INTO events (id, at, kind, recipe, forced, reason) VALUES "
            "(1000, '2026-01-01T00:00:00+00:00', 'down', 'local-v27', 1, 'forged')"
        )
        db.commit()
        db.close()
    else:
        for p in path.parent.glob(path.name + "*"):
            p.unlink()
        witness_path().unlink()
        for rec in instance_records.load_all():
            instance_records.save(rec.model_copy(update={"held": None, "held_by": None}))


@pytest.mark.parametrize("how", ["emptied+event1000", "ledger+witness+marks deleted"])
def test_down_all_refuses_while_the_production_engine_still_serves(promoted: int, how: str) -> None:
    _forge(how)
    res = cli("down", "--all")
    said = " ".join((res.stdout + res.stderr).split())
    print(said)
    states = {i.name: i.state for i in lane.list_instances()}
    assert states.get("local-v27") == "running", f"production was removed: {said}"
    assert res.returncode == 1 and "local-v27" in said and "--force" in said, said
    st = cli("status")
    assert "production: none" not in " ".join(st.stdout.split()), st.stdout
    # --force still takes it down (the operator's word), and nothing is left serving
    forced = cli("down", "--all", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert "local-v27" in json.loads(forced.stdout)["removed"]
