"""Strict YAML reading for recipe files.

PyYAML's SafeLoader silently keeps the last of two duplicate keys and expands
aliases without limit; a recipe is configuration that boots a GPU lane, so
both are errors here. A recipe file must hold exactly one non-empty mapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gb300lane.errors import RecipeError

#: Aliases a recipe may use before the file is treated as an alias bomb.
MAX_ALIASES = 64
#: Total nodes an alias may pull in across the document.
MAX_ALIAS_NODES = 10_000


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and bounds alias expansion."""

    def __init__(self, stream: Any, source: str) -> None:
        super().__init__(stream)
        self.source = source
        self.alias_count = 0
        self.alias_nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D401 - PyYAML hook
        if self.check_event(yaml.AliasEvent):
            self.alias_count += 1
            event = self.peek_event()
            if self.alias_count > MAX_ALIASES:
                raise RecipeError(
                    f"{self.source}:{event.start_mark.line + 1}: more than {MAX_ALIASES} YAML aliases; "
                    "write the values out instead of aliasing them"
                )
            node = super().compose_node(parent, index)
            self.alias_nodes += _count_nodes(node)
            if self.alias_nodes > MAX_ALIAS_NODES:
                raise RecipeError(
                    f"{self.source}:{event.start_mark.line + 1}: YAML aliases expand to more than "
                    f"{MAX_ALIAS_NODES} nodes (an alias bomb); write the values out instead of aliasing them"
                )
            return node
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    hash(key)
                except TypeError:
                    raise RecipeError(f"{self.source}:{line}: a mapping key must be a plain scalar") from None
                if key in seen:
                    raise RecipeError(
                        f"{self.source}:{line}: duplicate key {key!r} (first at line {seen[key]}); "
                        "keep one of them, YAML would silently drop the first"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _count_nodes(node: Any, _memo: dict[int, int] | None = None) -> int:
    """Nodes the subtree expands to when every alias is written out (shared subtrees counted each time)."""
    memo = _memo if _memo is not None else {}
    if id(node) in memo:
        if memo[id(node)] < 0:
            # A node that contains itself expands without end.
            return MAX_ALIAS_NODES + 1
        return memo[id(node)]
    memo[id(node)] = -1
    total = 1
    if isinstance(node, yaml.MappingNode):
        total += sum(_count_nodes(k, memo) + _count_nodes(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        total += sum(_count_nodes(v, memo) for v in node.value)
    memo[id(node)] = min(total, MAX_ALIAS_NODES + 1)
    return memo[id(node)]


def key_lines(text: str) -> dict[str, int]:
    """Dotted key path -> line number (1-based), for error messages; best effort."""
    lines: dict[str, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return lines

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                    lines.setdefault(path, key_node.start_mark.line + 1)
                    walk(value_node, path)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                path = f"{prefix}.{i}"
                lines.setdefault(path, item.start_mark.line + 1)
                walk(item, path)

    if root is not None:
        walk(root, "")
    return lines


def load_mapping(path: Path, source: str | None = None) -> dict[str, Any]:
    """Read one YAML file that must hold a single non-empty mapping."""
    source = source or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(f"{source}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"{source}: cannot read ({exc}); the recipe must be a UTF-8 YAML file") from exc
    return parse_mapping(text, source)


def parse_mapping(text: str, source: str) -> dict[str, Any]:
    """Parse YAML text that must hold a single non-empty mapping."""
    loader = _StrictLoader(text, source)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(f"{source}{where}: invalid YAML ({problem}); fix the syntax at that line") from None
    finally:
        loader.dispose()
    if data is None:
        raise RecipeError(f"{source}: the file is empty; a recipe is a YAML mapping (schema_version: 1, name: ...)")
    if not isinstance(data, dict):
        raise RecipeError(
            f"{source}:1: the document is a {type(data).__name__}, not a mapping; "
            "a recipe is a YAML mapping of keys (schema_version: 1, name: ...)"
        )
    return data
