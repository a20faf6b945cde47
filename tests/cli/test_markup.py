"""User text is printed as text: rich markup in a reason, a description or a name never breaks a command."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gb300lane.cli.main import app
from gb300lane.testing.simlane import SimLane

runner = CliRunner()


@pytest.fixture
def lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimLane:
    sim = SimLane.create(tmp_path / "lane.json", {"local-v26": {}, "local-v27": {}}, {})
    monkeypatch.setenv("GB300LANE_LANE_OPS", f"sim:{sim.path}")
    monkeypatch.setenv("COLUMNS", "400")
    return sim


@pytest.mark.parametrize(
    "reason", ["a[/]b", "[bold]x[/bold] [red]", "[link=file:///etc]y[/link]", "\\[x]", "go :rocket:"]
)
def test_a_reason_with_markup_promotes_and_history_prints_it(lane: SimLane, reason: str) -> None:
    first = runner.invoke(app, ["promote", "local-v26", "--force", "--reason", reason])
    assert first.exit_code == 0, first.output
    assert reason in first.output
    for _ in range(2):  # every later call too
        history = runner.invoke(app, ["history"])
        assert history.exit_code == 0, history.output
        assert reason in history.output
