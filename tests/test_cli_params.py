"""Parameter values convert by click's rules, without pydantic: every parameter of the CLI, and the errors they give."""

from __future__ import annotations

import enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
import typer.main
from typer.models import OptionInfo
from typer.testing import CliRunner

from gb300lane.cli.main import app
import gb300lane
from gb300lane.cli.params import ClickRules, ConvertingArgument, ConvertingOption, convert_with_click_rules


def _params(cmd: Any) -> list[tuple[str, Any]]:
    found = [(cmd.name or "gb300lane", p) for p in cmd.params]
    for sub in getattr(cmd, "commands", {}).values():
        found += _params(sub)
    return found


def test_every_parameter_of_the_cli_converts_without_typers_pydantic_adapter() -> None:
    root = typer.main.get_command(app)
    convert_with_click_rules(root)
    params = _params(root)
    assert len(params) > 100
    left = [f"{cmd} {p.name}" for cmd, p in params
            if not (isinstance(p, (ConvertingOption, ConvertingArgument)) and isinstance(p.rules, ClickRules))]
    assert not left, f"no converter in gb300lane.cli.params for: {', '.join(left)} (add the kind there)"


def test_the_cli_uses_only_typers_public_names() -> None:
    # typer's private modules (typer._coercion, typer._click, ...) change without notice between releases.
    import ast

    found = []
    for f in sorted(Path(gb300lane.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.ImportFrom) and node.module in ("typer", "click"):
                names += [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{f.name}:{node.lineno}: {n}" for n in names
                      if n.split(".")[0] in ("typer", "click") and any(p.startswith("_") for p in n.split(".")[1:])]
        text = f.read_text(encoding="utf-8")
        found += [f"{f.name}: {m}" for m in ("._runtime_param", "typer._") if m in text]
    assert not found, found


def test_a_missing_required_argument_is_clicks_usage_error() -> None:
    result = CliRunner().invoke(app, ["recipes", "show"])
    assert result.exit_code == 2 and "Missing argument 'NAME'" in result.output, result.output


def _rules(annotation: Any, **info: Any) -> ClickRules:
    return ClickRules(annotation=annotation, parameter_info=OptionInfo(**info))


class Colour(enum.Enum):
    RED = "red"
    DARK_BLUE = "dark-blue"


def _coerce(rules: ClickRules, value: Any, *, multiple: bool = False) -> Any:
    param = SimpleNamespace(multiple=multiple, nargs=1)  # what typer's coerce reads of the parameter
    return rules.coerce(value, param=param, ctx=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("annotation", "info", "value", "expected"),
    [
        (int, {}, "42", 42), (int, {}, " -3 ", -3), (float, {}, "2.5", 2.5), (float, {}, "7", 7.0),
        (str, {}, "v27", "v27"), (bool, {}, True, True), (bool, {}, "off", False), (bool, {}, "YES", True),
        (Path, {}, "a/b.yaml", Path("a/b.yaml")), (Colour, {}, "dark-blue", Colour.DARK_BLUE),
        (Colour, {"case_sensitive": False}, "RED", Colour.RED), (int, {"min": 1, "max": 65535}, "65535", 65535),
    ],
)  # fmt: skip
def test_a_value_converts_as_click_would(annotation: Any, info: dict[str, Any], value: Any, expected: Any) -> None:
    got = _coerce(_rules(annotation, **info), value)
    assert got == expected and type(got) is type(expected)


def test_lists_convert_each_item_and_none_stays_none() -> None:
    assert _coerce(_rules(list[int]), ("1", "2"), multiple=True) == [1, 2]
    assert _coerce(_rules(list[Path]), ["x"], multiple=True) == [Path("x")]
    assert _coerce(_rules(int), None) is None


@pytest.mark.parametrize(
    ("annotation", "info", "value", "message"),
    [
        (int, {}, "abc", "'abc' is not a valid integer."), (int, {}, "1.5", "'1.5' is not a valid integer."),
        (float, {}, "fast", "'fast' is not a valid float."), (bool, {}, "maybe", "'maybe' is not a valid boolean."),
        (int, {"min": 1, "max": 65535}, "0", "0 is not in the range 1<=x<=65535."),
        (int, {"min": 1}, "0", "0 is not in the range x>=1."),
        (Colour, {}, "RED", "'RED' is not one of 'red', 'dark-blue'."),
    ],
)  # fmt: skip
def test_a_bad_value_says_what_is_wrong(annotation: Any, info: dict[str, Any], value: str, message: str) -> None:
    with pytest.raises(typer.BadParameter) as exc:
        _coerce(_rules(annotation, **info), value)
    assert exc.value.message == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["up", "v27", "--port", "abc"], "Invalid value for '--port': 'abc' is not a valid integer."),
        (["render", "v27", "--port", "0"], "Invalid value for '--port': 0 is not in the range 1<=x<=65535."),
        (["render", "v27", "-f", "yaml"], "'yaml' is not one of 'compose', 'docker-run', 'json', 'k8s'."),
    ],
)  # fmt: skip
def test_a_bad_value_on_the_command_line_is_a_usage_error(argv: list[str], message: str) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output
