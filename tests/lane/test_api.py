"""The lane's and runtimes' public API, the one-importer-of-docker rule, and the CLI's help."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import gb300lane.lane as lane
import gb300lane.runtime as runtime
from gb300lane.cli.main import app
from gb300lane.runtime.image import package_root

PACKAGE = package_root()


def test_public_api_is_pinned_and_sorted() -> None:
    assert lane.__all__ == sorted(lane.__all__)
    assert {"up", "down", "stop_instance", "start_instance", "remove_instance", "list_instances", "status",
            "foreign_clients", "BootReport"} <= set(lane.__all__)  # fmt: skip
    assert runtime.__all__ == sorted(runtime.__all__)
    for name in lane.__all__ + runtime.__all__:
        assert hasattr(lane, name) or hasattr(runtime, name)


def test_only_runtime_docker_imports_the_docker_sdk() -> None:
    pattern = re.compile(r"^\s*(import docker\b|from docker\b)", re.MULTILINE)
    importers = sorted(
        str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())
    )
    assert importers == ["gb300lane/runtime/docker.py"]


@pytest.mark.parametrize("argv", [["up"], ["down"], ["status"], ["logs"], ["engine-image", "build"]])
def test_every_lane_command_has_help(argv: list[str]) -> None:
    result = CliRunner().invoke(app, [*argv, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output and len(result.output.strip().splitlines()) > 3
