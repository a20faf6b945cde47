"""Versioned lane recipes: schema, loading with `extends`, engine-schema checks,
diff, fingerprint, lint and rendering into containers.

Everything that boots, measures or promotes a lane reads recipes through this
package's public API.
"""

from gb300lane.recipes.compare import (
    KeyChange,
    RecipeDiff,
    content_hash,
    content_values,
    diff_recipes,
    diff_values,
    fingerprint,
    hash_values,
)
from gb300lane.recipes.containers import ContainerSpec, RenderedLane, compact_json, lane_base_name, render
from gb300lane.recipes.formats import render_compose, render_docker_run, render_json, write_rendered
from gb300lane.recipes.loader import RecipeSummary, get_key, list_recipes, load_recipe, validate_raw
from gb300lane.recipes.rules import LintFinding, effective_k, lint, requires_acknowledgement
from gb300lane.recipes.schema import Recipe, SmokeGate, WindowSpec

__all__ = [
    "ContainerSpec",
    "KeyChange",
    "LintFinding",
    "Recipe",
    "RecipeDiff",
    "RecipeSummary",
    "RenderedLane",
    "SmokeGate",
    "WindowSpec",
    "compact_json",
    "content_hash",
    "content_values",
    "diff_recipes",
    "diff_values",
    "effective_k",
    "fingerprint",
    "get_key",
    "hash_values",
    "lane_base_name",
    "lint",
    "list_recipes",
    "load_recipe",
    "render",
    "render_compose",
    "render_docker_run",
    "render_json",
    "requires_acknowledgement",
    "validate_raw",
    "write_rendered",
]
