"""The one strict YAML reader, for recipe and card files alike.

PyYAML's SafeLoader silently keeps the last of two duplicate keys, expands
aliases without limit, follows a recursive anchor into a RecursionError and
takes minutes over a file with a million keys. A recipe boots a GPU lane and a
card decides a promotion, so here each of those is a one-line error that names
the file (and the line where there is one):

- a file larger than `MAX_FILE_BYTES`, or with more than `MAX_NODES` nodes or
  deeper than `MAX_DEPTH`, is refused (reading it is bounded in time and memory);
- a duplicate key, an alias that refers to itself, more than `MAX_ALIASES`
  aliases or aliases that expand past `MAX_ALIAS_NODES` nodes are refused;
- `.inf` / `.nan` (and a number too large for a float) are refused: no recipe
  or card value is meaningfully infinite;
- the file must be UTF-8 and hold exactly one non-empty mapping.

Errors are raised as the caller's `LaneError` subclass (`RecipeError` for
recipes, `CardError` for cards).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gb300lane.errors import LaneError, RecipeError

#: Largest recipe or card file read, in bytes (the shipped ones are under 4 KiB).
MAX_FILE_BYTES = 256 * 1024
#: Most YAML nodes (scalars, sequences, mappings) one document may hold, aliases expanded.
MAX_NODES = 20_000
#: Deepest nesting of sequences and mappings.
MAX_DEPTH = 64
#: Aliases a document may use before it is treated as an alias bomb.
MAX_ALIASES = 64
#: Total nodes aliases may pull in across the document.
MAX_ALIAS_NODES = 10_000


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, recursive anchors, non-finite floats, and bounds size and depth."""

    def __init__(self, stream: str, source: str, error: type[LaneError]) -> None:
        super().__init__(stream)
        self.source = source
        self.error = error
        self.alias_count = 0
        self.alias_nodes = 0
        self.nodes = 0
        self.depth = 0
        self.open_anchors: set[str] = set()

    def _fail(self, mark: Any, message: str) -> LaneError:
        where = f":{mark.line + 1}" if mark is not None else ""
        return self.error(f"{self.source}{where}: {message}")

    def compose_node(self, parent: Any, index: Any) -> Any:  # PyYAML hook
        peek: Callable[[], Any] = self.peek_event  # PyYAML's stubs leave it untyped
        event = peek()
        if self.check_event(yaml.AliasEvent):
            if event.anchor in self.open_anchors:
                raise self._fail(
                    event.start_mark,
                    f"the alias *{event.anchor} refers to its own anchor (a recursive YAML anchor); "
                    "write the value out instead",
                )
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                raise self._fail(
                    event.start_mark,
                    f"more than {MAX_ALIASES} YAML aliases; write the values out instead of aliasing them",
                )
            node = super().compose_node(parent, index)
            self.alias_nodes += _count_nodes(node)
            if self.alias_nodes > MAX_ALIAS_NODES:
                raise self._fail(
                    event.start_mark,
                    f"YAML aliases expand to more than {MAX_ALIAS_NODES} nodes (an alias bomb); "
                    "write the values out instead of aliasing them",
                )
            return node
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self._fail(event.start_mark, f"more than {MAX_NODES} YAML nodes; a recipe or card is a few hundred")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self._fail(event.start_mark, f"nested deeper than {MAX_DEPTH} levels; flatten the structure")
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self.open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            if anchor is not None:
                self.open_anchors.discard(anchor)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    hash(key)
                except TypeError:
                    raise self.error(f"{self.source}:{line}: a mapping key must be a plain scalar") from None
                if key in seen:
                    raise self.error(
                        f"{self.source}:{line}: duplicate key {key!r} (first at line {seen[key]}); "
                        "keep one of them, YAML would silently drop the first"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_float(self, node: Any) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise self._fail(node.start_mark, f"{node.value!r} is not a finite number; write a finite value")
        return value


_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)


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


