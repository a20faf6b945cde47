"""Every command of the whole CLI has help text, and `--help` works on each of them."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gb300lane.cli.main import app


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, cmd)]
    subcommands = getattr(cmd, "commands", None)  # a group (typer vendors its own click)
    if subcommands:
        for name, sub in sorted(subcommands.items()):
            found += _walk(sub, path + (name,))
    return found


COMMANDS = _walk(typer.main.get_command(app))


def test_the_cli_has_every_group_of_the_product() -> None:
    top = {path[0] for path, _ in COMMANDS if path}
    assert {"recipes", "render", "spec", "engine", "up", "down", "status", "logs", "bench", "smoke",
            "card", "promote", "rollback", "history", "prune"} <= top  # fmt: skip


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "gb300lane")
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    cmd = dict(COMMANDS)[path]
    assert (cmd.help or cmd.short_help or "").strip(), f"`gb300lane {' '.join(path)}` has no help text"
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "usage:" in result.output.lower()  # engine serve|sidecar hand --help to their vLLM-style parser


def test_usage_errors_exit_2_and_lane_errors_exit_1() -> None:
    usage = subprocess.run([sys.executable, "-m", "gb300lane", "recipes", "show"], capture_output=True, text=True)
    assert usage.returncode == 2
    missing = subprocess.run(
        [sys.executable, "-m", "gb300lane", "recipes", "show", "no-such-recipe"], capture_output=True, text=True
    )
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1 and "no recipe named 'no-such-recipe'" in missing.stderr
    assert "Traceback" not in missing.stderr
