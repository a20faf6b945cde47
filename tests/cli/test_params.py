"""Parameter values convert by typer's own converters: the CLI builds no converter of its own and replaces no
class of typer's parameters, so it runs on the typers a user has (the pin in pyproject.toml); bad values are
usage errors (exit code 2) that name the option."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from typer.core import TyperOption
from typer.testing import CliRunner

import gb300lane
from gb300lane.cli.main import app


def _params(cmd: Any) -> list[tuple[str, Any]]:
    found = [(cmd.name or "gb300lane", p) for p in cmd.params]
    for sub in getattr(cmd, "commands", {}).values():
        found += _params(sub)
    return found


def test_every_option_of_the_cli_is_typers_own() -> None:
    params = _params(typer.main.get_command(app))
    assert len(params) > 100
    options = [(cmd, p) for cmd, p in params if isinstance(p, TyperOption)]
    replaced = [f"{cmd} {p.name}: {type(p).__module__}.{type(p).__qualname__}" for cmd, p in options
                if type(p) is not TyperOption]  # fmt: skip
    assert len(options) > 100 and not replaced, replaced


def test_the_cli_uses_only_typers_public_names() -> None:
    # typer's private modules (typer._coercion, typer._click, ...) change without notice between releases.
    found = []
    for f in sorted(Path(gb300lane.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])  # fmt: skip
            if isinstance(node, ast.ImportFrom) and node.module in ("typer", "click"):
                names += [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{f.name}:{node.lineno}: {n}" for n in names
                      if n.split(".")[0] in ("typer", "click") and any(p.startswith("_") for p in n.split(".")[1:])]  # fmt: skip
        text = f.read_text(encoding="utf-8")
        found += [f"{f.name}: {m}" for m in ("._runtime_param", "typer._", "rules = ClickRules") if m in text]
    assert not found, found


def test_a_missing_required_argument_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["recipes", "show"])
    assert result.exit_code == 2 and "Missing argument 'NAME'" in result.output, result.output


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["up", "v27", "--port", "abc"], "'--port'"),
        (["render", "v27", "--port", "1.5"], "'--port'"),
        (["render", "v27", "--port", "0"], "'--port'"),
        (["render", "v27", "-f", "yaml"], "'--format'"),
        (["spec", "advise", "--a-p", "0.7,0.5", "--step", "1:10", "--trained-block", "five"], "'--trained-block'"),
    ],
)  # fmt: skip
def test_a_bad_value_on_the_command_line_is_a_usage_error_naming_the_option(
    argv: list[str], option: str | None
) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "Invalid value for" in result.output or "No such option" in result.output, result.output
    if option is not None:
        assert option in result.output, result.output


def test_values_convert_to_the_types_the_commands_declare(tmp_path: Path) -> None:
    # An int with a range, an Enum of choices and a path, through the whole command.
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["render", "local-v27", "--port", "31106", "-f", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = list(out.iterdir())
    assert written and "31106" in written[0].read_text(encoding="utf-8")
    # A list of strings and a float.
    result = CliRunner().invoke(app, ["spec", "advise", "--a-p", "0.7,0.5", "--step", "1:10", "--step", "2:11"])
    assert result.exit_code == 0, result.output
