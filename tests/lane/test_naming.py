"""Instance names come from the lane, the recipe and the arm, no prefix said twice; `logs`, `down` and `status`
take an instance, a recipe or an arm; `down` of several matches lists them and needs --all or --yes; records
written under the old names (`local-local-v27`, `local-B`) stay readable and can be taken down by name."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from gb300lane import lane
from gb300lane.cli.main import app
from gb300lane.errors import StateError
from gb300lane.lane import records as instances
from gb300lane.recipes import load_recipe, render

runner = CliRunner()


@pytest.mark.parametrize(
    "recipe,arm,name",
    [
        ("local-v27", None, "local-v27"),
        ("local-v27", "B", "local-v27-B"),
        ("local-v26", "A2", "local-v26-A2"),
        ("local-v27", "local-v27", "local-v27"),
        ("local-v27", "local-v27-2", "local-v27-2"),  # a promotion's second instance of the recipe
        ("v27", None, "gb300-v27"),
        ("v27", "B", "gb300-v27-B"),
        ("v27", "v27-2", "gb300-v27-2"),
    ],
)
def test_instance_names_say_the_lane_once(recipe: str, arm: str | None, name: str) -> None:
    assert lane.instance_name(load_recipe(recipe), arm) == name
    assert "local-local" not in name


def test_rendered_containers_say_the_lane_once() -> None:
    assert [c.name for c in render(load_recipe("local-v27")).containers] == ["local-v27-main", "local-v27-sidecar"]
    assert [c.name for c in render(load_recipe("v27")).containers] == ["gb300-v27-main", "gb300-v27-sidecar"]


def _record(name: str, recipe: str, arm: str | None) -> None:
    """A recorded instance whose containers are gone (what an old state directory may hold)."""
    now = time.time()
    instances.save(
        instances.InstanceRecord(
            name=name,
            lane="local",
            recipe=recipe,
            arm=arm,
            runtime="process",
            fingerprint="f" * 16,
            endpoint="http://127.0.0.1:1",
            port=1,
            served_model="m",
            dark=True,
            run="r1",
            containers=(f"{name}-main", f"{name}-sidecar"),
            recipe_json={},
            phase="stopped",
            created_at=now,
            updated_at=now,
        )
    )


@pytest.fixture
def lane_of_four() -> None:
    _record("local-local-v27", "local-v27", None)  # an old name
    _record("local-B", "local-v27", "B")  # an old arm name
    _record("local-v26", "local-v26", None)
    _record("local-v26-A", "local-v26", "A")


def test_targets_are_an_instance_a_recipe_or_an_arm(lane_of_four: None) -> None:
    assert lane.resolve("local-local-v27") == ["local-local-v27"]
    assert sorted(lane.resolve("local-v27")) == ["local-B", "local-local-v27"]
    assert lane.resolve("B") == ["local-B"]
    assert lane.resolve("local-v26", arm="A") == ["local-v26-A"]
    # An instance's own name designates it alone, although it is also a recipe with another instance.
    assert lane.resolve("local-v26") == ["local-v26"]
    with pytest.raises(StateError, match="no instance matches nope; `gb300lane status` lists"):
        lane.resolve("nope")


def test_down_of_several_matches_lists_them_and_asks_for_all_or_yes(lane_of_four: None) -> None:
    res = runner.invoke(app, ["down", "local-v27"])
    assert res.exit_code == 1
    err = " ".join(res.stderr.split())
    assert "2 instances match local-v27: local-B, local-local-v27" in err
    assert "--all (or --yes)" in err
    assert {i.name for i in lane.list_instances()} >= {"local-local-v27", "local-B"}  # nothing removed
    res = runner.invoke(app, ["down", "local-v27", "--yes", "--json"])
    assert res.exit_code == 0, res.output
    assert sorted(json.loads(res.stdout)["removed"]) == ["local-B", "local-local-v27"]
    res = runner.invoke(app, ["down", "A", "--json"])  # an arm
    assert json.loads(res.stdout)["removed"] == ["local-v26-A"]
    assert [i.name for i in lane.list_instances()] == ["local-v26"]


def test_down_all_with_a_target_takes_down_its_matches_only(lane_of_four: None) -> None:
    res = runner.invoke(app, ["down", "local-v27", "--all", "--json"])
    assert res.exit_code == 0, res.output
    assert sorted(json.loads(res.stdout)["removed"]) == ["local-B", "local-local-v27"]
    assert sorted(i.name for i in lane.list_instances()) == ["local-v26", "local-v26-A"]


def test_logs_of_several_matches_names_them_and_suggests_a_command_that_exists(lane_of_four: None) -> None:
    res = runner.invoke(app, ["logs", "local-v27"])
    assert res.exit_code == 1
    err = " ".join(res.stderr.split())
    assert "name one of them (`gb300lane logs local-" in err and "--all" not in err and "--name" not in err
    res = runner.invoke(app, ["logs"])
    assert res.exit_code == 1 and "--all" not in res.stderr and "`gb300lane logs local-" in " ".join(res.stderr.split())


def test_status_takes_a_target(lane_of_four: None) -> None:
    res = runner.invoke(app, ["status", "local-v27", "--json"])
    assert res.exit_code == 0, res.output
    assert sorted(r["info"]["name"] for r in json.loads(res.stdout)["instances"]) == ["local-B", "local-local-v27"]
    res = runner.invoke(app, ["status", "A2"])
    assert res.exit_code == 1 and "no instance matches A2" in res.stderr
