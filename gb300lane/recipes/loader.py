"""Loading recipes: name -> file, `extends` resolution, validation, key lookup.

A recipe file may extend a parent; the merge is deep for mappings and
replaces lists and scalars. The merged mapping is checked against the engine
schema of the image's vLLM version, then validated into a frozen `Recipe`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, JsonValue, ValidationError

from gb300lane import paths
from gb300lane.errors import RecipeError
from gb300lane.models import FrozenModel, format_validation_error, key_text
from gb300lane.names import name_problem
from gb300lane.recipes.engine_schema import validate_engine_keys
from gb300lane.recipes.schema import Recipe
from gb300lane.recipes.yamlio import parse_document, read_text

#: Extends chains deeper than this are almost certainly a mistake.
MAX_EXTENDS_DEPTH = 16


class RecipeSummary(FrozenModel):
    """One line of `recipes list`."""

    name: str = Field(description="Recipe name (version).")
    extends: str | None = Field(description="Parent recipe, if any.")
    engine: str | None = Field(description="vllm or embedded (None when the recipe does not load).")
    description: str = Field(description="One-line description.")
    path: str = Field(description="The recipe file.")
    error: str | None = Field(default=None, description="Why the recipe does not load, if it does not.")


def _dirs(recipes_dir: Path | None) -> tuple[Path, ...]:
    """The folders a name is looked up in, first match first (see `paths.recipe_dirs`)."""
    return (Path(recipes_dir),) if recipes_dir is not None else paths.recipe_dirs()


def _find(name: str, dirs: tuple[Path, ...]) -> Path:
    problem = name_problem(name, "recipe name")
    if problem:
        raise RecipeError(f"{problem} (a name, not a path; recipes live in the recipes directory)")
    for d in dirs:
        if (d / f"{name}.yaml").is_file():
            return d / f"{name}.yaml"
    return dirs[0] / f"{name}.yaml"


def recipe_path(name: str, recipes_dir: Path | None = None) -> Path:
    """The file a recipe name refers to (the first folder that has it); names are stems, never paths."""
    return _find(name, _dirs(recipes_dir))


def _available(dirs: tuple[Path, ...]) -> list[Path]:
    """One file per recipe name across the folders, the first folder's copy winning, sorted by name."""
    found: dict[str, Path] = {}
    for d in dirs:
        for p in sorted(d.glob("*.yaml")):
            found.setdefault(p.stem, p)
    return [found[k] for k in sorted(found)]


def deep_merge(parent: Mapping[str, object], child: Mapping[str, object]) -> dict[str, object]:
    """Mappings merge key by key; lists and scalars in the child replace the parent's."""
    out = dict(parent)
    for key, value in child.items():
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = deep_merge(current, value)
        else:
            out[key] = value
    return out


def _raw_chain(name: str, dirs: tuple[Path, ...]) -> tuple[dict[str, Any], str, dict[str, str]]:
    """Merged raw mapping, the child's source name, and where each dotted key was set ("file:line")."""
    chain: list[str] = []
    layers: list[tuple[dict[str, Any], str, dict[str, int]]] = []
    current: str | None = name
    referrer: str | None = None
    while current is not None:
        if current in chain:
            cycle = " -> ".join([*chain, current])
            raise RecipeError(f"{_source(_find(name, dirs))}: extends cycle {cycle}; remove one `extends`")
        if len(chain) >= MAX_EXTENDS_DEPTH:
            raise RecipeError(f"{_source(_find(name, dirs))}: extends chain deeper than {MAX_EXTENDS_DEPTH}")
        path = _find(current, dirs)
        source = _source(path)
        if not path.is_file():
            if referrer is None:
                available = ", ".join(p.stem for p in _available(dirs)) or "none"
                raise RecipeError(f"{source}: no recipe named {current!r} (available: {available})")
            raise RecipeError(
                f"{referrer}: extends = {current!r} but {source} does not exist; fix `extends` or add the parent recipe"
            )
        data, lines = parse_document(read_text(path, source), source)
        declared = data.get("name")
        if declared is not None and declared != current:
            raise RecipeError(
                f"{source}:{lines.get('name', 1)}: name = {declared!r} but the file is {path.name}; "
                f"set name: {current} (a recipe's name is its file stem)"
            )
        parent = data.get("extends")
        if parent is not None and (not isinstance(parent, str) or name_problem(parent) is not None):
            raise RecipeError(
                f"{source}:{lines.get('extends', 1)}: extends = {parent!r} is not a recipe name; "
                "name the parent recipe (no paths)"
            )
        chain.append(current)
        layers.append((data, source, lines))
        referrer = f"{source}:{lines.get('extends', 1)}"
        current = parent
    merged: dict[str, Any] = {}
    for data, _, _ in reversed(layers):
        merged = deep_merge(merged, data)
    # Identity keys belong to the child alone.
    child, child_source, _ = layers[0]
    merged["name"] = name
    merged["extends"] = child.get("extends")
    if "description" in child:
        merged["description"] = child["description"]
    # The file that set a key last is the one an error about it should name.
    origins: dict[str, str] = {}
    for _, layer_source, layer_lines in reversed(layers):
        origins.update({key: f"{layer_source}:{line}" for key, line in layer_lines.items()})
    return merged, child_source, origins


