"""A ledger that cannot lie: `down --force` of production or the rollback pair is recorded, and afterwards
`status`, `rollback --dry-run`, `rollback` and `history` agree; a rollback plan is offered only when it can run.

Process runtime, embedded engine at time scale 0, on free ports: local-v26 is promoted, then local-v27 over
it (local-v26 kept as the pair).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gb300lane import lane
from gb300lane import promote as pm

from production import in_production

pytestmark = pytest.mark.slow


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gb300lane", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "400"},
    )


@pytest.fixture
def promoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """local-v27 in production over local-v26 (the rollback pair); yields the production port."""
    with in_production(tmp_path / "recipes", monkeypatch, ["local-v26", "local-v27"]) as port:
        yield port


def _status() -> dict:
    st = _cli("status", "--json")
    assert st.returncode == 0, st.stderr
    return json.loads(st.stdout)


def test_down_all_force_is_recorded_and_every_command_agrees(promoted: int) -> None:
    res = _cli("down", "--all", "--force", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert sorted(out["removed"]) == ["local-v26", "local-v27"]
    assert out["recorded"] == [
        "production local-v27 (local-v27) removed; nothing serves production",
        "rollback pair local-v26 (local-v26) removed; no rollback pair",
    ]
    st = _status()
    assert st["instances"] == [] and st["production"] is None  # no production, no pair: the ledger says so too
    assert "production: none" in _cli("status").stdout
    # No plan is offered that could not run.
    for args in (("rollback", "--dry-run"), ("rollback",)):
        r = _cli(*args)
        # a dry run prints the refused plan (stdout); a rollback refuses (stderr)
        assert r.returncode == 1 and "no rollback pair in the ledger (production: none)" in " ".join(
            (r.stdout + r.stderr).split()
        )
    events = pm.history()
    assert [(e.kind, e.recipe) for e in events[-2:]] == [("removed", "local-v27"), ("removed", "local-v26")]
    hist = " ".join(_cli("history").stdout.split())
    assert (
        "removed: gb300lane down --force; production local-v27 (local-v27) removed; nothing serves production" in hist
    )
    assert pm.current_production() is None


def test_down_force_of_production_leaves_a_pair_rollback_can_start(promoted: int) -> None:
    port = promoted
    refused = _cli("down", "local-v27")
    assert refused.returncode == 1 and "the promotion ledger then records that it was removed" in refused.stderr
    res = _cli("down", "local-v27", "--force")
    assert res.returncode == 0, res.stderr
    assert "recorded in the promotion ledger: production local-v27 (local-v27) removed" in res.stdout
    st = _status()
    assert st["production"]["recipe"] is None and st["production"]["rollback_pair"]["recipe"] == "local-v26"
    plan = _cli("rollback", "--dry-run")
    assert plan.returncode == 0 and "start the kept pair local-v26" in plan.stdout and "stop" not in plan.stdout
    done = _cli("rollback")
    assert done.returncode == 0, done.stdout + done.stderr
    st = _status()
    prod = st["production"]
    assert prod["recipe"] == "local-v26" and prod["rollback_pair"] is None and prod["port"] == port
    assert [e.kind for e in pm.history()][-2:] == ["removed", "rollback"]


def test_a_pair_removed_outside_the_tool_is_no_rollback_plan(promoted: int) -> None:
    lane.remove_instance("local-v26")  # gone without the ledger knowing (as `docker rm` would)
    for args in (("rollback", "--dry-run"), ("rollback",)):
        r = _cli(*args)
        assert r.returncode == 1 and "rollback pair local-v26 (local-v26) no longer exists" in " ".join(
            (r.stdout + r.stderr).split()
        )
    assert _status()["production"]["recipe"] == "local-v27"
