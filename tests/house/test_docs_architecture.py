"""docs/architecture.md follows the code: its list of contracts is pyproject.toml's, and its list of the modules
that import the embedded engine is the import graph's."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def _block(name: str) -> list[str]:
    m = re.search(rf"<!-- {name} -->\n(.*?)<!-- /{name} -->", DOC.read_text(), re.S)
    assert m, f"docs/architecture.md has no <!-- {name} --> block"
    return [line for line in m.group(1).splitlines() if line.strip()]


def _strip(module: str, container: str | None) -> str:
    return module.removeprefix(f"{container}.") if container else module.removeprefix("gb300lane.")


def _contract_line(c: dict[str, Any]) -> str:
    kind = c["type"]
    if kind == "layers":
        containers = c.get("containers") or [None]
        where = f" (in {_strip(containers[0], None)})" if containers[0] else ""
        layers = " -> ".join(
            " : ".join(_strip(m.strip(), containers[0]) for m in layer.split(":"))
            if ":" in layer
            else layer.replace("gb300lane.", "")
            for layer in c["layers"]
        )
        return f"- {c['name']}: layers{where} {layers}"
    if kind == "forbidden":
        return f"- {c['name']}: forbidden {', '.join(c['source_modules'])} -> {', '.join(c['forbidden_modules'])}"
    if kind == "acyclic_siblings":
        return f"- {c['name']}: acyclic_siblings {', '.join(c['ancestors'])}"
    raise AssertionError(f"no line for a {kind} contract: add one here and to docs/architecture.md")


def test_the_documented_contracts_are_the_declared_ones() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert _block("contracts") == [_contract_line(c) for c in contracts]


def test_the_documented_engine_importers_are_the_import_graphs() -> None:
    graph = grimp.build_graph("gb300lane", cache_dir=None)
    engine = {m for m in graph.modules if m == "gb300lane.engine" or m.startswith("gb300lane.engine.")}
    importers = {i for m in engine for i in graph.find_modules_that_directly_import(m)} - engine
    assert _block("engine-importers") == [f"- {m}" for m in sorted(importers)]
