"""`up --dry-run` and a fleet rollout's `--dry-run` print the steps and act on nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gb300lane import lane
from gb300lane import promote as pm
from gb300lane.lane.inventory import placements
from gb300lane.paths import shipped
from gb300lane.promote import rollout as ro
from gb300lane.testing.free_ports import free_port
from gb300lane.testing.simlane import SimLane

from clirun import cli

LANES = ("a", "b")


def test_up_dry_run_prints_the_steps_and_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("local-v26", "local-v27"):
        (tmp_path / f"{name}.yaml").write_text((shipped("recipes") / f"{name}.yaml").read_text())
    (tmp_path / "t-dry.yaml").write_text(yaml.safe_dump({
        "schema_version": 1, "name": "t-dry", "extends": "local-v27", "description": "a dry run",
        "lane": {"port": free_port()}, "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
    }))  # fmt: skip
    monkeypatch.setenv("GB300LANE_RECIPES_DIR", str(tmp_path))
    res = cli("up", "t-dry", "--dark", "--runtime", "process", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "create and start local-t-dry-main" in res.stdout and "nothing was created" in res.stdout, res.stdout
    assert lane.list_instances() == []
    as_json = json.loads(cli("up", "t-dry", "--dark", "--runtime", "process", "--dry-run", "--json").stdout)
    assert as_json["instance"] == "local-t-dry" and len(as_json["steps"]) >= 4
    assert lane.list_instances() == []


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, SimLane]:
    inv = tmp_path / "lanes.yaml"
    inv.write_text(yaml.safe_dump({"schema_version": 1, "hosts": {
        f"box-{n}": {"docker": "local", "lanes": [{"name": n, "runtime": "process"}]} for n in LANES}}))  # fmt: skip
    monkeypatch.setenv("GB300LANE_INVENTORY", str(inv))
    sims = {n: SimLane.create(tmp_path / f"{n}.json", {"v1": {}, "v2": {}}) for n in LANES}
    for p in placements():
        with lane.on_lane(p):
            assert pm.promote("v1", force=True, reason="first", ops=sims[p.lane]).ok
    return sims


def test_a_fleet_rollout_dry_run_plans_every_lane_and_moves_none(fleet: dict[str, SimLane]) -> None:
    before = {n: len(s.operations()) for n, s in fleet.items()}
    plan = ro.plan_rollout("v2", lanes=["b", "a"], force=True, reason="go", ops_for=lambda p: fleet[p.lane])
    assert plan.ok and [lp.lane for lp in plan.lanes] == ["b", "a"]
    assert all(lp.previous == "v1" and lp.steps for lp in plan.lanes)
    assert {n: len(s.operations()) for n, s in fleet.items()} == before  # nothing stopped, booted or started
    for p in placements():
        with lane.on_lane(p):
            assert pm.current_production().recipe == "v1"  # type: ignore[union-attr]
    fleet["a"].set_recipe("v2", fail_smoke=True)  # a refusal the plan can find shows as refused, not run
    refused = ro.plan_rollout("v3", lanes=["a"], ops_for=lambda p: fleet[p.lane])
    assert not refused.ok and refused.lanes[0].refusals
