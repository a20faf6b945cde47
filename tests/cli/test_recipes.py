"""The `recipes` group and `render`: help everywhere, one-line errors, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gb300lane.cli.main import app as main_app
from gb300lane.cli.recipes import recipes_app
from gb300lane.paths import shipped

RECIPES = str(shipped("recipes"))


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    """The real app: its group maps library errors to one line and an exit code."""
    return main_app


def run(app: typer.Typer, *args: str):
    return CliRunner().invoke(app, list(args))


def test_every_command_has_help(app: typer.Typer) -> None:
    root = typer.main.get_command(app)
    assert hasattr(root, "commands")
    group = root.commands["recipes"]
    commands = {"render": root.commands["render"], **{f"recipes {n}": c for n, c in group.commands.items()}}
    assert set(commands) == {"render", "recipes list", "recipes show", "recipes diff", "recipes hash", "recipes lint"}
    assert group.help
    for name, command in commands.items():
        assert command.help and command.help.strip(), f"{name} has no help"
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"{name} {param.opts} has no help"
        result = run(app, *name.split(), "--help")
        assert result.exit_code == 0, (name, result.output)


def test_diff_shows_one_key_and_predicts_hash_hit(app: typer.Typer) -> None:
    result = run(app, "recipes", "diff", "v26", "v27", "--recipes-dir", RECIPES)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "v26 -> v27: 1 changed key"
    assert lines[1].strip() == 'speculative.rejection_sample_method: "standard" -> "block"  (not a hash input)'
    assert lines[-1] == "hash unchanged: expect a hash-hit boot"


def test_diff_json(app: typer.Typer) -> None:
    result = run(app, "recipes", "diff", "v26", "v27", "--recipes-dir", RECIPES, "--json")
    data = json.loads(result.output)
    assert data["hash_changed"] is False and len(data["changes"]) == 1
    assert data["prediction"] == "hash unchanged: expect a hash-hit boot"


def test_hash_equal_for_v26_and_v27(app: typer.Typer) -> None:
    a = run(app, "recipes", "hash", "v26", "--recipes-dir", RECIPES).output.strip()
    b = run(app, "recipes", "hash", "v27", "--recipes-dir", RECIPES).output.strip()
    assert a == b and len(a) == 16
    data = json.loads(run(app, "recipes", "hash", "v27", "--recipes-dir", RECIPES, "--json").output)
    assert data["fingerprint"] == a and "engine_args.compilation_config" in data["hash_inputs"]


def test_list_and_show(app: typer.Typer) -> None:
    rows = json.loads(run(app, "recipes", "list", "--recipes-dir", RECIPES, "--json").output)
    assert {r["name"]: r["extends"] for r in rows}["v27"] == "v26"
    shown = run(app, "recipes", "show", "v27", "--recipes-dir", RECIPES)
    assert "rejection_sample_method: block" in shown.output
    data = json.loads(run(app, "recipes", "show", "v27", "--recipes-dir", RECIPES, "--json").output)
    assert data["speculative"]["rejection_sample_method"] == "block"


def test_lint_exit_codes(app: typer.Typer, tmp_path: Path) -> None:
    ok = run(app, "recipes", "lint", "v27", "--recipes-dir", RECIPES)
    assert ok.exit_code == 0 and "v27: ok" in ok.output
    warn = run(app, "recipes", "lint", "k9", "--recipes-dir", RECIPES)
    assert warn.exit_code == 0 and "[k-outside-trained-block]" in warn.output
    text = (shipped("recipes") / "local-v27.yaml").read_text().replace("name: local-v27", "name: greedy")
    text += "  draft_sample_method: greedy\n"
    for parent in ("local-v26",):
        (tmp_path / f"{parent}.yaml").write_text((shipped("recipes") / f"{parent}.yaml").read_text())
    (tmp_path / "greedy.yaml").write_text(text)
    bad = run(app, "recipes", "lint", "greedy", "--recipes-dir", str(tmp_path))
    assert bad.exit_code == 1 and "[block-needs-probabilistic-drafts]" in bad.output


def test_render_formats_and_out(app: typer.Typer, tmp_path: Path) -> None:
    spec = json.loads(run(app, "render", "v27", "--format", "json", "--recipes-dir", RECIPES).output)
    assert spec["containers"][0]["role"] == "main"
    result = run(app, "render", "v27", "--format", "docker-run", "--out", str(tmp_path), "--recipes-dir", RECIPES)
    assert result.exit_code == 0
    script = tmp_path / "docker-run.sh"
    assert script.stat().st_mode & 0o111 and script.read_text().startswith("#!/usr/bin/env bash")
    compose = run(app, "render", "v27", "--recipes-dir", RECIPES)
    assert compose.output.startswith("# Rendered by gb300lane") and "services:" in compose.output


def test_errors_are_one_line_exit_1_and_usage_is_exit_2(app: typer.Typer, tmp_path: Path) -> None:
    for args in (
        ["recipes", "show", "../x"],
        ["recipes", "show", "nope", "--recipes-dir", RECIPES],
        ["render", "nope", "--recipes-dir", RECIPES],
    ):
        result = run(app, *args)
        assert result.exit_code == 1, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1 and "error:" in result.output
    assert run(app, "render", "v27", "--format", "yaml").exit_code == 2
    assert run(app, "recipes", "diff", "v26").exit_code == 2
    assert not any(tmp_path.iterdir())


def test_render_bad_recipe_writes_nothing(app: typer.Typer, tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("a: 1\na: 2\n")
    out = tmp_path / "out"
    result = run(app, "render", "bad", "--out", str(out), "--recipes-dir", str(tmp_path))
    assert result.exit_code == 1 and "duplicate key 'a'" in result.output
    assert not out.exists()


def test_group_is_registered_on_the_real_app() -> None:
    from gb300lane.cli.main import app as real_app

    root = typer.main.get_command(real_app)
    assert "render" in root.commands and "recipes" in root.commands
    assert set(root.commands["recipes"].commands) == set(typer.main.get_command(recipes_app).commands)


def test_list_shows_every_recipe_even_when_one_does_not_load(app: typer.Typer, tmp_path: Path) -> None:
    for name in ("local-v26", "local-v27"):
        (tmp_path / f"{name}.yaml").write_text((shipped("recipes") / f"{name}.yaml").read_text())
    (tmp_path / "broken.yaml").write_text("schema_version: 1\nname: broken\nextends: nowhere\n")
    result = run(app, "recipes", "list", "--recipes-dir", str(tmp_path), "--json")
    assert result.exit_code == 1
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"broken", "local-v26", "local-v27"}
    assert rows["local-v27"]["error"] is None and rows["local-v27"]["extends"] == "local-v26"
    assert "nowhere" in rows["broken"]["error"]
    table = run(app, "recipes", "list", "--recipes-dir", str(tmp_path))
    assert table.exit_code == 1 and "local-v26" in table.output and "does not load" in table.output
