"""`lane.kept_problem`: whether a kept instance is the boot a card measured and can start as production as it stands.

Process runtime, embedded engine, time scale 0, free ports. A dark boot of a
recipe that binds loopback anyway serves exactly as production would; a dark
boot of one that binds all interfaces does not (a kept instance keeps its
address); an instance booted again, or removed, is not the one measured.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gb300lane import lane
from gb300lane.testing.free_ports import free_port

# End to end: each test boots the embedded engine as processes through the lane.
pytestmark = pytest.mark.slow


def _recipe(folder: Path, name: str, **lane_over: object) -> str:
    body = {
        "schema_version": 1, "name": name, "extends": "local-v27", "description": f"test recipe {name}",
        "lane": {"port": free_port(), **lane_over}, "sidecar": {"port": free_port(), "image": "gb300lane-engine:local"},
        "engine_args": {"time_scale": 0},
    }  # fmt: skip
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(body))
    return name


def test_a_dark_kept_instance_on_loopback_can_start_as_production_until_it_is_booted_again(recipes: Path) -> None:
    name = _recipe(recipes, "t-kept")
    first = lane.up(name, dark=True, arm="B", runtime="process")
    lane.stop_instance(first.instance)
    assert lane.kept_problem(first.instance, first.run) is None
    assert lane.kept_problem(first.instance, "20000101T000000-0000") == (
        f"was booted again since (run {first.run}, not 20000101T000000-0000)"
    )
    lane.remove_instance(first.instance)
    assert lane.kept_problem(first.instance, first.run) == "is no longer on the lane (removed since)"


def test_a_dark_kept_instance_of_a_recipe_that_binds_all_interfaces_cannot(recipes: Path) -> None:
    name = _recipe(recipes, "t-open", bind="0.0.0.0")
    report = lane.up(name, dark=True, arm="B", runtime="process")
    lane.stop_instance(report.instance)
    assert lane.kept_problem(report.instance, report.run) == (
        "was booted dark and listens on loopback only, while t-open serves production on 0.0.0.0 "
        "(a kept instance keeps the address it was created with)"
    )
