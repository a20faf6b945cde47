"""Arm and instance names are names, never paths: `up --name ../../x` and `--name "a b"` write nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane import paths
from gb300lane.cli.main import app
from gb300lane.errors import StateError
from gb300lane.lane import records as instances


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")} if root.exists() else set()


@pytest.mark.parametrize("arm", ["../../x", "a b", "x/y", "-x", "x\n", ".hidden", "a" * 65])
def test_up_refuses_an_arm_that_is_not_a_name(arm: str, tmp_path: Path) -> None:
    state = paths.state_dir()
    around = state.parent.parent
    before = _files(around)
    result = CliRunner().invoke(app, ["up", "local-v27", "--name", arm])
    assert result.exit_code == 1, result.output
    assert "is not an arm name" in result.output and "Traceback" not in result.output
    assert _files(around) == before  # nothing written, inside the state directory or out of it


def test_records_are_only_ever_inside_the_instances_directory() -> None:
    with pytest.raises(StateError, match="is not an instance name"):
        instances.record_path("../escape")
    assert instances.load("../../etc/passwd") is None  # never read from outside
    instances.delete("../x")  # a no-op, never an unlink outside
    assert not (paths.state_dir() / "lane" / "x.json").exists()
    assert os.path.dirname(instances.record_path("local-B")) == str(instances.instances_dir())
