"""CLI group `recipes` (list, show, diff, hash, lint) and the top-level `render` command."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gb300lane.cli.common import console, err_console, fail, print_json

if TYPE_CHECKING:  # the recipe schemas are imported when a command runs, not for `--help`
    from gb300lane.recipes import RecipeSummary

recipes_app = typer.Typer(
    help="Versioned lane recipes: list, show, diff, hash and lint them.",
    no_args_is_help=True,
)


class RenderFormat(str, enum.Enum):
    compose = "compose"
    docker_run = "docker-run"
    json = "json"
    k8s = "k8s"


_SHOW_SECRETS = typer.Option(
    False, "--show-secrets", help="print secret values (by name or by value) instead of <secret>"
)


def _say_masked(masked: list[str]) -> None:
    if masked:
        err_console.print(
            f"note: {len(masked)} secret value(s) shown as <secret> ({', '.join(masked)}); --show-secrets prints them",
            highlight=False,
            soft_wrap=True,
        )


def _dir_option() -> Any:  # typer's OptionInfo, the parameter's default (the parameter is an Optional[Path])
    return typer.Option(
        None, "--recipes-dir", help="directory of recipe files (default: GB300LANE_RECIPES_DIR or ./recipes)"
    )


@recipes_app.command("list", help="Every recipe with its parent, engine and one-line description.")
def list_cmd(
    recipes_dir: Path | None = _dir_option(),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    from gb300lane.recipes import list_recipes

    rows = list_recipes(recipes_dir)
    if as_json:
        print_json([r.model_dump() for r in rows])
    else:
        _print_recipe_table(rows)
    broken = [r.name for r in rows if r.error]
    if broken:
        fail(
            f"{len(broken)} recipe(s) do not load ({', '.join(broken)}); `gb300lane recipes show NAME` gives the error"
        )


def _print_recipe_table(rows: list[RecipeSummary]) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table("recipe", "extends", "engine", "description")
    for r in rows:
        if r.error:
            table.add_row(Text(r.name, style="red"), "-", "-", Text(f"does not load: {r.error}", style="red"))
        else:
            table.add_row(Text(r.name), Text(r.extends or "-"), Text(r.engine or "-"), Text(r.description))
    console.print(table)


@recipes_app.command("show", help="The resolved recipe (extends merged), as YAML or --json.")
def show_cmd(
    name: str = typer.Argument(..., help="recipe name, e.g. v27"),
    recipes_dir: Path | None = _dir_option(),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of YAML"),
    show_secrets: bool = _SHOW_SECRETS,
) -> None:
    import yaml

    from gb300lane.recipes import load_recipe
    from gb300lane.recipes.masking import mask_recipe_data

    recipe = load_recipe(name, recipes_dir)
    data = recipe.model_dump(mode="json")
    if not show_secrets:
        data, masked = mask_recipe_data(data)
        _say_masked(masked)
    if as_json:
        print_json(data)
    else:
        typer.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120), nl=False)


@recipes_app.command("diff", help="Every changed key (old -> new, hash input or not) and the boot it predicts.")
def diff_cmd(
    a: str = typer.Argument(..., help="the recipe to compare from, e.g. v26"),
    b: str = typer.Argument(..., help="the recipe to compare to, e.g. v27"),
    recipes_dir: Path | None = _dir_option(),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
) -> None:
    from gb300lane.recipes import diff_recipes, load_recipe

    d = diff_recipes(load_recipe(a, recipes_dir), load_recipe(b, recipes_dir))
    if as_json:
        print_json({**d.model_dump(mode="json"), "prediction": d.prediction})
        return
    typer.echo(f"{d.a} -> {d.b}: {len(d.changes)} changed key{'s' if len(d.changes) != 1 else ''}")
    for c in d.changes:
        tag = "hash input" if c.hash_input else "not a hash input"
        typer.echo(f"  {c.key}: {_show(c.old)} -> {_show(c.new)}  ({tag})")
    typer.echo(d.prediction)


def _show(value: object) -> str:
    return "(absent)" if value is None else json.dumps(value, separators=(",", ":"))


@recipes_app.command("hash", help="The recipe's autotune fingerprint over the image's hash inputs.")
def hash_cmd(
    name: str = typer.Argument(..., help="recipe name, e.g. v27"),
    recipes_dir: Path | None = _dir_option(),
    as_json: bool = typer.Option(False, "--json", help="print the fingerprint with its input values as JSON"),
) -> None:
    from gb300lane.recipes import fingerprint, hash_values, load_recipe

    recipe = load_recipe(name, recipes_dir)
    fp = fingerprint(recipe)
    values = hash_values(recipe)
    if as_json:
        print_json({"recipe": recipe.name, "fingerprint": fp, "hash_inputs": values})
    else:
        typer.echo(fp)


@recipes_app.command("lint", help="Rules from the write-up and vLLM (id, severity, fix); exit 1 on any error.")
def lint_cmd(
    name: str | None = typer.Argument(None, help="recipe name; all recipes when omitted"),
    recipes_dir: Path | None = _dir_option(),
    as_json: bool = typer.Option(False, "--json", help="print findings as JSON"),
) -> None:
    from gb300lane.recipes import lint, list_recipes, load_recipe

    names = [name] if name else [s.name for s in list_recipes(recipes_dir)]
    results = {}
    for n in names:
        recipe = load_recipe(n, recipes_dir)
        parent = load_recipe(recipe.extends, recipes_dir) if recipe.extends else None
        results[n] = lint(recipe, parent=parent)
    errors = sum(1 for fs in results.values() for f in fs if f.severity == "error")
    if as_json:
        print_json({n: [f.model_dump() for f in fs] for n, fs in results.items()})
    else:
        for n, findings in results.items():
            if not findings:
                typer.echo(f"{n}: ok")
            for f in findings:
                typer.echo(f"{n}: {f.severity} [{f.rule_id}] {f.key}: {f.message}; fix: {f.fix}")
    if errors:
        raise typer.Exit(1)


def render_cmd(
    name: str = typer.Argument(..., help="recipe name, e.g. v27"),
    fmt: RenderFormat = typer.Option(RenderFormat.compose, "--format", "-f", help="compose, docker-run, json or k8s"),
    out: Path | None = typer.Option(None, "--out", help="write the file into this directory instead of stdout"),
    dark: bool = typer.Option(False, "--dark", help="render the lane dark: bind to 127.0.0.1 only"),
    port: int | None = typer.Option(None, "--port", min=1, max=65535, help="serve the main container on this port"),
    recipes_dir: Path | None = _dir_option(),
    show_secrets: bool = _SHOW_SECRETS,
) -> None:
    from gb300lane.recipes import load_recipe, render
    from gb300lane.recipes.formats import render_format, write_rendered
    from gb300lane.recipes.k8s import render_k8s, write_k8s
    from gb300lane.recipes.masking import mask_lane, mask_recipe

    recipe = load_recipe(name, recipes_dir)
    if fmt is RenderFormat.k8s:
        if not show_secrets:
            recipe, masked = mask_recipe(recipe)
            _say_masked(masked)
        if out is not None:
            typer.echo(str(write_k8s(recipe, out, dark=dark, port=port)))
        else:
            typer.echo(render_k8s(recipe, dark=dark, port=port), nl=False)
        return
    lane = render(recipe, dark=dark, port=port)
    if not show_secrets:
        lane, masked = mask_lane(lane)
        _say_masked(masked)
    if out is not None:
        path = write_rendered(lane, fmt.value, out)
        typer.echo(str(path))
    else:
        typer.echo(render_format(lane, fmt.value), nl=False)


def register(app: typer.Typer) -> None:
    """Attach the `recipes` group and the top-level `render` command."""
    app.add_typer(recipes_app, name="recipes")
    app.command(
        "render",
        help="The exact containers of a recipe: compose file, docker-run script, JSON or Kubernetes manifests.",
    )(render_cmd)