def _source(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _where(key: str, source: str, origins: dict[str, str]) -> str:
    """ "file:line" of the key (or of its nearest parent mapping), else the source alone."""
    parts = key.split(".")
    while parts:
        found = origins.get(".".join(parts))
        if found:
            return found
        parts.pop()
    return source


def validate_raw(raw: Mapping[str, object], source: str, origins: dict[str, str] | None = None) -> Recipe:
    """Validate a merged mapping into a Recipe; errors name file, line, key and fix.

    `origins` maps dotted keys to the "file:line" that set them (from the extends chain).
    """
    origins = origins or {}
    _unknown_top_level(raw, source, origins)
    validate_engine_keys(raw, lambda key: _where(key, source, origins))
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        raise RecipeError(
            format_validation_error(
                exc,
                where=lambda key: _where(key, source, origins),
                missing="missing; add it here or in a parent recipe",
            )
        ) from None


def _unknown_top_level(raw: Mapping[str, object], source: str, origins: dict[str, str]) -> None:
    known = list(Recipe.model_fields)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            fix = f"did you mean {close[0]!r}?" if close else "remove it"
            where = _where(str(key), source, origins)
            raise RecipeError(f"{where}: {key_text(key)}: unknown recipe key; {fix}")


def load_recipe(name: str, recipes_dir: Path | None = None) -> Recipe:
    """The named recipe, `extends` merged, validated against the schema and the engine snapshot."""
    raw, source, origins = _raw_chain(name, _dirs(recipes_dir))
    return validate_raw(raw, source, origins)


def list_recipes(recipes_dir: Path | None = None) -> list[RecipeSummary]:
    """Every recipe that can be named, resolved, sorted by name; one that does not load carries its error."""
    dirs = _dirs(recipes_dir)
    out = []
    for path in _available(dirs):
        try:
            recipe = load_recipe(path.stem, recipes_dir)
        except RecipeError as exc:
            # One broken file must not hide the others: list it with its error.
            out.append(
                RecipeSummary(
                    name=path.stem, extends=None, engine=None, description="", path=_source(path), error=str(exc)
                )
            )
            continue
        out.append(
            RecipeSummary(
                name=recipe.name,
                extends=recipe.extends,
                engine=recipe.engine,
                description=recipe.description,
                path=_source(path),
            )
        )
    return out


def get_key(recipe: Recipe, dotted: str) -> JsonValue:
    """The value at a dotted path (`speculative.rejection_sample_method`); RecipeError if none."""
    node: JsonValue = recipe.model_dump(mode="json")
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise RecipeError(f"recipe {recipe.name}: no key {dotted!r}; dotted keys look like speculative.method")
    return node


def flatten(value: object, prefix: str = "") -> dict[str, object]:
    """Dotted leaf paths of a JSON-like value; lists are leaves (they replace, never merge)."""
    if isinstance(value, dict):
        # An empty mapping has no leaves: absent and {} configure the same thing.
        out: dict[str, object] = {}
        for key, sub in value.items():
            out.update(flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}
