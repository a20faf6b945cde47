"""Which recipe keys a boot's flag check verifies, against which baseline, and where each key lands.

By default those are the keys that differ from a baseline recipe, and the
baseline is named in the boot report: the recipe the caller names (production,
a card's control) when it serves the same lane; else the lane's last boot of
this recipe (the keys changed since, read from that boot's report); else the
recipe's parent (`extends`). A recipe of another lane is never the baseline: it
runs another engine, whose keys render elsewhere (the embedded engine's
`--kv-pool-tokens` is no vLLM flag). The lane never looks production up itself.

Where each key lands in the running container (a flag, the program, env, or
nothing) is the engine's own rendering (`recipes.containers.key_rendering`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import JsonValue

from gb300lane.errors import LaneError, RecipeError
from gb300lane.lane.report import Baseline, latest_recipe_boot
from gb300lane.recipes import Recipe, diff_recipes, get_key, load_recipe, validate_raw
from gb300lane.recipes.containers import LOOPBACK, KeyRendering, key_rendering


def choose_baseline(
    recipe: Recipe, given: str | None, *, role: str | None = None, recipes_dir: Path | None = None
) -> tuple[Baseline, list[str]]:
    """The baseline of a boot's flag check and the keys that differ from it (see the module docstring)."""
    skipped = None
    if given and given != recipe.name:
        try:
            base = load_recipe(given, recipes_dir)
        except RecipeError as exc:
            skipped = f"{role or 'recipe'} {given} does not load ({str(exc).splitlines()[0]})"
        else:
            if base.lane.name == recipe.lane.name:
                return (
                    Baseline(kind="given", recipe=given, role=role),
                    [c.key for c in diff_recipes(base, recipe).changes],
                )
            skipped = (
                f"{role or 'recipe'} {given} serves lane {base.lane.name} ({base.engine} engine), not "
                f"{recipe.lane.name}: its keys render for another engine"
            )
    last = latest_recipe_boot(recipe.name, recipe.lane.name)
    if last is not None and last.recipe_json is not None:
        try:
            before = validate_raw(last.recipe_json, f"boot report {last.path}")
        except LaneError:
            before = None  # a report of an older recipe schema: fall through to the parent
        if before is not None:
            return (
                Baseline(kind="last_boot", recipe=recipe.name, report=last.path, skipped=skipped),
                [c.key for c in diff_recipes(before, recipe).changes],
            )
    if recipe.extends is not None:
        try:
            parent = load_recipe(recipe.extends, recipes_dir)
        except RecipeError:
            return Baseline(kind="none", skipped=skipped), []
        return (
            Baseline(kind="parent", recipe=recipe.extends, skipped=skipped),
            [c.key for c in diff_recipes(parent, recipe).changes],
        )
    return Baseline(kind="none", skipped=skipped), []


def default_check_keys(recipe: Recipe, baseline: str | None, *, recipes_dir: Path | None = None) -> list[str]:
    """Keys that differ from the baseline `choose_baseline` picks (the given recipe on the same lane, the lane's last
    boot of this recipe, the parent); [] without one."""
    return choose_baseline(recipe, baseline, recipes_dir=recipes_dir)[1]


def renderings(recipe: Recipe, keys: list[str]) -> dict[str, KeyRendering]:
    """{key: where the recipe's engine renders it}, for the flag check."""
    return {key: key_rendering(recipe, key) for key in keys}


def expected_values(
    recipe: Recipe, keys: list[str], *, dark: bool = False, port: int | None = None
) -> dict[str, JsonValue]:
    """{key: the value the container must run with} for the flag check (None for a key the recipe does not have).

    That is the recipe's value, except where the boot overrode it: a dark boot (`--dark` or `lane.dark`)
    binds loopback whatever `lane.bind` says, and `--port` moves the main container off `lane.port`.
    """
    overrides: dict[str, JsonValue] = {}
    if dark or recipe.lane.dark:
        overrides["lane.bind"] = LOOPBACK
    if port is not None:
        overrides["lane.port"] = port
    out: dict[str, JsonValue] = {}
    for key in keys:
        if key in overrides:
            out[key] = overrides[key]
            continue
        try:
            out[key] = get_key(recipe, key)
        except RecipeError:
            out[key] = None
    return out
