#!/usr/bin/env python3
"""Snapshot the keys `vllm bench serve --save-result` writes, for `gb300lane bench export --format vllm`.

Reads `vllm/benchmarks/serve.py` from a vLLM wheel as source (no install, no
torch) and extracts, with `ast`:

- the run's header keys: `result_json["<key>"] = ...` in the function that
  saves the result, unconditional ones apart from those under an `if`
  (ramp-up);
- the generation result's keys: the dict literal bound to `result` that has
  `output_throughput` in it (the other one is the pooling models');
- the spec-decode keys: `result["spec_decode_..."] = ...`;
- the percentile keys' templates (`result[f"mean_{metric}_ms"]`, ...) with the
  metrics `process_one_metric` is called for, the generation default
  (`--percentile-metrics`) and the default `--metric-percentiles`;
- the keys dropped unless `--save-detailed` (the `for field in [...]` list).

Usage:
    pip download vllm==0.33.0 --no-deps -d /tmp/vllm-wheel
    python scripts/snapshot_vllm_bench_keys.py /tmp/vllm-wheel/vllm-0.33.0-*.whl

writes gb300lane/data/vllm-<version>-bench-serve-keys.json (sorted, stable, reviewable).
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
SERVE = "vllm/benchmarks/serve.py"


def _const_key(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _template(node: ast.expr) -> str | None:
    """`f"mean_{metric_attribute_name}_ms"` -> `mean_{metric}_ms`; `f"p{p_word}_{...}_ms"` -> `p{p}_{metric}_ms`."""
    if not isinstance(node, ast.JoinedStr):
        return None
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
            out.append("{metric}" if part.value.id == "metric_attribute_name" else "{p}")
        else:
            return None
    return "".join(out)


def _subscript_assigns(tree: ast.AST, name: str) -> list[tuple[ast.expr, bool]]:
    """(key expression, under an `if`) of every `name[key] = ...` in `tree`."""
    found: list[tuple[ast.expr, bool]] = []

    def visit(node: ast.AST, conditional: bool) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name:
                    found.append((target.slice, conditional))
        for child in ast.iter_child_nodes(node):
            nested = conditional or isinstance(node, (ast.If, ast.For, ast.While, ast.Try))
            visit(child, nested if not isinstance(child, ast.FunctionDef) else False)

    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in fn.body:
                visit(stmt, False)
    return found


def _function(tree: ast.Module, predicate: Any) -> ast.AsyncFunctionDef | ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and predicate(node):
            return node
    raise SystemExit(f"{SERVE}: no function matching the expected shape; update scripts/snapshot_vllm_bench_keys.py")


def _assigns_name(fn: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
        for n in ast.walk(fn)
    )


def snapshot(wheel: Path) -> dict[str, Any]:
    match = re.match(r"vllm-([0-9][^-]*)-", wheel.name)
    if not match:
        raise SystemExit(f"{wheel}: not a vllm wheel name (expected vllm-<version>-...whl)")
    version = match.group(1)
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(SERVE).decode("utf-8")
    tree = ast.parse(text)

    saver = _function(tree, lambda f: _assigns_name(f, "result_json"))
    header = [
        (k, cond)
        for k, cond in ((_const_key(s), c) for s, c in _subscript_assigns(saver, "result_json"))
        if k is not None
    ]
    detailed: list[str] = []
    for node in ast.walk(saver):
        if (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and node.target.id == "field"
            and isinstance(node.iter, ast.List)
        ):
            detailed = [k for k in (_const_key(e) for e in node.iter.elts) if k is not None]
    if not detailed:
        raise SystemExit(f"{SERVE}: no save_detailed field list found; update scripts/snapshot_vllm_bench_keys.py")

    bench = _function(tree, lambda f: f.name == "benchmark")
    generation: list[str] = []
    for node in ast.walk(bench):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "result" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            keys = [k for k in (_const_key(e) for e in node.value.keys if e is not None) if k is not None]
            if "output_throughput" in keys:
                generation = keys
    if not generation:
        raise SystemExit(f"{SERVE}: no generation result dict found; update scripts/snapshot_vllm_bench_keys.py")
    spec_decode = sorted(
        {
            k
            for k in (_const_key(s) for s, _ in _subscript_assigns(bench, "result"))
            if k is not None and k.startswith("spec_decode_")
        }
    )
    templates = sorted({t for t in (_template(s) for s, _ in _subscript_assigns(bench, "result")) if t is not None})
    metrics = []
    for node in ast.walk(bench):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "process_one_metric"
            and node.args
            and _const_key(node.args[0])
        ):
            metrics.append(_const_key(node.args[0]))

    main_fn = _function(tree, lambda f: _assigns_name(f, "default_percentile_metrics"))
    defaults = [
        _const_key(n.value)
        for n in ast.walk(main_fn)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "default_percentile_metrics" for t in n.targets)
    ]
    metric_percentiles = None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
            and _const_key(node.args[0]) == "--metric-percentiles"
        ):
            metric_percentiles = next(_const_key(kw.value) for kw in node.keywords if kw.arg == "default")
    if not defaults or metric_percentiles is None:
        raise SystemExit(f"{SERVE}: no percentile defaults found; update scripts/snapshot_vllm_bench_keys.py")
    return {
        "schema_version": 1,
        "vllm_version": version,
        "source": {
            "wheel": wheel.name,
            "files": {SERVE: hashlib.sha256(text.encode()).hexdigest()},
            "generator": "scripts/snapshot_vllm_bench_keys.py",
        },
        "save_result": {
            "header_keys": sorted(k for k, cond in header if not cond),
            "conditional_header_keys": sorted(k for k, cond in header if cond),
            "generation_keys": sorted(generation),
            "detailed_only_keys": sorted(detailed),
            "spec_decode_keys": spec_decode,
            "percentile_key_templates": templates,
            "percentile_metrics": sorted(dict.fromkeys(m for m in metrics if m)),
            "default_percentile_metrics_generation": (defaults[0] or "").split(","),
            "default_metric_percentiles": metric_percentiles.split(","),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="path to a downloaded vllm-<version>-*.whl")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output file (default gb300lane/data/vllm-<version>-bench-serve-keys.json)",
    )
    args = parser.parse_args(argv)
    data = snapshot(args.wheel)
    out = args.out or ROOT / "gb300lane" / "data" / f"vllm-{data['vllm_version']}-bench-serve-keys.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out)
    s = data["save_result"]
    print(
        f"{out}: {len(s['header_keys'])} header keys, {len(s['generation_keys'])} result keys, "
        f"{len(s['spec_decode_keys'])} spec-decode keys, {len(s['percentile_key_templates'])} percentile templates"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