def _key_lines(root: Any) -> dict[str, int]:
    """Dotted key path -> line number (1-based) over a composed document, for error messages."""
    lines: dict[str, int] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                    if path not in lines:
                        lines[path] = key_node.start_mark.line + 1
                        walk(value_node, path)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                path = f"{prefix}.{i}"
                if path not in lines:
                    lines[path] = item.start_mark.line + 1
                    walk(item, path)

    # The composer bounded the depth (MAX_DEPTH) and refused recursive anchors, so this terminates.
    if root is not None:
        walk(root, "")
    return lines


def read_text(
    path: str | os.PathLike[str],
    source: str | None = None,
    *,
    error: type[LaneError] = RecipeError,
    what: str = "recipe",
) -> str:
    """A recipe or card file's text: at most MAX_FILE_BYTES of UTF-8, else a one-line error naming the file."""
    source = source or str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{source}: file not found") from None
    except OSError as exc:
        raise error(f"{source}: cannot read ({exc.strerror or exc}); check the path and its permissions") from None
    if len(data) > MAX_FILE_BYTES:
        raise error(
            f"{source}: larger than {MAX_FILE_BYTES // 1024} KiB; a {what} file is a few KiB of YAML "
            "(is this the right file?)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{source}: not UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r}); save the {what} as UTF-8"
        ) from None


def _compose(text: str, source: str, error: type[LaneError]) -> tuple[Any, Any]:
    """(the composed root node, the value built from it) through the strict loader; one-line errors."""
    if len(text) > MAX_FILE_BYTES:
        raise error(f"{source}: larger than {MAX_FILE_BYTES // 1024} KiB; refusing to parse it")
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text, source, error)  # its reader already refuses control characters
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    except LaneError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        if isinstance(exc, yaml.reader.ReaderError):  # no mark: the reader counts characters
            where = f":{text.count(chr(10), 0, exc.position) + 1}"
        problem = getattr(exc, "problem", None) or _one_line(str(exc)).split(' in "<unicode string>"')[0]
        raise error(f"{source}{where}: invalid YAML ({_one_line(problem)}); fix the syntax at that line") from None
    except (ValueError, TypeError, OverflowError, AttributeError, KeyError, IndexError, RecursionError) as exc:
        # A value PyYAML cannot build (an explicit tag on the wrong text, e.g. `!!int abc`).
        raise error(
            f"{source}: invalid YAML value ({_one_line(str(exc)) or type(exc).__name__}); fix the value"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def parse_value(text: str, source: str, *, error: type[LaneError] = RecipeError) -> object:
    """Any one YAML value (a scalar, a list, a mapping) through the strict loader, e.g. a `--set KEY=VALUE` value."""
    return _compose(text, source, error)[1]


def parse_document(
    text: str,
    source: str,
    *,
    error: type[LaneError] = RecipeError,
    what: str = "a recipe is a YAML mapping (schema_version: 1, name: ...)",
) -> tuple[dict[str, object], dict[str, int]]:
    """Parse YAML text that must hold a single non-empty mapping; returns it and where each dotted key is (line)."""
    root, data = _compose(text, source, error)
    if data is None:
        raise error(f"{source}: the file is empty; {what}")
    if not isinstance(data, dict):
        raise error(f"{source}:1: the document is a {type(data).__name__}, not a mapping; {what}")
    return data, _key_lines(root)


def parse_mapping(
    text: str, source: str, *, error: type[LaneError] = RecipeError, what: str | None = None
) -> dict[str, object]:
    """Parse YAML text that must hold a single non-empty mapping."""
    if what is None:
        return parse_document(text, source, error=error)[0]
    return parse_document(text, source, error=error, what=what)[0]


def load_mapping(path: Path, source: str | None = None, *, error: type[LaneError] = RecipeError) -> dict[str, object]:
    """Read one YAML file that must hold a single non-empty mapping."""
    source = source or str(path)
    return parse_mapping(read_text(path, source, error=error), source, error=error)


def key_lines(text: str) -> dict[str, int]:
    """Dotted key path -> line number (1-based), for error messages; empty when the text does not parse."""
    try:
        return parse_document(text, "<text>")[1]
    except LaneError:
        return {}


def _one_line(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= 160 else text[:157] + "..."
