"""Every command of the whole CLI has help text, and `--help` works on each of them."""

from __future__ import annotations

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
    # In process: the error boundary is the app's (main() only calls it); other tests run the console script.
    usage = CliRunner().invoke(app, ["recipes", "show"])
    assert usage.exit_code == 2
    missing = CliRunner().invoke(app, ["recipes", "show", "no-such-recipe"])
    assert missing.exit_code == 1 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "no recipe named 'no-such-recipe'" in missing.stderr
    assert "Traceback" not in missing.output


_OWN_HELP = {("engine", "serve"), ("engine", "sidecar")}  # they hand --help to their vLLM-style parser
_TYPE_METAVARS = ("<bool>", "<str>", "<int", "<float>", "<path>", "list[", "Optional")


@pytest.mark.parametrize(
    "path", [p for p, _ in COMMANDS if p not in _OWN_HELP], ids=lambda p: " ".join(p) or "gb300lane"
)
def test_help_fits_80_columns_and_names_every_option_whole(path: tuple[str, ...]) -> None:
    cmd = dict(COMMANDS)[path]
    for columns in ("80", "200"):
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": columns})
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        too_wide = [line for line in lines if len(line) > 80]
        assert not too_wide, f"`gb300lane {' '.join(path)} --help` with COLUMNS={columns}: {too_wide}"
        words = set(result.output.replace(",", " ").replace("/", " ").split())
        for param in cmd.params:
            for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
                if opt.startswith("-"):
                    assert opt in words, f"`gb300lane {' '.join(path)} --help` does not show {opt} whole"
        shown = [m for m in _TYPE_METAVARS if m in result.output]
        assert not shown, f"`gb300lane {' '.join(path)} --help` shows type metavars {shown}"


def test_flags_take_no_metavar_and_values_are_named() -> None:
    text = CliRunner().invoke(app, ["up", "--help"]).output
    assert "--dark " in text and "--dark <" not in text and "--dark BOOL" not in text
    assert "--port PORT" in text and "Usage: " in text and " up [OPTIONS] RECIPE" in text
    assert "--format [compose|docker-run|json|k8s]" in CliRunner().invoke(app, ["render", "--help"]).output


def test_version_comes_from_the_package_metadata() -> None:
    import gb300lane
    from gb300lane.cli.main import installed_version

    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0 and out.output == f"gb300lane {installed_version()}\n"
    assert installed_version() == gb300lane.__version__  # pyproject.toml and the package say the same version
    as_json = CliRunner().invoke(app, ["version", "--json"])
    assert as_json.exit_code == 0 and '"version": "' + gb300lane.__version__ + '"' in as_json.output


def test_shell_completion_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    # `--show-completion` takes no value: it prints the script for the shell it finds among its parents, and
    # `make test` runs under sh, which typer has no script for. The test asks as if from bash.
    monkeypatch.setattr("typer.completion._get_shell_name", lambda: "bash")
    script = runner.invoke(app, ["--show-completion"], prog_name="gb300lane")
    assert script.exit_code == 0 and "_GB300LANE_COMPLETE" in script.output
    env = {"_GB300LANE_COMPLETE": "complete_bash", "COMP_WORDS": "gb300lane up --allow", "COMP_CWORD": "2"}
    done = runner.invoke(app, [], prog_name="gb300lane", env=env)
    assert done.output.split() == ["--allow-outside-trained-block"]
    env = {"_GB300LANE_COMPLETE": "complete_bash", "COMP_WORDS": "gb300lane car", "COMP_CWORD": "1"}
    assert runner.invoke(app, [], prog_name="gb300lane", env=env).output.split() == ["card"]
    # Recipe and card names complete too (the shipped ones here).
    from gb300lane import paths

    cards = sorted({p.stem for d in paths.card_dirs() for p in d.glob("local-br*.yaml")})
    assert "local-br1" in cards
    for words, expected in (
        ("gb300lane up local-v2", ["local-v26", "local-v27"]),
        ("gb300lane card run local-br", cards),
    ):
        env = {"_GB300LANE_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        assert runner.invoke(app, [], prog_name="gb300lane", env=env).output.split() == expected


#: Commands whose output is not data a program reads, or is already a machine format: why they have no --json.
NO_JSON = {
    ("render",): "prints the rendered files; `--format json` is the JSON rendering",
    ("logs",): "a container's own log text",
    ("metrics",): "Prometheus text exposition, for node_exporter",
    ("engine", "serve"): "a server",
    ("engine", "sidecar"): "a server",
    ("bench", "export"): "converts a window result to vLLM's JSON or CSV",
}


def test_every_command_whose_output_is_data_takes_json() -> None:
    leaves = [p for p, c in COMMANDS if p and not getattr(c, "commands", None)]
    without = {p for p in leaves if "--json" not in {o for param in dict(COMMANDS)[p].params for o in param.opts}}
    assert without == set(NO_JSON), (
        f"without --json and not exempted: {sorted(without - set(NO_JSON))}; "
        f"exempted but has --json (or gone): {sorted(set(NO_JSON) - without)}"
    )
