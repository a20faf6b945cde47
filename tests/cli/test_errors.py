"""The one CLI error boundary: library errors become one line and their exit code, for every command."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from gb300lane.cli.main import LaneGroup, app
from gb300lane.errors import LaneError
from gb300lane.models import FrozenModel


class _Refused(LaneError):
    exit_code = 3


class _Strict(FrozenModel):
    port: int


def _app() -> typer.Typer:
    demo = typer.Typer(cls=LaneGroup)
    sub = typer.Typer()

    @demo.command("refuse")
    def refuse() -> None:
        raise _Refused("state.json: refused [/] for a reason; fix it")

    @sub.command("validate")
    def validate() -> None:
        _Strict.model_validate({"port": "x", "extra": 1})

    demo.add_typer(sub, name="nested")
    return demo


def test_a_lane_error_keeps_its_exit_code_and_is_printed_as_text() -> None:
    result = CliRunner().invoke(_app(), ["refuse"])
    assert result.exit_code == 3
    assert result.output.strip() == "error: state.json: refused [/] for a reason; fix it"


def test_a_validation_error_in_a_nested_group_is_one_line_with_dotted_keys() -> None:
    result = CliRunner().invoke(_app(), ["nested", "validate"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "port = 'x'" in result.output and "extra: unknown key" in result.output


def test_the_real_app_uses_the_boundary_and_commands_do_not_catch() -> None:
    assert isinstance(typer.main.get_command(app), LaneGroup)
    cli = Path(__file__).resolve().parents[2] / "gb300lane" / "cli"
    catching = [p.name for p in cli.glob("*.py") if p.name != "main.py" and "except LaneError" in p.read_text()]
    assert catching == []
