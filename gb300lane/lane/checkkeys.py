"""Which recipe keys a boot's flag check verifies in the container's args, and their expected values.

By default those are the keys that differ from a baseline recipe: the caller
names it (the promotion layer passes production), else it is the recipe's
parent (`extends`). The lane never looks the baseline up itself.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import JsonValue

from gb300lane.errors import RecipeError
from gb300lane.recipes import Recipe, diff_recipes, get_key, load_recipe
from gb300lane.recipes.containers import LOOPBACK


def default_check_keys(recipe: Recipe, baseline: str | None, *, recipes_dir: Path | None = None) -> list[str]:
    """Keys that differ from `baseline` (when given and not this recipe), else from the parent; [] without either."""
    base_name = baseline if baseline and baseline != recipe.name else recipe.extends
    if base_name is None:
        return []
    try:
        base = load_recipe(base_name, recipes_dir)
    except RecipeError:
        return []
    return [c.key for c in diff_recipes(base, recipe).changes]


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
