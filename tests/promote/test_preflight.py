"""A transition proves what it will need before anything stops: plan, then apply.

Each refusal the plan can find without the new engine leaves production serving, never stopped: a garbage,
zeroed or foreign signing key (a test message is signed and verified), k above the trained block, a recipe
with no smoke gates, a port of the candidate's lane that stopping production does not free, and the
evidence log's breaks (tests/promote/test_evidence.py). `promote --dry-run` and `rollback --dry-run` print
the steps or every refusal and change nothing. The time production is down on each refusal is zero by
construction: the tests assert that production's engine was never stopped.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gb300lane import promote as pm
from gb300lane import signing
from gb300lane.cli.main import app
from gb300lane.errors import StateError
from gb300lane.promote.live import LiveOps
from gb300lane.testing.free_ports import free_port
from gb300lane.testing.simlane import SimLane

from fakes.sshkey import write_key

runner = CliRunner()


@pytest.fixture
def lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimLane:
    """local-v27 production, local-v26 its rollback pair (stopped, kept)."""
    sim = SimLane.create(tmp_path / "lane.json", {"local-v26": {}, "local-v27": {}, "local-k9": {}})
    monkeypatch.setenv("GB300LANE_LANE_OPS", f"sim:{sim.path}")
    monkeypatch.setenv("COLUMNS", "400")
    assert pm.promote("local-v26", force=True, reason="first", ops=sim).ok
    assert pm.promote("local-v27", force=True, reason="second", ops=sim).ok
    return sim


def _serving(sim: SimLane) -> list[str]:
    return sim.running_on(30106)


def _spoil(kind: str, tmp_path: Path) -> None:
    key = signing.signing_key_path()
    if kind == "garbage":
        key.write_bytes(b"not a key at all\n")
    elif kind == "zeroed":
        key.write_bytes(b"\0" * 411)
    elif kind == "foreign":
        other = write_key(tmp_path / "other", "someone else")
        key.write_bytes(other.read_bytes())
        Path(f"{key}.pub").write_text(Path(f"{other}.pub").read_text())
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["garbage", "zeroed", "foreign"])
def test_an_unusable_signing_key_refuses_promote_rollback_and_repair_with_production_up(
    lane: SimLane, tmp_path: Path, kind: str
) -> None:
    before = lane.operations()
    _spoil(kind, tmp_path)
    for args in (["promote", "local-k9", "--force", "--reason", "x"], ["rollback"]):
        out = runner.invoke(app, args)
        text = " ".join(out.output.split())
        assert out.exit_code == 1 and str(signing.signing_key_path()) in text and "nothing was stopped" in text, text
        assert "Traceback" not in text
    plan = runner.invoke(app, ["rollback", "--dry-run"])
    assert plan.exit_code == 1 and "plan refused" in plan.output and "(1)" in plan.output, plan.output
    assert lane.operations() == before and _serving(lane) == ["lane-local-v27"]


def test_a_repair_with_an_unusable_key_waits_for_the_key(lane: SimLane, tmp_path: Path) -> None:
    class Killed(BaseException):
        pass

    def die(point: str) -> None:
        if point == "promote.boot_candidate":
            raise Killed

    with pytest.raises(Killed):
        pm.promote("local-k9", force=True, reason="x", ops=lane, crash_hook=die)
    before = lane.operations()
    _spoil("garbage", tmp_path)
    with pytest.raises(StateError, match="refusing to repair the interrupted transition"):
        pm.rollback(ops=lane)
    assert lane.operations() == before


def test_every_preflight_refusal_is_listed_by_the_dry_run_and_none_stops_production(lane: SimLane) -> None:
    lane.set_recipe(
        "local-k9",
        refuse=[
            "recipes/local-k9.yaml: speculative.num_speculative_tokens = 9 exceeds the trained block",
            "recipes/local-k9.yaml: smoke.gates is empty",
        ],
    )
    before = lane.operations()
    plan = runner.invoke(app, ["promote", "local-k9", "--force", "--reason", "x", "--dry-run"])
    assert plan.exit_code == 1, plan.output
    text = " ".join(plan.output.split())
    assert "plan refused, 2 reasons" in text and "(1) recipes/local-k9.yaml: speculative" in text
    assert "(2) recipes/local-k9.yaml: smoke.gates is empty" in text
    done = runner.invoke(app, ["promote", "local-k9", "--force", "--reason", "x"])
    text = " ".join(done.output.split())
    assert done.exit_code == 1 and "exceeds the trained block" in text and "also: recipes/local-k9.yaml: smoke" in text
    assert lane.operations() == before and _serving(lane) == ["lane-local-v27"]


def test_a_plan_that_may_run_lists_its_steps_and_changes_nothing(lane: SimLane) -> None:
    before = lane.operations()
    plan = runner.invoke(app, ["promote", "local-k9", "--force", "--reason", "x", "--dry-run", "--json"])
    assert plan.exit_code == 0, plan.output
    import json

    got = json.loads(plan.output)
    assert got["refusals"] == [] and got["steps"] == [
        "stop lane-local-v27 (local-v27) and keep it as the rollback pair",
        "boot local-k9 as lane-local-k9 on port 30106",
        "run its smoke gates",
        "record the promotion",
    ]
    back = runner.invoke(app, ["rollback", "--dry-run", "--json"])
    assert back.exit_code == 0 and json.loads(back.output)["steps"][0].startswith("stop lane-local-v27")
    assert lane.operations() == before


class LivePreflight:
    """The simulated lane, with the live lane's preflight (recipes, ports)."""

    def __init__(self, sim: SimLane) -> None:
        self.sim, self.live = sim, LiveOps()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sim, name)

    def preflight(self, recipe: str, *, port: int, production: str | None) -> list[str]:
        return self.live.preflight(recipe, port=port, production=production)


def test_the_live_preflight_finds_k_above_the_trained_block_missing_smoke_gates_and_a_held_port(
    lane: SimLane, recipes: Path
) -> None:
    ops = LivePreflight(lane)
    port = free_port()
    (recipes / "local-nosmoke.yaml").write_text(
        "schema_version: 1\nname: local-nosmoke\nextends: local-v27\ndescription: no smoke gates\nsmoke:\n  gates: []\n"
    )
    said = ops.live.preflight("local-k9", port=port, production=None)
    assert any("speculative.num_speculative_tokens = 9 exceeds the trained block" in s for s in said), said
    assert any("smoke.gates is empty" in s for s in ops.live.preflight("local-nosmoke", port=port, production=None))
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port + 1))  # the candidate's sidecar port
        held.listen()
        said = ops.live.preflight("local-v27", port=port, production=None)
        assert any(f"port {port + 1} (sidecar of local-v27) is in use" in s for s in said), said
    # through promote: the refusal comes before production is stopped
    lane.set_recipe("local-nosmoke", port=30106)
    before = lane.operations()
    with pytest.raises(StateError, match="smoke.gates is empty") as refused:
        pm.promote("local-nosmoke", force=True, reason="x", ops=ops)
    assert "nothing was stopped" in str(refused.value)
    assert lane.operations() == before and _serving(lane) == ["lane-local-v27"]
