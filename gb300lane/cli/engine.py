"""CLI group: engine — `serve` and `sidecar`, the same command lines as `python -m gb300lane.engine`, and `drift`
(what changed between two vLLM builds that the lane reads)."""

from __future__ import annotations

import typer

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    group = typer.Typer(
        help="The embedded lane engine: a vLLM-compatible server and the expert-sidecar stand-in.", no_args_is_help=True
    )

    @group.command(
        "serve",
        context_settings=_PASS_THROUGH,
        add_help_option=False,
        help="Serve the builtin model with vLLM's API; takes `vllm serve` flags (see --help).",
    )
    def serve(ctx: typer.Context) -> None:
        from gb300lane.engine.__main__ import main

        raise typer.Exit(main(["serve", *ctx.args]))

    @group.command(
        "sidecar",
        context_settings=_PASS_THROUGH,
        add_help_option=False,
        help="Serve the expert-sidecar stand-in: --host H --port P.",
    )
    def sidecar(ctx: typer.Context) -> None:
        from gb300lane.engine.__main__ import main

        raise typer.Exit(main(["sidecar", *ctx.args]))

    @group.command(
        "drift",
        help="What changed between two vLLM builds that a recipe, a check or a gate reads: the "
        "config schema, the metric families, the boot-log lines. A and B are each a vLLM version with a "
        "shipped golden (0.33.0), a recipe (its interpreter's vLLM; a running instance of it is scraped "
        "live) or an image. Exit 1 when a change would blind a check or a shipped gate.",
    )
    def drift(
        a: str = typer.Argument(..., help="Side A: a version (0.32.0), a recipe (cpu-v26) or an image reference."),
        b: str = typer.Argument(..., help="Side B, the same kinds."),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    ) -> None:
        from gb300lane.cli.common import console, print_json
        from gb300lane.lane.drift import compare, resolve

        report = compare(resolve(a), resolve(b), recipe_keys=_recipe_keys(), gates=_shipped_gates())
        if as_json:
            print_json(report.model_dump(mode="json"))
        else:
            console.print(report.to_text(), highlight=False, soft_wrap=True)
        if report.blinds:
            raise typer.Exit(1)

    app.add_typer(group, name="engine")


def _recipe_keys() -> dict[str, dict[str, object]]:
    """Dotted engine keys (speculative.*, extra_args, compilation_config) -> {shipped recipe that sets it: value}."""
    from gb300lane.recipes import list_recipes, load_recipe

    out: dict[str, dict[str, object]] = {}
    for summary in list_recipes():
        recipe = load_recipe(summary.name)
        keys = {f"speculative.{k}": v for k, v in recipe.speculative.model_dump(exclude_none=True).items()}
        keys.update({f"engine_args.extra_args.{k}": v for k, v in recipe.engine_args.extra_args.items()})
        keys.update(
            {f"engine_args.compilation_config.{k}": v for k, v in recipe.engine_args.compilation_config.items()}
        )
        for key, value in keys.items():
            out.setdefault(key, {})[recipe.name] = value
    return out


def _shipped_gates() -> dict[str, list[tuple[str, str]]]:
    """Each shipped card's gates as (id, kind)."""
    from importlib import resources

    from gb300lane.cards import load_card

    out: dict[str, list[tuple[str, str]]] = {}
    for item in sorted(resources.files("gb300lane.data").joinpath("cards").iterdir(), key=lambda t: t.name):
        if item.name.endswith(".yaml"):
            card, _ = load_card(str(item))
            out[card.name] = [(g.id, g.kind) for g in card.gates]
    return out
