"""The fleet rollout's decisions on simulated lanes (one `SimLane` per inventory lane, each with its own ledger).

The real three-lane run is tests/promote/test_rollout.py; here every path of the
rollout is driven quickly: all-new, a failing lane rolling the moved ones back,
--keep-going, a lane with nothing to go back to, an interrupted rollout and its
repair, and an unreadable journal (fail closed).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gb300lane import lane
from gb300lane import promote as pm
from gb300lane.errors import StateError
from gb300lane.lane.inventory import placements
from gb300lane.promote import rollout as ro
from gb300lane.testing.simlane import SimLane

LANES = ("a", "b", "c")


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, SimLane]:
    inv = tmp_path / "lanes.yaml"
    inv.write_text(yaml.safe_dump({"schema_version": 1, "hosts": {
        f"box-{n}": {"docker": "local", "lanes": [{"name": n, "runtime": "process"}]} for n in LANES}}))  # fmt: skip
    monkeypatch.setenv("GB300LANE_INVENTORY", str(inv))
    return {n: SimLane.create(tmp_path / f"{n}.json", {"v1": {}, "v2": {}}) for n in LANES}


def _ops(fleet: dict[str, SimLane]) -> ro.OpsFor:
    return lambda p: fleet[p.lane]


def _production(fleet: dict[str, SimLane]) -> dict[str, str | None]:
    out = {}
    for p in placements():
        with lane.on_lane(p):
            prod = pm.current_production()
            out[p.lane] = prod.recipe if prod else None
    return out


def _first(fleet: dict[str, SimLane], lanes: tuple[str, ...] = LANES) -> None:
    for p in placements(lanes=list(lanes)):
        with lane.on_lane(p):
            assert pm.promote("v1", force=True, reason="first", ops=fleet[p.lane]).ok


def test_every_lane_moves_in_order(fleet: dict[str, SimLane]) -> None:
    _first(fleet)
    rep = ro.rollout("v2", lanes=["c", "a", "b"], force=True, reason="go", ops_for=_ops(fleet))
    assert rep.ok and rep.outcome == "promoted" and [m.lane for m in rep.lanes] == ["c", "a", "b"]
    assert _production(fleet) == {"a": "v2", "b": "v2", "c": "v2"}
    again = ro.rollout("v2", force=True, reason="again", ops_for=_ops(fleet))
    assert again.ok and {m.status for m in again.lanes} == {"already"}


def test_a_failing_lane_rolls_the_moved_ones_back(fleet: dict[str, SimLane]) -> None:
    _first(fleet)
    fleet["b"].set_recipe("v2", fail_smoke=True)
    rep = ro.rollout("v2", lanes=["a", "b", "c"], force=True, reason="go", ops_for=_ops(fleet))
    assert not rep.ok and rep.outcome == "rolled_back"
    assert [m.status for m in rep.lanes] == ["reverted", "failed", "pending"]
    assert _production(fleet) == {"a": "v1", "b": "v1", "c": "v1"}
    assert fleet["c"].operations() and not any("v2" in " ".join(op) for op in fleet["c"].operations())  # c untouched
    assert any("v2" in " ".join(op) for op in fleet["a"].operations())
    a = placements(lanes=["a"])[0]
    with lane.on_lane(a):
        last = pm.history()[-1]
    assert last.kind == "rollback" and "lane b (host box-b) failed" in (last.reason or "")


def test_keep_going_moves_the_others(fleet: dict[str, SimLane]) -> None:
    _first(fleet)
    fleet["b"].set_recipe("v2", fail_smoke=True)
    rep = ro.rollout("v2", keep_going=True, force=True, reason="go", ops_for=_ops(fleet))
    assert not rep.ok and rep.outcome == "mixed" and "lanes b stay on their old recipe" in rep.message
    assert _production(fleet) == {"a": "v2", "b": "v1", "c": "v2"}


def test_a_lane_with_nothing_to_go_back_to_is_refused(fleet: dict[str, SimLane]) -> None:
    _first(fleet, ("a", "b"))
    with pytest.raises(StateError, match=r"lane c \(host box-c\) has no production recipe to go back to"):
        ro.rollout("v2", force=True, reason="go", ops_for=_ops(fleet))
    assert ro.fleet_in_flight() is None


class Killed(BaseException):
    """Stands for kill -9 in-process: nothing below it catches a BaseException."""


def test_an_interrupted_rollout_is_explained_and_repaired(fleet: dict[str, SimLane]) -> None:
    _first(fleet)

    def hook(point: str) -> None:
        if point == "c:promote.smoke_candidate":
            raise Killed

    with pytest.raises(Killed):
        ro.rollout("v2", force=True, reason="go", ops_for=_ops(fleet), crash_hook=hook)
    flight = ro.fleet_in_flight()
    assert flight is not None and flight.crashed and "interrupted while moving lane c" in flight.explanation
    assert flight.command == "gb300lane rollback --fleet"
    with pytest.raises(StateError, match="is unfinished; run `gb300lane rollback --fleet` first"):
        ro.rollout("v2", force=True, reason="again", ops_for=_ops(fleet))
    rep = ro.repair(ops_for=_ops(fleet))
    assert rep.ok and rep.outcome == "rolled_back" and ro.fleet_in_flight() is None
    assert _production(fleet) == {"a": "v1", "b": "v1", "c": "v1"}
    with pytest.raises(StateError, match="no unfinished fleet rollout"):
        ro.repair(ops_for=_ops(fleet))


def test_an_unreadable_journal_fails_closed(fleet: dict[str, SimLane]) -> None:
    folder = ro.fleet_dir() / "rollouts"
    folder.mkdir(parents=True)
    (folder / "20260101T000000Z-abc.json").write_text("{not json")
    with pytest.raises(StateError, match="the fleet rollout journal cannot be read"):
        ro.fleet_in_flight()
